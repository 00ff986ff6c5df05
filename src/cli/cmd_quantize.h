/* cmd_quantize.h: `tandem quantize`, the engine's llama-quantize, found for you. */
#ifndef TANDEM_CMD_QUANTIZE_H
#define TANDEM_CMD_QUANTIZE_H

/* Runs `tandem quantize IN OUT TYPE [--allow-requantize]` with its own argv
 * (argv[0] = "quantize"). llama_server is the global --llama-server value or
 * NULL; the tool is taken from the same folder. Returns 0 when the output was
 * written and reads back as GGUF, 1 when the tool failed or is missing, 2 on
 * a usage error. */
int cmd_quantize_main(int argc, char **argv, const char *llama_server);

#endif
