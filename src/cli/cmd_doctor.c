/* cmd_doctor.c: `tandem doctor` reports what tandem would run on.
 *
 * Four checks, each one line of status plus details: the engine (which binary,
 * its build, /v1/systemone support), the model cache, host RAM, and NVIDIA
 * GPUs through NVML. Only an unusable engine fails the run: a missing GPU is a
 * normal CPU machine and an empty model cache is a warning. */
#include "cli/cmd_doctor.h"

#include <dirent.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/cache.h"
#include "engine/engine.h"
#include "base/host.h"
#include "base/mem.h"
#include "base/nvml.h"
#include "base/units.h"
#include "version.h"

#define STATUS_FMT "%-8s %-5s "
#define DETAIL_FMT "%15s"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem doctor [--llama-server PATH]\n"
            "\n"
            "Checks what tandem would run on: the llama-server engine (its build and\n"
            "whether it serves /v1/systemone, b%d or newer), the model cache, host RAM\n"
            "and NVIDIA GPUs (through NVML, when a driver is installed).\n"
            "\n"
            "  --llama-server PATH  check this engine binary instead of $TANDEM_LLAMA_SERVER,\n"
            "                       the engine installed beside tandem (make install), or\n"
            "                       the pinned build b%d in the cache\n"
            "  -h, --help           show this help\n"
            "\n"
            "Exit status: 0 when the engine can serve decision models, 1 otherwise.\n",
            ENGINE_MIN_DECISION_BUILD, TANDEM_ENGINE_BUILD);
}

static int check_engine(const char *flag_path) {
    struct engine_identity id;
    tandem_err e = engine_identify(flag_path, TANDEM_ENGINE_BUILD, &id);
    const char *status = e == TANDEM_OK ? (id.verdict == ENGINE_VERDICT_OK ? "ok" : "warn") : "FAIL";
    printf(STATUS_FMT "%s (from %s)\n", "engine", status, id.path, engine_source_name(id.source));
    if (id.located == TANDEM_ERR_NOTFOUND && id.source == ENGINE_SOURCE_CACHE) {
        printf(DETAIL_FMT "not built yet: run `make deps` (or point TANDEM_LLAMA_SERVER at one)\n", "");
        return 1;
    }
    if (id.queried != TANDEM_OK || id.located != TANDEM_OK) {
        printf(DETAIL_FMT "%s\n", "", id.error);
        return 1;
    }
    if (id.version.build >= 0)
        printf(DETAIL_FMT "llama.cpp build %lld, commit %s, version %s\n", "",
               (long long)id.version.build, *id.version.commit ? id.version.commit : "?",
               id.version.version);
    else
        printf(DETAIL_FMT "no meaningful build number (version %s, commit %s)\n", "",
               id.version.version, *id.version.commit ? id.version.commit : "?");
    switch (id.verdict) {
    case ENGINE_VERDICT_OK:
        printf(DETAIL_FMT "serves /v1/systemone: yes (b%d or newer)\n", "", ENGINE_MIN_DECISION_BUILD);
        if (id.version.build != TANDEM_ENGINE_BUILD || strcmp(id.version.commit, TANDEM_ENGINE_COMMIT))
            printf(DETAIL_FMT "note: not the pinned build; tandem is tested against b%d, commit %s\n",
                   "", TANDEM_ENGINE_BUILD, TANDEM_ENGINE_COMMIT);
        break;
    case ENGINE_VERDICT_UNVERIFIED:
        printf(DETAIL_FMT "serves /v1/systemone: probably (route found in the binary; "
               "build unverified)\n", "");
        break;
    default:
        printf(DETAIL_FMT "%s\n", "", id.error);
    }
    return e == TANDEM_OK ? 0 : 1;
}

static int is_gguf(const struct dirent *d) {
    size_t n = strlen(d->d_name);
    return d->d_name[0] != '.' && n > 5 && !strcmp(d->d_name + n - 5, ".gguf");
}

