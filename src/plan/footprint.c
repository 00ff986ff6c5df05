/* footprint.c: the engine's own account of its buffers, parsed and cached.
 *
 * Parsing is line by line and tolerant of spacing: a line counts when it
 * holds "<BUFTYPE> <part> buffer size = <X> MiB" for a known part word
 * (model, KV, RS, compute, output). Summary lines without a buffer type
 * ("llama_kv_cache: size = ...") do not match, so nothing is counted twice.
 *
 * Cache entries are small JSON files named by the key, the SHA-256 of a
 * canonical settings string ("engine=b11434;model=<header sha>;ctx=...").
 * Writes go to a temp file and are renamed into place, so a reader never sees
 * half an entry and concurrent writers of one key cannot corrupt it. */
#include "plan/footprint.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cache.h"
#include "gguf/ggml_types.h"
#include "base/mem.h"
#include "base/nvml.h"
#include "version.h"

#define MIB 1048576.0

static const struct {
    const char *word;
    enum plan_part part;
} PART_WORDS[] = {{"model", PLAN_PART_WEIGHTS}, {"KV", PLAN_PART_KV},
                  {"RS", PLAN_PART_RECURRENT}, {"compute", PLAN_PART_COMPUTE},
                  {"output", PLAN_PART_OUTPUT}};

/* Parses one NUL-terminated line; returns whether it was a buffer line. */
static bool parse_line(const char *line, struct footprint_measure *out) {
    const char *at = strstr(line, " buffer size");
    if (!at)
        return false;
    /* the part word and the buffer type are the two words before " buffer size" */
    const char *end = at, *p = at;
    while (p > line && p[-1] != ' ')
        p--;
    int part = -1;
    for (size_t i = 0; i < sizeof PART_WORDS / sizeof PART_WORDS[0]; i++)
        if ((size_t)(end - p) == strlen(PART_WORDS[i].word) &&
            !memcmp(p, PART_WORDS[i].word, (size_t)(end - p)))
            part = (int)PART_WORDS[i].part;
    const char *bt_end = p;
    while (bt_end > line && bt_end[-1] == ' ')
        bt_end--;
    const char *bt = bt_end;
    while (bt > line && bt[-1] != ' ' && bt[-1] != ':')
        bt--;
    const char *eq = strchr(at, '=');
    if (part < 0 || bt == bt_end || !eq)
        return false;
    char *num_end;
    errno = 0;
    double mib = strtod(eq + 1, &num_end);
    if (errno || num_end == eq + 1 || mib < 0 || mib > 1e9 || !strstr(num_end, "MiB"))
        return false;
    bool host = (size_t)(bt_end - bt) >= 3 && !memcmp(bt, "CPU", 3);
    host |= bt_end - bt > 5 && !memcmp(bt_end - 5, "_Host", 5);
    out->bytes[host ? PLAN_DEVICE_HOST : PLAN_DEVICE_GPU][part] += (uint64_t)(mib * MIB + 0.5);
    out->seen[part] = true;
    return true;
}

tandem_err footprint_parse_log(const char *text, size_t len, struct footprint_measure *out) {
    memset(out, 0, sizeof *out);
    char line[512];
    size_t n = 0;
    bool any = false;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || text[i] == '\n') {
            line[n] = '\0';
            any |= parse_line(line, out);
            n = 0;
        } else if (n < sizeof line - 1) {
            line[n++] = text[i];
        }
    }
    return any ? TANDEM_OK : TANDEM_ERR_NOTFOUND;
}

bool footprint_measure_has_gpu(const struct footprint_measure *m) {
    for (int p = 0; p < PLAN_PART_COUNT; p++)
        if (m->bytes[PLAN_DEVICE_GPU][p])
            return true;
    return false;
}

/* --- llama-server argv -> settings ------------------------------------------------ */

static bool is(const char *arg, const char *a, const char *b) {
    return !strcmp(arg, a) || (b && !strcmp(arg, b));
}

