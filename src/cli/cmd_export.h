/* cmd_export.h: `tandem export`, a daemon's stored requests as an eval set
 * (cmd_export.c). */
#ifndef TANDEM_CMD_EXPORT_H
#define TANDEM_CMD_EXPORT_H

/* Runs `tandem export` with argv[0] = "export"; llama_server is unused.
 * Returns 0, 1 (the store cannot be read, or holds nothing to export: stderr
 * says why) or 2 (usage). */
int cmd_export_main(int argc, char **argv, const char *llama_server);

#endif
