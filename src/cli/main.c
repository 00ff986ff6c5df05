/* main.c: tandem's entry point: global options and subcommand dispatch.
 *
 * Global options come before the subcommand; each subcommand parses the rest
 * of argv itself and answers its own --help. Exit codes: 0 success, 1 the
 * command failed, 2 usage error. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cmd_calibrate.h"
#include "cli/cmd_decide.h"
#include "cli/cmd_doctor.h"
#include "cli/cmd_drift.h"
#include "cli/cmd_eval.h"
#include "cli/cmd_export.h"
#include "cli/cmd_feedback.h"
#include "cli/cmd_footprint.h"
#include "cli/cmd_gguf.h"
#include "cli/cmd_imatrix.h"
#include "cli/cmd_inspect.h"
#include "cli/cmd_mcp.h"
#include "cli/cmd_plan.h"
#include "cli/cmd_ps.h"
#include "cli/cmd_quantize.h"
#include "cli/cmd_run.h"
#include "cli/cmd_serve.h"
#include "engine/engine.h"
#include "version.h"

struct command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv, const char *llama_server);
};

static const struct command commands[] = {
    {"doctor", "check the engine, model cache, RAM and GPU", cmd_doctor_main},
    {"inspect", "show what a GGUF model file holds", cmd_inspect_main},
    {"gguf", "edit (set, rm) or dump GGUF metadata", cmd_gguf_main},
    {"plan", "plan memory per device and decide which models fit together", cmd_plan_main},
    {"serve", "the daemon: serve a tandem.yaml's models with residency and scheduling", cmd_serve_main},
    {"decide", "run one decide-then-verify pipeline request (daemon or one-shot)", cmd_decide_main},
    {"mcp", "serve tandem's pipelines and models as MCP tools on stdio, for agents", cmd_mcp_main},
    {"ps", "show a running daemon's models, memory and queue", cmd_ps_main},
    {"load", "ask a running daemon to load a model", cmd_load_main},
    {"unload", "ask a running daemon to unload a model", cmd_unload_main},
    {"feedback", "tell a running daemon how a decision went (its outcome)", cmd_feedback_main},
    {"export", "write the daemon's stored requests as an eval set, outcomes as gold", cmd_export_main},
    {"run", "start one planned, supervised llama-server for a model", cmd_run_main},
    {"footprint", "record what an engine run allocated into the footprint cache", cmd_footprint_main},
    {"eval", "score a decision model on a dataset: accuracy, calibration, stability",
     cmd_eval_main},
    {"calibrate", "fit a decision model's temperatures on a dataset, write a calibrated copy",
     cmd_calibrate_main},
    {"drift", "compare two decision models answer by answer (KL, flips)", cmd_drift_main},
    {"quantize", "re-encode a GGUF model; --ladder picks the type by its decisions",
     cmd_quantize_main},
    {"imatrix", "compute an importance matrix from decision requests, for quantizing",
     cmd_imatrix_main},
};

#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem [--llama-server PATH] <command> [options]\n"
            "       tandem --version | --help\n"
            "\n"
            "tandem runs System One decision models (decider and verifier) on one machine,\n"
            "supervising one pinned llama-server (llama.cpp b%d) per resident model.\n"
            "\n"
            "commands:\n",
            TANDEM_ENGINE_BUILD);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f,
            "\n"
            "options:\n"
            "  --llama-server PATH  use this llama-server binary (also $TANDEM_LLAMA_SERVER)\n"
            "  -V, --version        print tandem's version and the engine's build and commit\n"
            "  -h, --help           show this help; `tandem <command> --help` for a command\n");
}

static int print_version(const char *llama_server) {
    printf("tandem %s\n", TANDEM_VERSION);
    printf("engine (pinned): llama.cpp build %d, commit %s\n", TANDEM_ENGINE_BUILD,
           TANDEM_ENGINE_COMMIT);
    struct engine_identity id;
    engine_identify(llama_server, TANDEM_ENGINE_BUILD, &id);
    if (id.located != TANDEM_OK || id.queried != TANDEM_OK)
        printf("engine (in use): unavailable: %s\n", id.error);
    else if (id.version.build >= 0)
        printf("engine (in use): llama.cpp build %lld, commit %s, at %s\n",
               (long long)id.version.build, id.version.commit, id.path);
    else
        printf("engine (in use): build unknown (version %s, commit %s), at %s\n",
               id.version.version, id.version.commit, id.path);
    return 0;
}

int main(int argc, char **argv) {
    static const struct option opts[] = {
        {"llama-server", required_argument, NULL, 'L'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    const char *llama_server = NULL;
    int c, want_version = 0;
    /* "+": stop at the first non-option, the subcommand */
    while ((c = getopt_long(argc, argv, "+Vh", opts, NULL)) != -1) {
        switch (c) {
        case 'L': llama_server = optarg; break;
        case 'V': want_version = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (want_version)
        return print_version(llama_server);
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[optind];
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(name, commands[i].name))
            return commands[i].run(argc - optind, argv + optind, llama_server);
    if (!strcmp(name, "help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "tandem: unknown command '%s' (see `tandem --help`)\n", name);
    return 2;
}
