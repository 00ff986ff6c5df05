/* cmd_ladder.h: `tandem quantize SRC --ladder`, choosing a model's quantization by its decisions.
 *
 * Every candidate type is sized by the engine's dry run and planned beside
 * the partner before anything is built; the rungs that fit are bisected
 * toward the smallest one whose decisions stay within the flip gate, each
 * built with the decision head protected, served by the real engine and
 * judged against the source on held-out cases with `tandem drift`'s own
 * comparison. docs/quantize.md describes the workflow and its numbers. */
#ifndef TANDEM_CMD_LADDER_H
#define TANDEM_CMD_LADDER_H

/* Runs the ladder with quantize's argv (argv[0] = "quantize", --ladder among
 * the options). Returns 0 when a rung was recommended, 1 when none passed or
 * the work failed (the table of what was measured is still printed), 2 for a
 * usage error. */
int cmd_ladder_main(int argc, char **argv, const char *llama_server);

#endif