static uint64_t file_size(const char *dir, const char *name) {
    char path[8192];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static void check_models(void) {
    char dir[4096], size[32];
    if (cache_path(dir, sizeof dir, "models") != TANDEM_OK) {
        printf(STATUS_FMT "cannot resolve the cache directory (set HOME or TANDEM_CACHE)\n",
               "models", "warn");
        return;
    }
    struct dirent **list = NULL;
    int n = scandir(dir, &list, is_gguf, alphasort);
    if (n <= 0) {
        printf(STATUS_FMT "%s: no GGUF models yet; `make deps` fetches the test models\n",
               "models", "warn", dir);
        free(list);
        return;
    }
    uint64_t total = 0, *sizes = mem_alloc_array((size_t)n, sizeof *sizes);
    for (int i = 0; i < n; i++) {
        uint64_t bytes = file_size(dir, list[i]->d_name);
        if (sizes)
            sizes[i] = bytes;
        total += bytes;
    }
    printf(STATUS_FMT "%s: %d GGUF file%s, %s\n", "models", "ok", dir, n, n == 1 ? "" : "s",
           units_format_bytes(total, size, sizeof size));
    for (int i = 0; i < n; i++) {
        if (sizes)
            printf(DETAIL_FMT "%-40s %10s\n", "", list[i]->d_name,
                   units_format_bytes(sizes[i], size, sizeof size));
        free(list[i]);
    }
    mem_free(sizes);
    free(list);
}

static void check_memory(void) {
    struct host_memory m;
    char total[32], avail[32];
    if (host_memory_read(&m) != TANDEM_OK) {
        printf(STATUS_FMT "cannot read /proc/meminfo\n", "memory", "warn");
        return;
    }
    printf(STATUS_FMT "RAM %s total, %s available\n", "memory", "ok",
           units_format_bytes(m.total_bytes, total, sizeof total),
           units_format_bytes(m.available_bytes, avail, sizeof avail));
}

static void check_gpu(void) {
    struct nvml *nvml;
    char why[256], driver[96] = "?", total[32], freeb[32];
    tandem_err e = nvml_new(NULL, &nvml, why, sizeof why);
    if (e == TANDEM_ERR_NOTFOUND) {
        printf(STATUS_FMT "no NVIDIA GPU: %s; models run on the CPU\n", "gpu", "none", why);
        return;
    }
    if (e != TANDEM_OK) {
        printf(STATUS_FMT "NVML present but unusable: %s\n", "gpu", "warn", why);
        return;
    }
    unsigned n = nvml_device_count(nvml);
    nvml_driver_version(nvml, driver, sizeof driver);
    printf(STATUS_FMT "%u NVIDIA GPU%s, driver %s (NVML loaded)\n", "gpu", n ? "ok" : "none", n,
           n == 1 ? "" : "s", driver);
    for (unsigned i = 0; i < n; i++) {
        struct nvml_device d;
        if (nvml_device_get(nvml, i, &d) != TANDEM_OK) {
            printf(DETAIL_FMT "GPU %u: NVML query failed\n", "", i);
            continue;
        }
        printf(DETAIL_FMT "GPU %u: %s, %s total, %s free\n", "", i, d.name,
               units_format_bytes(d.total_bytes, total, sizeof total),
               units_format_bytes(d.free_bytes, freeb, sizeof freeb));
    }
    nvml_free(nvml);
}

int cmd_doctor_main(int argc, char **argv, const char *llama_server) {
    static const struct option opts[] = {
        {"llama-server", required_argument, NULL, 'L'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    int c;
    optind = 0; /* GNU getopt: full re-initialisation for a second parse */
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'L': llama_server = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tandem doctor: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    printf("tandem %s doctor (pinned engine: llama.cpp b%d)\n", TANDEM_VERSION, TANDEM_ENGINE_BUILD);
    int failed = check_engine(llama_server);
    check_models();
    check_memory();
    check_gpu();
    printf("%s\n", failed ? "doctor: the engine cannot serve decision models (see above)"
                          : "doctor: ready");
    return failed;
}
