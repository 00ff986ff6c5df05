/* plan_cli.c: the launch-setting and budget flags that `tandem plan` and
 * `tandem run` share, the budget they imply (flags, NVML, MemAvailable), and
 * the footprint function both plan with: the model, corrected by the
 * footprint cache unless measurements are switched off. */
#include "plan/plan_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/footprint.h"
#include "gguf/ggml_types.h"
#include "base/host.h"
#include "base/nvml.h"
#include "base/units.h"
#include "version.h"

#define DEFAULT_RESERVE (512ull << 20)

const struct option plan_cli_options[] = {
    {"vram", required_argument, NULL, 'v'},    {"reserve", required_argument, NULL, 'r'},
    {"ram", required_argument, NULL, 'R'},     {"overhead", required_argument, NULL, 'o'},
    {"ctx", required_argument, NULL, 'c'},     {"parallel", required_argument, NULL, 'p'},
    {"batch", required_argument, NULL, 'b'},       {"ubatch", required_argument, NULL, 'u'},
    {"cache-type-k", required_argument, NULL, 'k'}, {"cache-type-v", required_argument, NULL, 'V'},
    {"ngl", required_argument, NULL, 'g'},     {"flash-attn", required_argument, NULL, 'f'},
    {"kv-unified", no_argument, NULL, 'U'},    {"cpu", no_argument, NULL, 'C'},
    {"no-measured", no_argument, NULL, 'M'},       {"json", no_argument, NULL, 'j'},
    {"config", required_argument, NULL, 'F'},  {"help", no_argument, NULL, 'h'},          {0},
};

static int bad_value(const char *flag, const char *v, const char *want) {
    fprintf(stderr, "tandem: %s: expected %s, got '%s'\n", flag, want, v);
    return 2;
}

static int parse_u32(const char *flag, const char *v, uint32_t *out, uint32_t min) {
    char *end;
    unsigned long n = strtoul(v, &end, 10);
    if (!*v || *end || v[0] == '-' || n < min || n > UINT32_MAX)
        return bad_value(flag, v, min ? "a positive integer" : "a non-negative integer");
    *out = (uint32_t)n;
    return 0;
}

static int parse_size(const char *flag, const char *v, uint64_t *out) {
    return units_parse_bytes(v, out) == TANDEM_OK ? 0 : bad_value(flag, v, "a size like 6GiB");
}

static int parse_type(const char *flag, const char *v, uint32_t *out) {
    return ggml_type_find(v, out) == TANDEM_OK ? 0 : bad_value(flag, v, "a ggml type like q8_0");
}

int plan_cli_option(int c, const char *arg, struct plan_cli *o) {
    uint32_t n;
    int rc = 0;
    switch (c) {
    case 'v': o->have_vram = true; return parse_size("--vram", arg, &o->vram);
    case 'r': o->have_reserve = true; return parse_size("--reserve", arg, &o->reserve);
    case 'R': o->have_ram = true; return parse_size("--ram", arg, &o->ram);
    case 'o': return parse_size("--overhead", arg, &o->settings.overhead);
    case 'c': return parse_u32("--ctx", arg, &o->settings.ctx, 1);
    case 'p': return parse_u32("--parallel", arg, &o->settings.parallel, 1);
    case 'b': return parse_u32("--batch", arg, &o->settings.batch, 1);
    case 'u': return parse_u32("--ubatch", arg, &o->settings.ubatch, 1);
    case 'k': return parse_type("--cache-type-k", arg, &o->settings.type_k);
    case 'V': return parse_type("--cache-type-v", arg, &o->settings.type_v);
    case 'g':
        rc = parse_u32("--ngl", arg, &n, 0);
        o->settings.ngl = n > INT32_MAX ? INT32_MAX : (int32_t)n;
        return rc;
    case 'f':
        if (strcmp(arg, "on") && strcmp(arg, "off"))
            return bad_value("--flash-attn", arg, "on or off");
        o->settings.flash_attn = !strcmp(arg, "on");
        return 0;
    case 'U': o->settings.kv_unified = true; return 0;
    case 'C': o->cpu = true; return 0;
    case 'M': o->no_measured = true; return 0;
    case 'j': o->json = true; return 0;
    case 'F': o->config = arg; return 0;
    }
    return 2;
}

