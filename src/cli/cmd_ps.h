/* cmd_ps.h: `tandem ps`, `tandem load` and `tandem unload`, a running
 * daemon's models from the command line (cmd_ps.c). */
#ifndef TANDEM_CMD_PS_H
#define TANDEM_CMD_PS_H

/* Each runs its command with argv[0] = its name; llama_server (the global
 * flag) is unused, as they only talk to a daemon. Returns the exit code:
 * 0 the daemon answered, 1 unreachable or refused (stderr says why), 2 usage. */
int cmd_ps_main(int argc, char **argv, const char *llama_server);
int cmd_load_main(int argc, char **argv, const char *llama_server);
int cmd_unload_main(int argc, char **argv, const char *llama_server);

#endif