static tandem_err parse_uint(const char *flag, const char *v, uint32_t *out, char *err,
                             size_t errlen) {
    char *end;
    errno = 0;
    unsigned long long n = v ? strtoull(v, &end, 10) : 0;
    if (!v || errno || end == v || *end || n > UINT32_MAX || v[0] == '-') {
        tandem_errmsg(err, errlen, "%s: expected a non-negative integer, got '%s'", flag,
                      v ? v : "(nothing)");
        return TANDEM_ERR_INVAL;
    }
    *out = (uint32_t)n;
    return TANDEM_OK;
}

static tandem_err parse_type(const char *flag, const char *v, uint32_t *out, char *err,
                             size_t errlen) {
    if (v && ggml_type_find(v, out) == TANDEM_OK)
        return TANDEM_OK;
    tandem_errmsg(err, errlen, "%s: unknown cache type '%s'", flag, v ? v : "(nothing)");
    return TANDEM_ERR_INVAL;
}

/* Flags of llama-server that take a value tandem does not need. */
static bool takes_value(const char *arg) {
    static const char *const with_value[] = {
        "--host", "--port", "-lv", "--log-verbosity", "-t", "--threads", "-a", "--alias",
        "--chat-template", "--chat-template-file", "-to", "--timeout", "--api-key",
        "--pooling", "--metrics-port", "-tb", "--threads-batch", "-dev", "--device", NULL};
    for (const char *const *w = with_value; *w; w++)
        if (!strcmp(arg, *w))
            return true;
    return false;
}

static tandem_err parse_flag(const char *arg, const char *v, int *used,
                             struct plan_settings *s, const char **model, char *err,
                             size_t errlen) {
    *used = 1;
    if (is(arg, "-m", "--model")) {
        *model = v;
    } else if (is(arg, "-c", "--ctx-size")) {
        return parse_uint(arg, v, &s->ctx, err, errlen);
    } else if (is(arg, "-ngl", "--n-gpu-layers") || is(arg, "--gpu-layers", NULL)) {
        uint32_t n;
        tandem_err e = parse_uint(arg, v, &n, err, errlen);
        s->ngl = n > INT32_MAX ? INT32_MAX : (int32_t)n;
        return e;
    } else if (is(arg, "-np", "--parallel")) {
        return parse_uint(arg, v, &s->parallel, err, errlen);
    } else if (is(arg, "-b", "--batch-size")) {
        return parse_uint(arg, v, &s->batch, err, errlen);
    } else if (is(arg, "-ub", "--ubatch-size")) {
        return parse_uint(arg, v, &s->ubatch, err, errlen);
    } else if (is(arg, "-ctk", "--cache-type-k")) {
        return parse_type(arg, v, &s->type_k, err, errlen);
    } else if (is(arg, "-ctv", "--cache-type-v")) {
        return parse_type(arg, v, &s->type_v, err, errlen);
    } else if (is(arg, "-fa", "--flash-attn")) {
        if (!v || (strcmp(v, "on") && strcmp(v, "off") && strcmp(v, "auto"))) {
            tandem_errmsg(err, errlen, "%s: expected on, off or auto", arg);
            return TANDEM_ERR_INVAL;
        }
        s->flash_attn = strcmp(v, "off") != 0; /* auto enables it wherever supported */
    } else {
        *used = 0;
        if (is(arg, "-kvu", "--kv-unified"))
            s->kv_unified = true;
        else if (is(arg, "-nkvo", "--no-kv-offload"))
            s->kv_offload = false;
        else if (is(arg, "--swa-full", NULL))
            s->swa_full = true;
        else if (takes_value(arg))
            *used = 1;
    }
    return TANDEM_OK;
}

tandem_err footprint_settings_from_argv(int argc, char *const *argv,
                                        struct plan_settings *settings, const char **model,
                                        char *err, size_t errlen) {
    struct plan_settings s = plan_default_settings();
    s.ngl = 0;
    s.parallel = 4; /* the engine's default slot count, with a unified pool */
    s.kv_unified = true;
    s.flash_attn = true; /* -fa auto */
    *model = NULL;
    for (int i = 0; i < argc; i++) {
        if (is(argv[i], "-np", "--parallel"))
            s.kv_unified = false; /* an explicit -np splits the pool unless --kv-unified */
    }
    for (int i = 0; i < argc; i++) {
        int used;
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        tandem_err e = parse_flag(argv[i], v, &used, &s, model, err, errlen);
        if (e != TANDEM_OK)
            return e;
        i += used;
    }
    *settings = s;
    return TANDEM_OK;
}

