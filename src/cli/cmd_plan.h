/* cmd_plan.h: `tandem plan`, the memory planner's command line. */
#ifndef TANDEM_CMD_PLAN_H
#define TANDEM_CMD_PLAN_H

/* Runs `tandem plan` with argv[0] = "plan". Returns the exit code: 0 planned
 * (whatever the verdict), 1 a model could not be planned, 2 usage error. */
int cmd_plan_main(int argc, char **argv, const char *llama_server);

#endif
