/* cmd_run.h: `tandem run`, one planned and supervised llama-server. */
#ifndef TANDEM_CMD_RUN_H
#define TANDEM_CMD_RUN_H

/* Runs `tandem run` with argv[0] = "run". Returns the exit code: 0 stopped
 * on request, 1 could not start or the engine died, 2 usage error. */
int cmd_run_main(int argc, char **argv, const char *llama_server);

#endif
