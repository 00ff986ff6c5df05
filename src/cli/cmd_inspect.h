/* cmd_inspect.h: `tandem inspect`, what a GGUF model file holds. */
#ifndef TANDEM_CMD_INSPECT_H
#define TANDEM_CMD_INSPECT_H

/* Runs `tandem inspect FILE [--json] [--sha256]` (argv[0] = "inspect").
 * Returns the exit status: 0 ok, 1 unreadable or malformed file (one line on
 * stderr naming the offset), 2 usage error. llama_server is unused. */
int cmd_inspect_main(int argc, char **argv, const char *llama_server);

#endif
