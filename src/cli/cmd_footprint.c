/* cmd_footprint.c: `tandem footprint record MODEL LOG [options] -- ENGINE-ARGS...`.
 *
 * Records what a llama-server run allocated, parsed from its -lv 4 log, into
 * the footprint cache under the settings its own argv implies, and what it
 * cost (load time, answers per prompt token) into the cost records beside
 * them, so that `tandem plan` and `tandem serve` prefer measurements to the
 * model. The test harness and the benchmarks call it after every engine they
 * start; serve records its own children the same way. */
#include "cli/cmd_footprint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/cost.h"
#include "plan/footprint.h"
#include "plan/plan.h"
#include "version.h"

static void usage(FILE *f) {
    fprintf(f, "usage: tandem footprint record MODEL.gguf ENGINE.log [--pid PID] [--ready-ms MS]\n"
               "                                   [--answer MS:TOKENS ...] -- ENGINE-ARGS...\n"
               "\n"
               "Parses the buffer-size lines a llama-server run logged (it must run at\n"
               "-lv 4) and stores them in the footprint cache ($TANDEM_CACHE/footprints),\n"
               "keyed by the model's header, the settings ENGINE-ARGS imply and the pinned\n"
               "engine build (b%d). `tandem plan` then reports those parts as measured.\n"
               "With --pid and an NVIDIA GPU, NVML's memory for the still-running engine\n"
               "process PID is recorded too: the ground truth that includes its CUDA context.\n"
               "--ready-ms gives the run's spawn-to-ready time and each --answer one answer's\n"
               "time and prompt tokens (the first is the first answer after the load); they\n"
               "go to the model's cost record for the device the log shows (docs/placement.md).\n"
               "Prints the key and the canonical settings.\n",
               TANDEM_ENGINE_BUILD);
}

/* Cost samples given on the command line. */
struct samples {
    long pid;
    struct cost_record cost;
};

static int record(const char *model_path, const char *log_path, const struct samples *sm,
                  int argc, char **argv) {
    char err[512] = "";
    struct plan_settings s;
    const char *argv_model;
    if (footprint_settings_from_argv(argc, argv, &s, &argv_model, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem footprint: engine arguments: %s\n", err);
        return 2;
    }
    struct plan_model *m;
    if (plan_model_open(model_path, &m, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem footprint: %s\n", err);
        return 1;
    }
    char key[HASH_SHA256_HEX_LEN + 1], canon[512];
    struct footprint_measure meas;
    tandem_err e = footprint_record_log(m, &s, log_path, sm->pid, key, canon, sizeof canon, err,
                                        sizeof err);
    if (e == TANDEM_OK && (sm->cost.loads || sm->cost.firsts || sm->cost.requests) &&
        (e = footprint_load(key, &meas, err, sizeof err)) == TANDEM_OK)
        e = cost_record_add(m, TANDEM_ENGINE_BUILD,
                            footprint_measure_has_gpu(&meas) ? COST_GPU : COST_CPU, &sm->cost,
                            err, sizeof err);
    plan_model_free(m);
    if (e != TANDEM_OK) {
        fprintf(stderr, "tandem footprint: %s\n", err[0] ? err : tandem_strerror(e));
        return 1;
    }
    printf("%s %s\n", key, canon);
    return 0;
}

/* Parses one option at argv[i] (with its value at argv[i + 1]) into *sm.
 * Returns 0 or 2 after a message. */
static int option(char **argv, int i, struct samples *sm) {
    const char *o = argv[i], *v = argv[i + 1];
    char *end;
    if (!strcmp(o, "--pid")) {
        sm->pid = strtol(v, &end, 10);
        if (!*end && sm->pid > 0)
            return 0;
    } else if (!strcmp(o, "--ready-ms")) {
        double ms = strtod(v, &end);
        if (!*end && ms >= 0) {
            sm->cost.loads++, sm->cost.load_ms += ms;
            return 0;
        }
    } else if (!strcmp(o, "--answer")) {
        double ms = strtod(v, &end);
        long tokens = *end == ':' ? strtol(end + 1, &end, 10) : -1;
        if (!*end && ms >= 0 && tokens > 0) {
            bool first = !sm->cost.firsts && !sm->cost.requests;
            if (first)
                sm->cost.firsts++, sm->cost.first_tokens += (uint64_t)tokens, sm->cost.first_ms += ms;
            else
                sm->cost.requests++, sm->cost.tokens += (uint64_t)tokens, sm->cost.request_ms += ms;
            return 0;
        }
    } else {
        fprintf(stderr, "tandem footprint: unknown option '%s'\n", o);
        return 2;
    }
    fprintf(stderr, "tandem footprint: %s: bad value '%s'\n", o, v);
    return 2;
}

int cmd_footprint_main(int argc, char **argv, const char *llama_server) {
    (void)llama_server;
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage(stdout);
        return 0;
    }
    struct samples sm = {0};
    int i = 4;
    while (i + 1 < argc && strcmp(argv[i], "--")) {
        if (option(argv, i, &sm))
            return 2;
        i += 2;
    }
    if (argc <= i || strcmp(argv[1], "record") || strcmp(argv[i], "--")) {
        usage(stderr);
        return 2;
    }
    return record(argv[2], argv[3], &sm, argc - i - 1, argv + i + 1);
}
