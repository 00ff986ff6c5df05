/* cli_ladder.h: `tandem quantize SRC --ladder`, choosing a model's quantization by its decisions.
 *
 * The command side of flow/qladder.h: argument parsing and rendering (the
 * table, --json, --report, --write-config). docs/quantize.md describes the
 * workflow and its numbers. */
#ifndef TANDEM_CLI_LADDER_H
#define TANDEM_CLI_LADDER_H

/* Runs the ladder with quantize's argv (argv[0] = "quantize", --ladder among
 * the options). Returns 0 when a rung was recommended (or, with --plan-only,
 * the plan was printed), 1 when none passed or the work failed (the table of
 * what was measured is still printed), 2 for a usage error. */
int cli_ladder_main(int argc, char **argv, const char *llama_server);

#endif
