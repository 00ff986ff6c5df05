/* cmd_imatrix.h: `tandem imatrix`, an importance matrix from the user's own
 * decision requests (flow/imatrix.h builds it; the ladder calls that too). */
#ifndef TANDEM_CMD_IMATRIX_H
#define TANDEM_CMD_IMATRIX_H

/* `tandem imatrix MODEL.gguf --data SET.jsonl [--out F] [--calibration-share X] [--seed N]
 * [--text-out F] [--verbose]`. Returns the exit code: 0, 1 failed, 2 usage. */
int cmd_imatrix_main(int argc, char **argv, const char *llama_server);

#endif
