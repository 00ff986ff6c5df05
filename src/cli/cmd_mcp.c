/* cmd_mcp.c: `tandem mcp`, an MCP server on stdio for agents (docs/mcp.md).
 *
 * The command resolves the daemon and hands stdin and stdout to the bridge
 * (flow/mcp_stdio), which holds the protocol's transport, the call threads,
 * the progress watcher and the event follower. The daemon is --url, else
 * --config's listen address, else http://127.0.0.1:8090. With --config and
 * nothing listening there, mcp starts a private daemon on that config
 * (flow/private_daemon) and stops it when stdin ends. Only protocol messages
 * go to stdout; this file's messages go to stderr. */
#include "cli/cmd_mcp.h"

#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "flow/mcp_stdio.h"
#include "flow/private_daemon.h"
#include "serve/config.h"

#define DEFAULT_URL "http://127.0.0.1:8090"

static volatile sig_atomic_t got_signal;

static void on_signal(int sig) { got_signal = sig; }

/* --- the command -------------------------------------------------------------------------- */

struct mcp_opts {
    const char *url, *config, *llama_server;
    bool verbose;
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem mcp [--url URL | --config FILE] [--verbose]\n"
            "\n"
            "An MCP server on stdio (JSON-RPC, one message per line) for AI agents: tandem's\n"
            "pipelines as decide_<pipeline> tools, its decision models as the systemone tool,\n"
            "and status. Tool calls go to a running daemon; with --config and no daemon\n"
            "listening at its address, mcp starts a private one and stops it on exit.\n"
            "Only protocol messages go to stdout; logs go to stderr. docs/mcp.md has the\n"
            "agent configuration and the tools' results.\n"
            "\n"
            "  --url URL      the daemon (default: --config's listen address, else %s)\n"
            "  --config FILE  the tandem.yaml: its address, and a private daemon when none listens\n"
            "  --verbose      the private daemon's log on stderr\n"
            "\n"
            "The API key, if the daemon wants one, is read from $TANDEM_API_KEY (else the\n"
            "config's first api_keys entry).\n",
            DEFAULT_URL);
}

static int parse_args(int argc, char **argv, struct mcp_opts *o) {
    static const struct option longs[] = {{"url", required_argument, NULL, 'u'},
                                          {"config", required_argument, NULL, 'c'},
                                          {"verbose", no_argument, NULL, 'v'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    optind = 1;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
        switch (ch) {
        case 'u': o->url = optarg; break;
        case 'c': o->config = optarg; break;
        case 'v': o->verbose = true; break;
        case 'h': usage(stdout); return -1;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tandem mcp: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    return 0;
}

static void install_signals(void) {
    struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: read() returns */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int cmd_mcp_main(int argc, char **argv, const char *llama_server) {
    struct mcp_opts o = {.llama_server = llama_server};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    struct mcp_stdio_params sp = mcp_stdio_default_params();
    sp.api_key = getenv("TANDEM_API_KEY");
    sp.stop = &got_signal;
    struct config *cfg = NULL;
    char err[1024], url[300] = "";
    if (o.config && config_load(o.config, &cfg, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem mcp: %s\n", err);
        return 2;
    }
    if (!sp.api_key && cfg && cfg->n_api_keys)
        sp.api_key = cfg->api_keys[0];
    if (o.url)
        snprintf(url, sizeof url, "%s", o.url);
    else if (cfg)
        config_listen_url(cfg, url, sizeof url);
    if (!url[0])
        snprintf(url, sizeof url, "%s", o.config ? "" : DEFAULT_URL);
    sp.url = url;
    struct mcp_stdio *s = mcp_stdio_new(&sp);
    install_signals();
    struct private_daemon *d = NULL;
    bool up = s && url[0] && mcp_stdio_refresh_catalog(s);
    if (s && !up && o.config && !o.url) {
        struct private_daemon_params p = {.command = "tandem mcp", .config = o.config,
                                          .llama_server = o.llama_server, .verbose = o.verbose};
        if (private_daemon_start(&p, &d) == TANDEM_OK) {
            mcp_stdio_set_url(s, private_daemon_url(d));
            up = mcp_stdio_refresh_catalog(s);
        }
    }
    if (!s) {
        fprintf(stderr, "tandem mcp: out of memory\n");
        rc = 1;
    } else if (o.config && !o.url && !d && !up) {
        rc = 1; /* the private daemon's failure is on stderr */
    } else {
        if (!up)
            fprintf(stderr, "tandem mcp: no daemon answers at %s yet; the tools appear when "
                            "one does (notifications/tools/list_changed)\n", mcp_stdio_url(s));
        else
            fprintf(stderr, "tandem mcp: serving MCP on stdio for the daemon at %s\n",
                    mcp_stdio_url(s));
        mcp_stdio_run(s, STDIN_FILENO, stdout);
    }
    private_daemon_stop(d, false);
    mcp_stdio_free(s);
    config_free(cfg);
    return rc;
}
