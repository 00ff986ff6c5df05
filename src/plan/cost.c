/* cost.c: the cost model's measurements (a JSON file per model and engine
 * build in the footprint cache) and its estimate from the header.
 *
 * A record holds running sums, so that adding a sample is a read, an add and
 * an atomic rewrite, and a reader divides. Past COST_KEEP samples of a kind
 * the sums are halved, which weighs recent runs more without keeping a
 * history. The CPU estimate is calibrated by this host's own measurements:
 * prefill is compute-bound, so FLOPs per token scale with the parameters, and
 * one measured model tells the effective FLOP/s of every other. */
#include "plan/cost.h"

#include <dirent.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cache.h"
#include "base/host.h"
#include "plan/footprint.h"

#define FIELDS(X)                                                                             \
    X(loads, u) X(load_ms, d) X(firsts, u) X(first_tokens, u) X(first_ms, d) X(requests, u)      \
    X(tokens, u) X(request_ms, d)

const char *cost_device_name(enum cost_device d) { return d == COST_GPU ? "gpu" : "cpu"; }

static tandem_err record_path(const struct plan_model *m, int64_t build, bool create, char *out,
                              size_t cap) {
    char name[128];
    snprintf(name, sizeof name, "cost-%s-b%" PRId64, plan_model_header_sha256(m), build);
    return footprint_cache_path(name, create, out, cap);
}

static double num(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    double d = json_is_number(v) ? json_number_value(v) : 0;
    return d > 0 ? d : 0;
}

static void record_from_json(json_t *o, struct cost_record *r) {
    memset(r, 0, sizeof *r);
#define READ_u(f) r->f = (uint64_t)num(o, #f);
#define READ_d(f) r->f = num(o, #f);
#define READ(f, t) READ_##t(f)
    FIELDS(READ)
#undef READ
}

static json_t *record_json(const struct cost_record *r) {
    json_t *o = json_object();
#define WRITE_u(f) json_object_set_new(o, #f, json_integer((json_int_t)r->f));
#define WRITE_d(f) json_object_set_new(o, #f, json_real(r->f));
#define WRITE(f, t) WRITE_##t(f)
    FIELDS(WRITE)
#undef WRITE
    return o;
}

/* Halves a pair of sums once its count passes COST_KEEP. */
static void decay(uint64_t *count, double *sum, uint64_t *also) {
    if (*count <= COST_KEEP)
        return;
    *count /= 2, *sum /= 2;
    if (also)
        *also /= 2;
}

static void add(struct cost_record *r, const struct cost_record *d) {
    r->loads += d->loads, r->load_ms += d->load_ms;
    r->firsts += d->firsts, r->first_tokens += d->first_tokens, r->first_ms += d->first_ms;
    r->requests += d->requests, r->tokens += d->tokens, r->request_ms += d->request_ms;
    decay(&r->loads, &r->load_ms, NULL);
    decay(&r->firsts, &r->first_ms, &r->first_tokens);
    decay(&r->requests, &r->request_ms, &r->tokens);
}

tandem_err cost_record_load(const struct plan_model *m, int64_t build, enum cost_device d,
                            struct cost_record *out) {
    memset(out, 0, sizeof *out);
    char path[4300];
    tandem_err e = record_path(m, build, false, path, sizeof path);
    if (e != TANDEM_OK)
        return e;
    if (access(path, F_OK) != 0)
        return TANDEM_ERR_NOTFOUND;
    json_t *o = json_load_file(path, 0, NULL);
    if (!json_is_object(o)) {
        json_decref(o);
        return TANDEM_ERR_FORMAT;
    }
    json_t *dev = json_object_get(o, cost_device_name(d));
    bool found = json_is_object(dev);
    if (found)
        record_from_json(dev, out);
    json_decref(o);
    return found ? TANDEM_OK : TANDEM_ERR_NOTFOUND;
}

tandem_err cost_record_add(const struct plan_model *m, int64_t build, enum cost_device d,
                           const struct cost_record *delta, char *err, size_t errlen) {
    char path[4300];
    tandem_err e = record_path(m, build, true, path, sizeof path);
    if (e != TANDEM_OK) {
        tandem_errmsg(err, errlen, "cost cache: %s", tandem_strerror(e));
        return e;
    }
    json_t *o = json_load_file(path, 0, NULL);
    if (!json_is_object(o)) { /* absent or damaged: start afresh */
        json_decref(o);
        o = json_object();
    }
    struct cost_record r = {0};
    json_t *dev = json_object_get(o, cost_device_name(d));
    if (json_is_object(dev))
        record_from_json(dev, &r);
    add(&r, delta);
    json_object_set_new(o, "model", json_string(plan_model_path(m)));
    json_object_set_new(o, "n_params", json_integer((json_int_t)plan_model_n_params(m)));
    json_object_set_new(o, "engine_build", json_integer((json_int_t)build));
    json_object_set_new(o, cost_device_name(d), record_json(&r));
    e = footprint_cache_write(path, o, err, errlen);
    json_decref(o);
    return e;
}

