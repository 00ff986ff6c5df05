/* cmd_gguf.h: `tandem gguf set|rm|dump`, editing and dumping GGUF metadata. */
#ifndef TANDEM_CMD_GGUF_H
#define TANDEM_CMD_GGUF_H

/* Runs `tandem gguf <set|rm|dump> ...` (argv[0] = "gguf"). Returns the exit
 * status: 0 ok, 1 failed (one line on stderr), 2 usage error. */
int cmd_gguf_main(int argc, char **argv, const char *llama_server);

#endif
