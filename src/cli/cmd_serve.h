/* cmd_serve.h: `tandem serve`, the daemon (cmd_serve.c). */
#ifndef TANDEM_CMD_SERVE_H
#define TANDEM_CMD_SERVE_H

/* Runs `tandem serve` with argv[0] = "serve". llama_server is the global
 * --llama-server flag (NULL = the usual lookup; the config's engine.path
 * wins). Returns the exit code: 0 stopped cleanly (or --check passed), 1
 * runtime failure, 2 usage or configuration error. */
int cmd_serve_main(int argc, char **argv, const char *llama_server);

#endif
