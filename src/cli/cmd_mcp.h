/* cmd_mcp.h: `tandem mcp`, an MCP server on stdio for agents (cmd_mcp.c). */
#ifndef TANDEM_CMD_MCP_H
#define TANDEM_CMD_MCP_H

/* Runs `tandem mcp` with argv[0] = "mcp" until stdin ends or SIGTERM/SIGINT.
 * llama_server is the global --llama-server flag, passed on to a private
 * daemon. Returns the exit code: 0 after serving, 1 when no daemon could be
 * started, 2 for a usage or configuration error. */
int cmd_mcp_main(int argc, char **argv, const char *llama_server);

#endif
