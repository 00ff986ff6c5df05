/* cmd_export.c: `tandem export --since 7d [--labelled]`: the requests a daemon
 * stored, written as an eval-format JSONL (docs/eval-format.md) with their
 * outcomes as gold answers, for `tandem eval`, `calibrate`, a ladder, or a
 * person to read. The store is read directly (flow/dataset, serve/store's
 * reading side), so the daemon may be running or not. */
#include "cli/cmd_export.h"

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "base/units.h"
#include "flow/dataset.h"

#define EXIT_FAILED 1
#define EXIT_USAGE 2

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem export --since DURATION [--config FILE] [--labelled] [--model NAME]\n"
            "                     [--out FILE]\n"
            "\n"
            "Writes the decisions a daemon stored (store.path) in the last DURATION as an eval\n"
            "set (docs/eval-format.md): one case per request, with the outcomes fed back\n"
            "(POST /v1/feedback) as its gold answers. Needs store.bodies: true: without it the\n"
            "store keeps no request texts to export.\n"
            "\n"
            "  --since DURATION  the window: 30m, 24h, 7d ...\n"
            "  --config FILE     the daemon's tandem.yaml (its store.path; default: the\n"
            "                    default store, <cache>/logs/store.db)\n"
            "  --labelled        only requests with feedback\n"
            "  --model NAME      only this model's requests (a pipeline's: its decider)\n"
            "  --out FILE        write here (default: standard output)\n"
            "\n"
            "The same requests are what `--data store:DURATION` reads in tandem eval, drift,\n"
            "calibrate, imatrix and quantize --ladder.\n");
}

struct export_opts {
    const char *config, *out, *since;
    struct store_export_opts o;
};

static int parse(int argc, char **argv, struct export_opts *x) {
    enum { O_SINCE = 256, O_CONFIG, O_LABELLED, O_MODEL, O_OUT };
    static const struct option opts[] = {{"since", required_argument, NULL, O_SINCE},
                                         {"config", required_argument, NULL, O_CONFIG},
                                         {"labelled", no_argument, NULL, O_LABELLED},
                                         {"model", required_argument, NULL, O_MODEL},
                                         {"out", required_argument, NULL, O_OUT},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_SINCE: x->since = optarg; break;
        case O_CONFIG: x->config = optarg; break;
        case O_LABELLED: x->o.labelled = true; break;
        case O_MODEL: x->o.model = optarg; break;
        case O_OUT: x->out = optarg; break;
        case 'h': usage(stdout); return -1;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tandem export: unexpected argument '%s'\n", argv[optind]);
        return EXIT_USAGE;
    }
    if (!x->since || units_parse_ms(x->since, &x->o.since_ms) != TANDEM_OK || x->o.since_ms <= 0) {
        fprintf(stderr, "tandem export: --since: expected a duration like 24h or 7d%s%s\n",
                x->since ? ", got " : "", x->since ? x->since : " (required)");
        return EXIT_USAGE;
    }
    return 0;
}

int cmd_export_main(int argc, char **argv, const char *llama_server) {
    (void)llama_server;
    struct export_opts x = {0};
    int rc = parse(argc, argv, &x);
    if (rc)
        return rc < 0 ? 0 : rc;
    char path[PATH_MAX], err[1024];
    if (dataset_store_path(x.config, path, sizeof path, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem export: %s\n", err);
        return EXIT_USAGE;
    }
    FILE *f = x.out ? fopen(x.out, "w") : stdout;
    if (!f) {
        fprintf(stderr, "tandem export: cannot write %s\n", x.out);
        return EXIT_FAILED;
    }
    size_t exported = 0, skipped = 0;
    tandem_err e = dataset_export(path, &x.o, f, &exported, &skipped, err, sizeof err);
    if (x.out && fclose(f) != 0 && !e) {
        snprintf(err, sizeof err, "cannot write %s", x.out);
        e = TANDEM_ERR_IO;
    }
    if (e) {
        fprintf(stderr, "tandem export: %s\n", err);
        return EXIT_FAILED;
    }
    if (!exported && skipped) {
        fprintf(stderr, "tandem export: %s: %zu request(s) in the last %s, all kept without "
                        "their bodies: set store.bodies: true to export requests\n",
                path, skipped, x.since);
        return EXIT_FAILED;
    }
    fprintf(stderr, "tandem export: %zu request(s) from %s\n", exported, path);
    if (skipped)
        fprintf(stderr, "tandem export: %zu request(s) kept without their bodies were skipped "
                        "(store.bodies)\n", skipped);
    return 0;
}