/* --- the cache ------------------------------------------------------------------ */

tandem_err footprint_key(const struct plan_model *m, const struct plan_settings *r,
                         int64_t engine_build, char key[HASH_SHA256_HEX_LEN + 1], char *canon,
                         size_t cap) {
    char buf[512];
    int n = snprintf(buf, sizeof buf,
                     "engine=b%lld;backend=%s;model=%s;ctx=%u;ngl=%d;np=%u;unified=%d;"
                     "ctk=%u;ctv=%u;fa=%d;b=%u;ub=%u;kvo=%d;swa_full=%d",
                     (long long)engine_build, r->gpu ? "gpu" : "cpu",
                     plan_model_header_sha256(m), r->ctx, r->ngl, r->parallel, r->kv_unified,
                     r->type_k, r->type_v, r->flash_attn, r->batch, r->ubatch, r->kv_offload,
                     r->swa_full);
    if (n < 0 || (size_t)n >= sizeof buf)
        return TANDEM_ERR_TOOBIG;
    if (canon && cap)
        snprintf(canon, cap, "%s", buf);
    return hash_buffer_sha256(buf, (size_t)n, key);
}

tandem_err footprint_cache_path(const char *name, bool create, char *out, size_t cap) {
    char dir[4096];
    tandem_err e = create ? cache_make_dir(dir, sizeof dir, "footprints")
                          : cache_path(dir, sizeof dir, "footprints");
    if (e != TANDEM_OK)
        return e;
    int n = snprintf(out, cap, "%s/%s.json", dir, name);
    return n < 0 || (size_t)n >= cap ? TANDEM_ERR_TOOBIG : TANDEM_OK;
}

