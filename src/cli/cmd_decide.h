/* cmd_decide.h: `tandem decide`, one pipeline request for scripts (cmd_decide.c). */
#ifndef TANDEM_CMD_DECIDE_H
#define TANDEM_CMD_DECIDE_H

/* Runs `tandem decide` with argv[0] = "decide". llama_server is the global
 * --llama-server flag (NULL = the usual lookup), passed on to a private
 * daemon. Returns the exit code: 0 accepted, 3 rejected, 4 escalated,
 * 1 failure, 2 usage or configuration error. */
int cmd_decide_main(int argc, char **argv, const char *llama_server);

#endif
