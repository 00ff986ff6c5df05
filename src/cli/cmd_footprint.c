/* cmd_footprint.c: `tandem footprint record MODEL LOG -- ENGINE-ARGS...`.
 *
 * Records what a llama-server run allocated, parsed from its -lv 4 log, into
 * the footprint cache under the settings its own argv implies, so that
 * `tandem plan` and `tandem serve` prefer measurements to the model. The
 * test harness and the benchmarks call it after every engine they start;
 * serve records its own children the same way. */
#include "cli/cmd_footprint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/footprint.h"
#include "plan/plan.h"
#include "version.h"

static void usage(FILE *f) {
    fprintf(f, "usage: tandem footprint record MODEL.gguf ENGINE.log [--pid PID] -- ENGINE-ARGS...\n"
               "\n"
               "Parses the buffer-size lines a llama-server run logged (it must run at\n"
               "-lv 4) and stores them in the footprint cache ($TANDEM_CACHE/footprints),\n"
               "keyed by the model's header, the settings ENGINE-ARGS imply and the pinned\n"
               "engine build (b%d). `tandem plan` then reports those parts as measured.\n"
               "With --pid and an NVIDIA GPU, NVML's memory for the still-running engine\n"
               "process PID is recorded too: the ground truth that includes its CUDA context.\n"
               "Prints the key and the canonical settings.\n",
               TANDEM_ENGINE_BUILD);
}

static int record(const char *model_path, const char *log_path, long pid, int argc,
                  char **argv) {
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
    tandem_err e = footprint_record_log(m, &s, log_path, pid, key, canon, sizeof canon, err,
                                        sizeof err);
    plan_model_free(m);
    if (e != TANDEM_OK) {
        fprintf(stderr, "tandem footprint: %s\n", err[0] ? err : tandem_strerror(e));
        return 1;
    }
    printf("%s %s\n", key, canon);
    return 0;
}

int cmd_footprint_main(int argc, char **argv, const char *llama_server) {
    (void)llama_server;
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage(stdout);
        return 0;
    }
    long pid = 0;
    int dashes = 4;
    if (argc >= 6 && !strcmp(argv[4], "--pid")) {
        char *end;
        pid = strtol(argv[5], &end, 10);
        if (*end || pid <= 0) {
            fprintf(stderr, "tandem footprint: --pid: expected a process id, got '%s'\n", argv[5]);
            return 2;
        }
        dashes = 6;
    }
    if (argc <= dashes || strcmp(argv[1], "record") || strcmp(argv[dashes], "--")) {
        usage(stderr);
        return 2;
    }
    return record(argv[2], argv[3], pid, argc - dashes - 1, argv + dashes + 1);
}
