/* cmd_calibrate.h: `tandem calibrate`, refitting a decision model's temperatures.
 *
 * An endpoint serving MODEL.gguf answers a dataset; a power of the served
 * probabilities is fitted per question type (and option-count bucket) on a
 * training split, kept only when the held-out split's NLL improves, and
 * written into a copy of the model as new temperatures with provenance
 * metadata (tandem.calibration.*): flow/calibrate.h does the work.
 * docs/calibrate.md documents it. */
#ifndef TANDEM_CMD_CALIBRATE_H
#define TANDEM_CMD_CALIBRATE_H

/* Runs `tandem calibrate` with its own argv (argv[0] = "calibrate");
 * llama_server (NULL = the usual lookup) is for the private daemon that
 * serves MODEL.gguf without --endpoint. Prints the table (or --json) on
 * stdout. Returns the exit status: 0 the copy was written, 1 the model,
 * dataset, endpoint, fit or write failed (said on stderr), 2 usage error. */
int cmd_calibrate_main(int argc, char **argv, const char *llama_server);

#endif