/* --- the estimate -------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The effective FLOP/s one cache file shows for the CPU, or 0. */
static double file_flops(const char *path, int64_t build) {
    json_t *o = json_load_file(path, 0, NULL);
    json_t *cpu = json_object_get(o, "cpu");
    double flops = 0, params = num(o, "n_params");
    if (json_is_object(cpu) && (int64_t)num(o, "engine_build") == build) {
        double tokens = num(cpu, "tokens"), ms = num(cpu, "request_ms");
        if (tokens > 0 && ms > 0 && params > 0)
            flops = 2 * params * tokens / (ms / 1000.0);
    }
    json_decref(o);
    return flops;
}

#define MAX_CALIBRATION 256

static double default_cpu_flops(void) {
    return COST_CPU_FLOPS_PER_CORE * (double)host_cpus();
}

double cost_cpu_flops(int64_t build, bool use_measured, bool *measured) {
    char dir[4096], path[4400], suffix[32];
    double seen[MAX_CALIBRATION];
    size_t n = 0;
    snprintf(suffix, sizeof suffix, "-b%" PRId64 ".json", build);
    DIR *d = use_measured && cache_path(dir, sizeof dir, "footprints") == TANDEM_OK ? opendir(dir)
                                                                                   : NULL;
    struct dirent *e;
    while (d && n < MAX_CALIBRATION && (e = readdir(d))) {
        size_t len = strlen(e->d_name), sl = strlen(suffix);
        if (strncmp(e->d_name, "cost-", 5) || len < sl || strcmp(e->d_name + len - sl, suffix))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        double f = file_flops(path, build);
        if (f > 0)
            seen[n++] = f;
    }
    if (d)
        closedir(d);
    if (measured)
        *measured = n > 0;
    if (!n)
        return default_cpu_flops();
    qsort(seen, n, sizeof *seen, cmp_double);
    return n % 2 ? seen[n / 2] : (seen[n / 2 - 1] + seen[n / 2]) / 2;
}

void cost_estimate(const struct plan_model *m, enum cost_device d, double flops,
                   struct cost_figure *out) {
    double bytes = (double)plan_model_weight_bytes(m);
    *out = (struct cost_figure){
        .token_s = 2.0 * (double)plan_model_n_params(m) / flops,
        .load_s = d == COST_GPU ? COST_SPAWN_S + COST_GPU_INIT_S + bytes / COST_GPU_LOAD_BPS
                                : COST_SPAWN_S + bytes / COST_CPU_LOAD_BPS};
}

double cost_request_s(const struct cost_figure *f, uint32_t tokens) {
    return COST_REQUEST_S + f->token_s * tokens;
}

/* Replaces f's parts with what record r measured. */
static void apply(const struct cost_record *r, struct cost_figure *f) {
    if (r->requests && r->tokens) {
        f->token_s = r->request_ms / 1000.0 / (double)r->tokens;
        f->token_measured = true;
    }
    if (r->loads) {
        double first = 0;
        if (r->firsts) { /* the first answer's time beyond a warm one of its size */
            double warm = COST_REQUEST_S + f->token_s * (double)r->first_tokens / (double)r->firsts;
            first = r->first_ms / 1000.0 / (double)r->firsts - warm;
        }
        f->load_s = r->load_ms / 1000.0 / (double)r->loads + (first > 0 ? first : 0);
        f->load_measured = true;
    }
}

void cost_of(const struct plan_model *m, int64_t build, bool use_measured, double cpu_flops,
             struct cost_model *out) {
    cost_estimate(m, COST_GPU, COST_GPU_FLOPS, &out->on[COST_GPU]);
    cost_estimate(m, COST_CPU, cpu_flops, &out->on[COST_CPU]);
    if (!use_measured)
        return;
    for (int d = 0; d < COST_DEVICE_COUNT; d++) {
        struct cost_record r;
        if (cost_record_load(m, build, (enum cost_device)d, &r) == TANDEM_OK)
            apply(&r, &out->on[d]);
    }
}
