/* cmd_serve.c: `tandem serve --config tandem.yaml`: parses the arguments and
 * runs the daemon (serve/daemon.c), or with --check only prepares it. */
#include "cli/cmd_serve.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "serve/daemon.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem serve --config FILE [--listen ADDR:PORT] [--drain-delay MS] [--check]\n"
            "\n"
            "Serves the models of a tandem.yaml (docs/config.md): POST /v1/systemone,\n"
            "OpenAI-style /v1/chat/completions, /v1/completions and /v1/embeddings,\n"
            "GET /v1/models, /health, /v1/status, /metrics, the event stream\n"
            "GET /v1/events, POST /admin/models/{name}/load|unload (docs/serve.md),\n"
            "and a dashboard at http://ADDR:PORT/ui (docs/ui.md).\n"
            "Models load on demand and stay resident while they fit the budget.\n"
            "\n"
            "  --config FILE      the configuration (required)\n"
            "  --listen ADDR:PORT override the config's listen address\n"
            "  --drain-delay MS   override limits.drain_delay (0: refuse new requests at once\n"
            "                     on SIGTERM; for a daemon no gateway routes to)\n"
            "  --check            validate the config and plan every model, then exit\n"
            "  -h, --help\n"
            "\n"
            "signals: SIGTERM/SIGINT drain and exit 0; SIGHUP re-reads the config\n"
            "exit codes: 0 stopped cleanly or check passed, 1 runtime failure,\n"
            "2 usage or configuration error\n");
}

static int parse_args(int argc, char **argv, struct daemon_params *p, bool *check) {
    static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                         {"listen", required_argument, NULL, 'l'},
                                         {"check", no_argument, NULL, 'k'},
                                         {"drain-delay", required_argument, NULL, 'd'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0}};
    int c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'c': p->config_path = optarg; break;
        case 'l': p->listen = optarg; break;
        case 'k': *check = true; break;
        case 'd': {
            char *end;
            long long ms = strtoll(optarg, &end, 10);
            if (!*optarg || *end || ms < 0 || ms > 3600000) {
                fprintf(stderr, "tandem serve: --drain-delay: expected milliseconds from 0 to "
                        "3600000, got '%s'\n", optarg);
                return 2;
            }
            p->drain_delay_ms = ms;
            break;
        }
        case 'h': usage(stdout); return -1;
        default: usage(stderr); return 2;
        }
    }
    if (!p->config_path || optind != argc) {
        usage(stderr);
        return 2;
    }
    return 0;
}

int cmd_serve_main(int argc, char **argv, const char *llama_server) {
    struct daemon_params p = daemon_default_params();
    p.llama_server = llama_server;
    bool check = false;
    int rc = parse_args(argc, argv, &p, &check);
    if (rc)
        return rc < 0 ? 0 : rc;
    struct daemon *d = NULL;
    tandem_err e = daemon_new(&p, &d);
    if (e == TANDEM_OK && check)
        fprintf(stderr, "tandem serve: %s: configuration OK (%zu models)\n", p.config_path,
                daemon_n_models(d));
    else if (e == TANDEM_OK)
        e = daemon_run(d);
    daemon_free(d);
    return e == TANDEM_OK ? 0 : e == TANDEM_ERR_INVAL ? 2 : 1;
}
