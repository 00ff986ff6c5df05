/* cmd_feedback.h: `tandem feedback`, an outcome reported to a running daemon
 * (POST /v1/feedback) from the command line (cmd_feedback.c). */
#ifndef TANDEM_CMD_FEEDBACK_H
#define TANDEM_CMD_FEEDBACK_H

/* Runs `tandem feedback` with argv[0] = "feedback"; llama_server is unused.
 * Returns 0 (the daemon took the labels), 1 (unreachable or refused: stderr
 * says why) or 2 (usage). */
int cmd_feedback_main(int argc, char **argv, const char *llama_server);

#endif