/* --- the budget -------------------------------------------------------------------- */

const char *plan_cli_budget(const struct plan_cli *o, struct fit_budget *b, uint64_t *total) {
    struct host_memory mem = {0};
    host_memory_read(&mem);
    b->host_bytes = o->have_ram ? o->ram : mem.available_bytes;
    b->gpu = !o->cpu;
    if (o->cpu) {
        *total = b->host_bytes;
        return o->have_ram ? "--ram" : "host MemAvailable";
    }
    const char *source = "--vram";
    *total = o->vram;
    if (!o->have_vram) {
        struct nvml *nvml = NULL;
        struct nvml_device d;
        if (nvml_new(NULL, &nvml, NULL, 0) != TANDEM_OK || nvml_device_count(nvml) == 0 ||
            nvml_device_get(nvml, 0, &d) != TANDEM_OK) {
            nvml_free(nvml);
            b->gpu = false; /* no GPU: plan what a CPU engine allocates */
            *total = b->host_bytes;
            return o->have_ram ? "--ram (no GPU found)" : "host MemAvailable (no GPU found)";
        }
        *total = d.total_bytes;
        source = "NVML device 0";
        nvml_free(nvml);
    }
    uint64_t reserve = o->have_reserve ? o->reserve : DEFAULT_RESERVE;
    b->gpu_bytes = *total > reserve ? *total - reserve : 0;
    return source;
}

static uint32_t nvml_gpus(struct nvml **nvml) {
    if (nvml_new(NULL, nvml, NULL, 0) != TANDEM_OK)
        return 0;
    size_t n = nvml_device_count(*nvml);
    return n > PLACE_MAX_GPUS ? PLACE_MAX_GPUS : (uint32_t)n;
}

bool plan_cli_place_budget(const struct plan_cli *o, const struct fit_budget *b,
                           struct place_budget *pb) {
    memset(pb, 0, sizeof *pb);
    pb->host_bytes = b->host_bytes;
    if (!b->gpu)
        return false;
    struct nvml *nvml = NULL;
    uint32_t found = nvml_gpus(&nvml);
    uint64_t reserve = o->have_reserve ? o->reserve : DEFAULT_RESERVE;
    if (o->have_vram || !found) {
        pb->n_gpus = 1;
        pb->gpu_bytes[0] = b->gpu_bytes;
    } else {
        for (uint32_t i = 0; i < found; i++) {
            struct nvml_device d;
            if (nvml_device_get(nvml, i, &d) != TANDEM_OK)
                break;
            pb->gpu_bytes[pb->n_gpus++] = d.total_bytes > reserve ? d.total_bytes - reserve : 0;
        }
    }
    nvml_free(nvml);
    return found == 0;
}

/* --- footprints: the planner, corrected by the cache ------------------------------------ */

tandem_err plan_cli_footprint(const struct plan_model *m, const struct plan_settings *s,
                              struct plan_footprint *out, void *user) {
    const bool *use_measured = user;
    tandem_err e = plan_model_footprint(m, s, out);
    if (e != TANDEM_OK || !*use_measured)
        return e;
    struct plan_settings r;
    char key[HASH_SHA256_HEX_LEN + 1];
    struct footprint_measure meas;
    plan_model_resolve(m, s, &r);
    if (footprint_key(m, &r, TANDEM_ENGINE_BUILD, key, NULL, 0) == TANDEM_OK &&
        footprint_load(key, &meas, NULL, 0) == TANDEM_OK)
        footprint_apply(&meas, out);
    return TANDEM_OK;
}


tandem_err plan_cli_fit_one(const char *name, const struct plan_model *m,
                            const struct plan_settings *want, const struct fit_budget *b,
                            bool measured, struct plan_settings *resolved,
                            struct fit_model_result *r, struct fit_result *res) {
    struct fit_model fm = {name, m, *want, false};
    tandem_err e = fit_models(&fm, 1, b, plan_cli_footprint, &measured, r, res);
    if (e != TANDEM_OK)
        return e;
    struct plan_settings s = fm.settings;
    s.gpu = b->gpu;
    s.ngl = r->ngl;
    plan_model_resolve(m, &s, resolved);
    return TANDEM_OK;
}