tandem_err footprint_cache_write(const char *path, json_t *o, char *err, size_t errlen) {
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    if (json_dump_file(o, tmp, JSON_INDENT(1) | JSON_SORT_KEYS) != 0 || rename(tmp, path) != 0) {
        tandem_errmsg(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        unlink(tmp);
        return TANDEM_ERR_IO;
    }
    return TANDEM_OK;
}

static json_t *measure_json(const struct footprint_measure *m) {
    json_t *o = json_object();
    for (int d = 0; d < PLAN_DEVICE_COUNT; d++) {
        json_t *dev = json_object();
        for (int p = 0; p < PLAN_PART_COUNT; p++)
            if (m->seen[p])
                json_object_set_new(dev, plan_part_name(p), json_integer((json_int_t)m->bytes[d][p]));
        json_object_set_new(o, plan_device_name(d), dev);
    }
    json_object_set_new(o, "process_bytes", json_integer((json_int_t)m->process_bytes));
    return o;
}

tandem_err footprint_store(const char *key, const char *canon, const char *model_path,
                           const struct footprint_measure *m, char *err, size_t errlen) {
    char path[4200];
    tandem_err e = footprint_cache_path(key, true, path, sizeof path);
    if (e != TANDEM_OK) {
        tandem_errmsg(err, errlen, "footprint cache: %s", tandem_strerror(e));
        return e;
    }
    json_t *o = json_pack("{s:s, s:s, s:o}", "settings", canon, "model", model_path,
                          "measured", measure_json(m));
    if (!o)
        return TANDEM_ERR_NOMEM;
    e = footprint_cache_write(path, o, err, errlen);
    json_decref(o);
    return e;
}

static bool read_bytes(json_t *dev, const char *part, uint64_t *out) {
    json_t *v = json_object_get(dev, part);
    if (!v)
        return false;
    *out = json_is_integer(v) && json_integer_value(v) >= 0 ? (uint64_t)json_integer_value(v) : 0;
    return true;
}

tandem_err footprint_load(const char *key, struct footprint_measure *out, char *err,
                          size_t errlen) {
    memset(out, 0, sizeof *out);
    char path[4200];
    tandem_err e = footprint_cache_path(key, false, path, sizeof path);
    if (e != TANDEM_OK)
        return e;
    if (access(path, F_OK) != 0)
        return TANDEM_ERR_NOTFOUND;
    json_error_t jerr;
    json_t *o = json_load_file(path, 0, &jerr);
    json_t *meas = json_object_get(o, "measured");
    if (!json_is_object(meas)) {
        tandem_errmsg(err, errlen, "%s:%d: damaged footprint entry: %s", path, jerr.line,
                      o ? "no \"measured\" object" : jerr.text);
        json_decref(o);
        return TANDEM_ERR_FORMAT;
    }
    for (int d = 0; d < PLAN_DEVICE_COUNT; d++)
        for (int p = 0; p < PLAN_PART_COUNT; p++)
            out->seen[p] |= read_bytes(json_object_get(meas, plan_device_name(d)),
                                       plan_part_name(p), &out->bytes[d][p]);
    json_t *pb = json_object_get(meas, "process_bytes");
    out->process_bytes = json_is_integer(pb) && json_integer_value(pb) > 0
                             ? (uint64_t)json_integer_value(pb)
                             : 0;
    json_decref(o);
    return TANDEM_OK;
}

void footprint_apply(const struct footprint_measure *m, struct plan_footprint *f) {
    for (int p = 0; p < PLAN_PART_COUNT; p++) {
        if (p == PLAN_PART_OVERHEAD)
            continue;
        for (int d = 0; d < PLAN_DEVICE_COUNT; d++)
            f->bytes[d][p] = m->bytes[d][p];
        f->source[p] = PLAN_SOURCE_MEASURED;
    }
    uint64_t buffers = plan_footprint_device_total(f, PLAN_DEVICE_GPU) -
                       f->bytes[PLAN_DEVICE_GPU][PLAN_PART_OVERHEAD];
    if (m->process_bytes > buffers) {
        f->bytes[PLAN_DEVICE_GPU][PLAN_PART_OVERHEAD] = m->process_bytes - buffers;
        f->source[PLAN_PART_OVERHEAD] = PLAN_SOURCE_MEASURED;
    }
}

/* --- recording a run ------------------------------------------------------------ */

/* NVML's view of process pid on device 0; 0 when there is no GPU or no entry. */
static uint64_t process_bytes(long pid) {
    struct nvml *nvml = NULL;
    uint64_t bytes = 0;
    if (pid > 0 && nvml_new(NULL, &nvml, NULL, 0) == TANDEM_OK)
        nvml_process_used_bytes(nvml, 0, pid, &bytes);
    nvml_free(nvml);
    return bytes;
}

tandem_err footprint_record_log(const struct plan_model *m, const struct plan_settings *s,
                                const char *log_path, long pid,
                                char key[HASH_SHA256_HEX_LEN + 1], char *canon, size_t cap,
                                char *err, size_t errlen) {
    struct mem_buf log;
    struct footprint_measure meas;
    mem_buf_init(&log, 256u << 20);
    tandem_err e = mem_buf_append_file(&log, log_path);
    if (e == TANDEM_OK)
        e = footprint_parse_log(log.data, log.len, &meas);
    mem_buf_deinit(&log);
    if (e != TANDEM_OK) {
        tandem_errmsg(err, errlen, e == TANDEM_ERR_NOTFOUND
                                       ? "%s: no buffer-size lines (was the engine run at -lv 4?)"
                                       : "%s: cannot read",
                      log_path);
        return e;
    }
    meas.process_bytes = process_bytes(pid);
    struct plan_settings with_backend = *s, resolved;
    with_backend.gpu = footprint_measure_has_gpu(&meas);
    plan_model_resolve(m, &with_backend, &resolved);
    char text[512];
    e = footprint_key(m, &resolved, TANDEM_ENGINE_BUILD, key, text, sizeof text);
    if (e == TANDEM_OK && canon && cap)
        snprintf(canon, cap, "%s", text);
    return e == TANDEM_OK ? footprint_store(key, text, plan_model_path(m), &meas, err, errlen) : e;
}
