/* cmd_doctor.h: `tandem doctor`, the machine check. */
#ifndef TANDEM_CMD_DOCTOR_H
#define TANDEM_CMD_DOCTOR_H

/* Runs `tandem doctor` with its own argv (argv[0] = "doctor"). llama_server is
 * the global --llama-server value or NULL. Prints the report on stdout.
 * Returns the process exit status: 0 when the engine can serve decision
 * models, 1 when a check failed, 2 on a usage error. */
int cmd_doctor_main(int argc, char **argv, const char *llama_server);

#endif
