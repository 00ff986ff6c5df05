/* cmd_footprint.h: `tandem footprint`, the footprint cache's command line. */
#ifndef TANDEM_CMD_FOOTPRINT_H
#define TANDEM_CMD_FOOTPRINT_H

/* Runs `tandem footprint record|show` with argv[0] = "footprint". Returns the
 * exit code: 0 done, 1 failed, 2 usage error. */
int cmd_footprint_main(int argc, char **argv, const char *llama_server);

#endif
