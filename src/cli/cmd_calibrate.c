/* cmd_calibrate.c: `tandem calibrate`, new temperatures for a decision model from served answers.
 *
 * The flow is model (gguf: architecture, decision type, temperatures as the
 * engine reads them) -> run (evalset + eval, every case answered once) ->
 * split (seeded, by case) -> fit (calib.c: per type, then per option-count
 * bucket) -> summary (one JSON object: the --json output, and the table is
 * rendered from it) -> write (gguf_edit: changed temperatures and the
 * tandem.calibration.* provenance keys, atomically).
 *
 * Invariant: the table `now` always holds the temperatures the copy will
 * carry, each as the engine will read it back, so every prediction (the
 * served p refitted with the power T_old / T_new of its question) is what the
 * engine serves from the copy. A fit is kept only if it lowers the held-out
 * NLL: a type fit against the served answers, a bucket fit against the
 * type's result. */
#include "cli/cmd_calibrate.h"

#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/hash.h"
#include "base/host.h"
#include "base/mem.h"
#include "cli/api_key.h"
#include "cli/cli_opts.h"
#include "eval/summary.h"
#include "flow/model_endpoint.h"
#include "eval/calib.h"
#include "eval/metrics.h"
#include "gguf/gguf.h"
#include "gguf/gguf_edit.h"
#include "version.h"

#define DEFAULT_HOLDOUT 0.3
#define DEFAULT_MIN_BUCKET 30
#define MIN_TYPE_TRAIN 10 /* training answers a type fit needs */
#define MIN_TYPE_HELD 5   /* held-out answers a type fit needs */
#define N_GROUPS_MAX (EVALSET_TYPE_COUNT * (1 + CALIB_BUCKETS))

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem calibrate MODEL.gguf --data FILE --out OUT.gguf [--endpoint E]\n"
            "                        [--model M] [--holdout F] [--seed S] [--min-bucket N]\n"
            "                        [--json] [--api-key-file FILE] [--timeout S]\n"
            "                        [--concurrency K]\n"
            "\n"
            "Fits new decision temperatures for MODEL.gguf from its served answers to FILE\n"
            "(docs/eval-format.md) and writes them into a copy, OUT.gguf. Without --endpoint\n"
            "tandem serves MODEL.gguf itself on a private daemon for the run. An --endpoint\n"
            "URL must serve MODEL.gguf: a bare llama-server -m MODEL.gguf, or tandem serve\n"
            "with --model M naming it. The cases are split (seeded) into training and held-out\n"
            "sets; per question type, and per option-count bucket when both sets hold\n"
            "--min-bucket answers of it, the power a of p' = p^a / sum p^a that minimises\n"
            "the training NLL becomes the temperature T / a. A fit is kept only if the\n"
            "held-out NLL improves. The copy records the data's and the model's sha256,\n"
            "the split and the metrics as tandem.calibration.* (shown by tandem inspect).\n"
            "\n"
            "  --endpoint E        a /v1/systemone URL that serves MODEL.gguf, or file:PATH\n"
            "                      (default: file:MODEL.gguf, a private daemon)\n"
            "  --data FILE         the dataset (gold answers are what the fit uses)\n"
            "  --out FILE          the calibrated copy (not MODEL.gguf itself)\n"
            "  --model M           the request's \"model\" (omitted when not given)\n"
            "  --holdout F         share of the cases held out (default %.1f, 0.05 to 0.95)\n"
            "  --seed S            of the split (default 1)\n"
            "  --min-bucket N      answers a bucket fit needs in each split (default %d)\n"
            "  --json              the machine-readable summary, with every question's\n"
            "                      predicted probabilities from the copy (docs/calibrate.md)\n"
            "  --api-key-file FILE the bearer token: the file's first line that is not empty\n"
            "                      or a # comment; mode 0600 (default: $TANDEM_API_KEY, if\n"
            "                      set; never on the command line, which every user can read)\n"
            "  --timeout S         seconds per request (default 60)\n"
            "  --concurrency K     requests in flight (default 1, at most %u)\n"
            "  -h, --help\n"
            "\n"
            "Exit status: 0 the copy was written, 1 failure, 2 usage error.\n",
            DEFAULT_HOLDOUT, DEFAULT_MIN_BUCKET, EVAL_MAX_CONCURRENCY);
}

/* --- the command line ---------------------------------------------------------- */

struct cal_cli {
    struct eval_params p;
    const char *model, *data, *out, *key_file;
    char key[API_KEY_MAX];
    const char *llama_server; /* for the private daemon (no --endpoint) */
    double holdout, timeout_s;
    unsigned seed, min_bucket;
    int as_json;
};

static int parse_option(int c, struct cal_cli *o) {
    switch (c) {
    case 'e': o->p.endpoint = optarg; return 0;
    case 'd': o->data = optarg; return 0;
    case 'o': o->out = optarg; return 0;
    case 'm': o->p.model = optarg; return 0;
    case 'j': o->as_json = 1; return 0;
    case 'K': o->key_file = optarg; return 0;
    case 'k': fprintf(stderr, "tandem calibrate: %s\n", api_key_argv_refusal()); return 2;
    case 'H':
        return cli_parse_double("calibrate", "--holdout", optarg, 0.05, 0.95, &o->holdout);
    case 't':
        return cli_parse_double("calibrate", "--timeout", optarg, 0.001, 86400,
                                     &o->timeout_s);
    case 's': return cli_parse_uint("calibrate", "--seed", optarg, 0, UINT32_MAX, &o->seed);
    case 'b':
        return cli_parse_uint("calibrate", "--min-bucket", optarg, 1, 1000000,
                                   &o->min_bucket);
    case 'c':
        return cli_parse_uint("calibrate", "--concurrency", optarg, 1,
                                   EVAL_MAX_CONCURRENCY, &o->p.concurrency);
    case 'h': usage(stdout); return -1;
    default: usage(stderr); return 2;
    }
}

/* Parses argv into *o. Returns 0, -1 after --help, or 2 (usage error, said). */
static int parse_args(int argc, char **argv, struct cal_cli *o) {
    static const struct option opts[] = {
        {"endpoint", required_argument, NULL, 'e'}, {"data", required_argument, NULL, 'd'},
        {"out", required_argument, NULL, 'o'},      {"model", required_argument, NULL, 'm'},
        {"holdout", required_argument, NULL, 'H'},  {"seed", required_argument, NULL, 's'},
        {"min-bucket", required_argument, NULL, 'b'}, {"json", no_argument, NULL, 'j'},
        {"api-key", required_argument, NULL, 'k'},  {"api-key-file", required_argument, NULL, 'K'},
        {"timeout", required_argument, NULL, 't'},
        {"concurrency", required_argument, NULL, 'c'}, {"help", no_argument, NULL, 'h'},
        {0},
    };
    int c, rc = 0;
    optind = 0;
    while (!rc && (c = getopt_long(argc, argv, "h", opts, NULL)) != -1)
        rc = parse_option(c, o);
    if (rc)
        return rc;
    if (optind + 1 != argc) {
        fprintf(stderr, "tandem calibrate: expected exactly one MODEL.gguf\n");
        usage(stderr);
        return 2;
    }
    o->model = argv[optind];
    if (!o->data || !o->out) {
        fprintf(stderr, "tandem calibrate: --data FILE and --out FILE are required\n");
        return 2;
    }
    char err[600];
    if (api_key_resolve(o->key_file, o->key, sizeof o->key, &o->p.api_key, err, sizeof err)) {
        fprintf(stderr, "tandem calibrate: %s\n", err);
        return 2;
    }
    o->p.timeout_ms = (long)(o->timeout_s * 1000);
    return 0;
}

/* --- the model ------------------------------------------------------------------- */

struct model_info {
    struct gguf *g;
    char arch[128];
    char dtype[64];            /* {arch}.decision.type */
    struct calib_temps temps;  /* as the engine reads them */
};

/* The value the engine reads from a temperature key: its text form (floats
 * as "%f", std::to_string) parsed by strtof. Arrays are not in the engine's
 * metadata map: *skip. */
static double engine_value(const struct gguf_kv *kv, bool *skip) {
    char text[64] = "";
    double f;
    int64_t i;
    uint64_t u;
    struct gguf_str s;
    bool b;
    *skip = kv->type == GGUF_TYPE_ARRAY;
    if (kv->type == GGUF_TYPE_FLOAT32 && gguf_kv_f64(kv, &f) == TANDEM_OK)
        return calib_temp_engine((float)f);
    if (gguf_kv_f64(kv, &f) == TANDEM_OK)
        snprintf(text, sizeof text, "%f", f);
    else if (gguf_kv_str(kv, &s) == TANDEM_OK)
        snprintf(text, sizeof text, "%.*s", (int)(s.len < 63 ? s.len : 63), s.ptr);
    else if (gguf_kv_i64(kv, &i) == TANDEM_OK)
        snprintf(text, sizeof text, "%lld", (long long)i);
    else if (gguf_kv_u64(kv, &u) == TANDEM_OK)
        snprintf(text, sizeof text, "%llu", (unsigned long long)u);
    else if (gguf_kv_bool(kv, &b) == TANDEM_OK)
        snprintf(text, sizeof text, "%s", b ? "true" : "false");
    return strtof(text, NULL);
}

static int str_copy(struct gguf_str s, char *out, size_t cap) {
    if (s.len >= cap)
        return -1;
    memcpy(out, s.ptr, (size_t)s.len);
    out[s.len] = '\0';
    return 0;
}

/* Reads every "{arch}.decision.temperature.*" key into m->temps. */
static int load_temperatures(struct model_info *m, const char *path) {
    char prefix[192];
    int plen = snprintf(prefix, sizeof prefix, "%s.decision.temperature.", m->arch);
    for (uint64_t i = 0; i < gguf_kv_count(m->g); i++) {
        const struct gguf_kv *kv = gguf_kv_at(m->g, i);
        char suffix[CALIB_MAX_SUFFIX];
        bool skip;
        if (kv->key.len <= (uint64_t)plen || memcmp(kv->key.ptr, prefix, (size_t)plen))
            continue;
        double v = engine_value(kv, &skip);
        struct gguf_str rest = {kv->key.ptr + plen, kv->key.len - (uint64_t)plen};
        if (skip)
            continue;
        if (!(v > 0) || str_copy(rest, suffix, sizeof suffix) || !calib_temps_put(&m->temps,
                                                                                  suffix, v)) {
            fprintf(stderr, "tandem calibrate: %s: %.*s: not a temperature the engine accepts "
                            "(or too many temperature keys)\n", path, (int)kv->key.len,
                    kv->key.ptr);
            return 1;
        }
    }
    return 0;
}

/* Opens the model and reads its decision metadata. Returns 0 or 1 (said). */
static int load_model(const char *path, struct model_info *m) {
    char err[1024], key[192];
    struct gguf_str s;
    if (gguf_open(path, &m->g, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem calibrate: %s\n", err);
        return 1;
    }
    if (gguf_get_str(m->g, "general.architecture", &s) != TANDEM_OK ||
        str_copy(s, m->arch, sizeof m->arch)) {
        fprintf(stderr, "tandem calibrate: %s: no general.architecture\n", path);
        return 1;
    }
    snprintf(key, sizeof key, "%s.decision.type", m->arch);
    if (gguf_get_str(m->g, key, &s) != TANDEM_OK || str_copy(s, m->dtype, sizeof m->dtype)) {
        fprintf(stderr, "tandem calibrate: %s: not a decision model (no %s); calibrate "
                        "fits the temperatures of System One decision models\n", path, key);
        return 1;
    }
    if (!strcmp(m->dtype, "lev")) {
        fprintf(stderr, "tandem calibrate: %s: decision type lev is not supported: lev averages "
                        "two option orders for choice questions and reads noul as an expected "
                        "rating, so its answers are not a power of one softmax and a "
                        "temperature refit cannot be predicted exactly\n", path);
        return 1;
    }
    return load_temperatures(m, path);
}

/* 1 (said) when out names the model file itself. */
static int refuse_same_file(const char *model, const char *out) {
    struct stat a, b;
    if (strcmp(model, out) && (stat(model, &a) || stat(out, &b) || a.st_dev != b.st_dev ||
                               a.st_ino != b.st_ino))
        return 0;
    fprintf(stderr, "tandem calibrate: --out %s is the model itself; write the calibrated "
                    "copy to another file\n", out);
    return 1;
}

/* --- answers, groups and fits ------------------------------------------------------ */

struct answer {
    struct calib_item it;
    enum evalset_type type;
    size_t bucket;
    bool held;
};

struct group {
    enum evalset_type type;
    int bucket;                  /* -1: the whole type, else the bucket index */
    size_t n_train, n_held;
    bool fitted, kept;
    double a;                    /* the fitted power; NaN when not fitted */
    double t_old, t_new;         /* the group's temperature before and after */
    double nll_before, nll_after, ece_before, ece_after; /* held-out; NaN when not fitted */
    char note[192];              /* why not fitted or not kept; "" otherwise */
};

struct cal {
    struct cal_cli *o;
    struct model_endpoints *daemons; /* serving MODEL.gguf without --endpoint */
    struct model_info m;
    struct evalset *set;
    struct eval_run *run;
    bool *held;                  /* per case */
    size_t n_held_cases;
    struct answer *ans;
    size_t n_ans;
    struct calib_item *scratch;  /* n_ans items */
    struct calib_temps now;      /* the copy's temperatures, as the engine reads them */
    struct group groups[N_GROUPS_MAX];
    size_t n_groups;
};

static bool in_group(const struct answer *a, enum evalset_type t, int bucket) {
    return a->type == t && (bucket < 0 || a->bucket == (size_t)bucket);
}

/* Gathers the answers of the group and split into k->scratch; returns how many. */
static size_t select_items(struct cal *k, enum evalset_type t, int bucket, bool held) {
    size_t n = 0;
    for (size_t i = 0; i < k->n_ans; i++)
        if (k->ans[i].held == held && in_group(&k->ans[i], t, bucket))
            k->scratch[n++] = k->ans[i].it;
    return n;
}

/* The power that turns a served answer into the one served at temperatures ts. */
static double power_for(const struct cal *k, const struct calib_temps *ts,
                        enum evalset_type t, size_t n) {
    const char *name = evalset_type_name(t);
    return calib_temps_lookup(&k->m.temps, name, n) / calib_temps_lookup(ts, name, n);
}

/* Held-out NLL and ECE of the group's answers when served at temperatures ts. */
static void held_metrics(const struct cal *k, enum evalset_type t, int bucket,
                         const struct calib_temps *ts, double *nll, double *ece) {
    double q[EVALSET_MAX_CHOICE_OPTIONS + 1], sum = 0;
    size_t n = 0;
    struct metrics_calib mc;
    metrics_calib_init(&mc);
    for (size_t i = 0; i < k->n_ans; i++) {
        const struct answer *a = &k->ans[i];
        if (!a->held || !in_group(a, t, bucket))
            continue;
        calib_apply(a->it.p, a->it.n, power_for(k, ts, t, a->it.n), q);
        size_t top = metrics_top(q, a->it.n);
        sum += metrics_nll(q, a->it.target, a->it.n, a->it.gold);
        metrics_calib_add(&mc, q[top], top == a->it.gold);
        n++;
    }
    *nll = n ? sum / (double)n : NAN;
    *ece = n ? metrics_calib_ece(&mc) : NAN;
}

static void group_name(const struct group *g, char *out, size_t cap) {
    if (g->bucket < 0)
        snprintf(out, cap, "%s", evalset_type_name(g->type));
    else
        snprintf(out, cap, "%s.%s", evalset_type_name(g->type),
                 calib_bucket_name((size_t)g->bucket));
}

/* A question with this many options falls in bucket b. */
static size_t bucket_probe(size_t b) { return b == 0 ? 2 : b == 1 ? 3 : b == 2 ? 6 : 11; }

/* The group's temperature in ts: the type's key, or what its bucket uses. */
static double group_temp(const struct group *g, const struct calib_temps *ts) {
    const char *type = evalset_type_name(g->type);
    return g->bucket < 0 ? calib_temps_get(ts, type)
                         : calib_temps_lookup(ts, type, bucket_probe((size_t)g->bucket));
}

/* Fits the group on the training answers into the candidate table cand (a
 * copy of k->now, updated), measures the held-out split at k->now and at cand,
 * and adopts cand when its NLL is lower. A bucket's new temperature is its
 * served one over a: the fit is against the served answers. */
static void fit_group(struct cal *k, struct group *g) {
    const char *type = evalset_type_name(g->type);
    struct calib_temps cand = k->now;
    g->a = calib_fit(k->scratch, select_items(k, g->type, g->bucket, false));
    g->fitted = true;
    bool ok = g->bucket < 0
                  ? calib_temps_scale_type(&cand, type, g->a)
                  : calib_temps_set_bucket(&cand, type, (size_t)g->bucket,
                                           group_temp(g, &k->m.temps) / g->a);
    g->t_old = group_temp(g, &k->now);
    g->t_new = group_temp(g, &cand);
    held_metrics(k, g->type, g->bucket, &k->now, &g->nll_before, &g->ece_before);
    held_metrics(k, g->type, g->bucket, &cand, &g->nll_after, &g->ece_after);
    g->kept = ok && g->t_new > 0 && g->nll_after < g->nll_before;
    if (g->kept)
        k->now = cand;
    else if (!ok || !(g->t_new > 0))
        snprintf(g->note, sizeof g->note, "the temperature %g cannot be written", g->t_new);
    else
        snprintf(g->note, sizeof g->note, "held-out NLL %.3f -> %.3f", g->nll_before,
                 g->nll_after);
}

static struct group *add_group(struct cal *k, enum evalset_type t, int bucket) {
    struct group *g = &k->groups[k->n_groups++];
    *g = (struct group){.type = t, .bucket = bucket, .a = NAN, .t_old = NAN, .t_new = NAN,
                        .nll_before = NAN, .nll_after = NAN, .ece_before = NAN,
                        .ece_after = NAN};
    g->n_train = select_items(k, t, bucket, false);
    g->n_held = select_items(k, t, bucket, true);
    return g;
}

/* The bucket fits of type t: buckets with --min-bucket answers in both
 * splits, when the type's answers span more than one bucket. */
static void fit_buckets(struct cal *k, enum evalset_type t) {
    size_t used = 0, n[CALIB_BUCKETS][2] = {{0}};
    for (size_t i = 0; i < k->n_ans; i++)
        if (k->ans[i].type == t)
            n[k->ans[i].bucket][k->ans[i].held]++;
    for (size_t b = 0; b < CALIB_BUCKETS; b++)
        used += n[b][0] + n[b][1] > 0;
    for (size_t b = 0; used > 1 && b < CALIB_BUCKETS; b++)
        if (n[b][0] >= k->o->min_bucket && n[b][1] >= k->o->min_bucket)
            fit_group(k, add_group(k, t, (int)b));
}

/* Every type with answers, then its buckets. Returns how many types were fitted. */
static size_t fit_all(struct cal *k) {
    size_t fitted = 0;
    k->now = k->m.temps;
    for (int t = 0; t < EVALSET_TYPE_COUNT; t++) {
        struct group *g = add_group(k, (enum evalset_type)t, -1);
        if (!g->n_train && !g->n_held) {
            k->n_groups--;
            continue;
        }
        if (g->n_train < MIN_TYPE_TRAIN || g->n_held < MIN_TYPE_HELD) {
            snprintf(g->note, sizeof g->note, "too few answers: %zu training and %zu held-out, "
                     "a fit needs %d and %d", g->n_train, g->n_held, MIN_TYPE_TRAIN,
                     MIN_TYPE_HELD);
            continue;
        }
        fit_group(k, g);
        fitted++;
        fit_buckets(k, (enum evalset_type)t);
    }
    return fitted;
}

/* The scored answers of the run, with the split. Returns 0 or 1 (said). */
static int collect_answers(struct cal *k) {
    const struct evalset *set = k->set;
    k->ans = mem_alloc_array(set->n_gold ? set->n_gold : 1, sizeof *k->ans);
    k->scratch = mem_alloc_array(set->n_gold ? set->n_gold : 1, sizeof *k->scratch);
    k->held = mem_calloc(set->n_cases, sizeof *k->held);
    if (!k->ans || !k->scratch || !k->held) {
        fprintf(stderr, "tandem calibrate: out of memory\n");
        return 1;
    }
    k->n_held_cases = calib_split(set->n_cases, k->o->holdout, k->o->seed, k->held);
    for (size_t c = 0; c < set->n_cases; c++)
        for (size_t q = 0; q < set->cases[c].n_questions; q++) {
            const struct evalset_question *qq = &set->cases[c].q[q];
            if (!qq->has_gold)
                continue;
            k->ans[k->n_ans++] = (struct answer){
                {eval_run_dist(k->run, c, 0, q), qq->target, qq->n_options, qq->gold},
                qq->type, calib_bucket(qq->n_options), k->held[c]};
        }
    return 0;
}

/* --- the summary ------------------------------------------------------------------- */

static json_t *group_json(const struct group *g) {
    char name[64];
    group_name(g, name, sizeof name);
    return json_pack("{s:s,s:s,s:o,s:I,s:I,s:b,s:o,s:o,s:o,s:b,s:o,s:o,s:o,s:o,s:o}", "group",
                     name, "type", evalset_type_name(g->type), "bucket",
                     g->bucket < 0 ? json_null()
                                   : json_string(calib_bucket_name((size_t)g->bucket)),
                     "n_train", (json_int_t)g->n_train, "n_held", (json_int_t)g->n_held,
                     "fitted", g->fitted, "a", summary_number(g->a), "t_old",
                     summary_number(g->t_old), "t_new", summary_number(g->t_new), "kept",
                     g->kept, "nll_before", summary_number(g->nll_before), "nll_after",
                     summary_number(g->nll_after), "ece_before", summary_number(g->ece_before),
                     "ece_after", summary_number(g->ece_after), "note",
                     *g->note ? json_string(g->note) : json_null());
}

/* The keys the copy changes: {"<arch>.decision.temperature.<suffix>": value}. */
static json_t *written_json(const struct cal *k) {
    json_t *o = json_object();
    for (size_t i = 0; o && i < k->now.n; i++) {
        const struct calib_temp *t = &k->now.t[i];
        char key[256];
        snprintf(key, sizeof key, "%s.decision.temperature.%s", k->m.arch, t->suffix);
        if (t->changed)
            json_object_set_new(o, key, json_real((double)t->written));
    }
    return o;
}

static json_t *question_prediction(const struct cal *k, size_t c, size_t q) {
    const struct evalset_question *qq = &k->set->cases[c].q[q];
    double p[EVALSET_MAX_CHOICE_OPTIONS + 1];
    calib_apply(eval_run_dist(k->run, c, 0, q), qq->n_options,
                power_for(k, &k->now, qq->type, qq->n_options), p);
    json_t *options = json_array(), *probs = json_array();
    for (size_t i = 0; i < qq->n_options; i++) {
        json_array_append_new(options, json_string(qq->options[i]));
        json_array_append_new(probs, json_real(p[i]));
    }
    return json_pack("{s:s,s:s,s:s,s:o,s:o}", "case", k->set->cases[c].id, "question", qq->id,
                     "type", evalset_type_name(qq->type), "options", options, "p", probs);
}

/* What the copy will serve for every question of the set, in dataset order. */
static json_t *predictions_json(const struct cal *k) {
    json_t *a = json_array();
    for (size_t c = 0; a && c < k->set->n_cases; c++)
        for (size_t q = 0; q < k->set->cases[c].n_questions; q++)
            json_array_append_new(a, question_prediction(k, c, q));
    return a;
}

static void split_text(const struct cal *k, char *out, size_t cap) {
    snprintf(out, cap, "seed %u, held-out %g: %zu of %zu cases", k->o->seed, k->o->holdout,
             k->n_held_cases, k->set->n_cases);
}

/* The documented --json object; the provenance keys are taken from it. */
static json_t *summary_json(const struct cal *k, const char *model_sha, const char *data_sha) {
    char split[160];
    split_text(k, split, sizeof split);
    json_t *groups = json_array();
    for (size_t i = 0; groups && i < k->n_groups; i++)
        json_array_append_new(groups, group_json(&k->groups[i]));
    const struct cal_cli *o = k->o;
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:o,s:s,s:s,s:I,s:I,"
                     "s:{s:I,s:f,s:I,s:s},s:f,s:o,s:o,s:s,s:o}",
                     "format", "tandem-calibrate/1", "model", o->model, "model_sha256", model_sha,
                     "architecture", k->m.arch, "decision_type", k->m.dtype, "endpoint",
                     k->run->url, "served_model", o->p.model ? json_string(o->p.model)
                                                            : json_null(),
                     "data", o->data, "data_sha256", data_sha, "cases",
                     (json_int_t)k->set->n_cases, "questions", (json_int_t)k->set->n_questions,
                     "split", "seed", (json_int_t)o->seed, "holdout", o->holdout,
                     "held_out_cases", (json_int_t)k->n_held_cases, "text", split, "seconds",
                     k->run->seconds, "groups", groups, "written", written_json(k), "out",
                     o->out, "predictions", predictions_json(k));
}

/* --- the copy ---------------------------------------------------------------------- */

static tandem_err set_str(struct gguf_edit *e, const char *key, const char *value, char *err,
                          size_t errlen) {
    size_t len = strlen(key) + strlen(value) + 8;
    char *spec = mem_alloc(len);
    if (!spec)
        return TANDEM_ERR_NOMEM;
    snprintf(spec, len, "%s=str:%s", key, value);
    tandem_err rc = gguf_edit_set_spec(e, spec, err, errlen);
    mem_free(spec);
    return rc;
}

/* The tandem.calibration.* keys, from the summary. */
static tandem_err set_provenance(struct gguf_edit *e, const json_t *s, char *err,
                                 size_t errlen) {
    char *metrics = json_dumps(json_object_get(s, "groups"), JSON_COMPACT | JSON_PRESERVE_ORDER);
    const char *str = json_string_value(json_object_get(json_object_get(s, "split"), "text"));
    const char *keys[][2] = {
        {"tandem.calibration.tool", "tandem calibrate " TANDEM_VERSION},
        {"tandem.calibration.source_sha256", json_string_value(json_object_get(s, "model_sha256"))},
        {"tandem.calibration.data", host_base_name(json_string_value(json_object_get(s, "data")))},
        {"tandem.calibration.data_sha256", json_string_value(json_object_get(s, "data_sha256"))},
        {"tandem.calibration.split", str},
        {"tandem.calibration.metrics", metrics ? metrics : "[]"},
    };
    tandem_err rc = metrics ? TANDEM_OK : TANDEM_ERR_NOMEM;
    for (size_t i = 0; rc == TANDEM_OK && i < sizeof keys / sizeof keys[0]; i++)
        rc = set_str(e, keys[i][0], keys[i][1], err, errlen);
    free(metrics);
    return rc;
}

/* Writes OUT: the source with the changed temperatures (float32) and the
 * provenance. Returns 0 or 1 (said). */
static int write_copy(const struct cal *k, const json_t *summary) {
    char err[1024] = "", spec[320];
    struct gguf_edit *e = NULL;
    tandem_err rc = gguf_edit_new(k->m.g, &e);
    for (size_t i = 0; rc == TANDEM_OK && i < k->now.n; i++) {
        const struct calib_temp *t = &k->now.t[i];
        if (!t->changed)
            continue;
        snprintf(spec, sizeof spec, "%s.decision.temperature.%s=f32:%.9g", k->m.arch, t->suffix,
                 (double)t->written);
        rc = gguf_edit_set_spec(e, spec, err, sizeof err);
    }
    if (rc == TANDEM_OK)
        rc = set_provenance(e, summary, err, sizeof err);
    if (rc == TANDEM_OK)
        rc = gguf_edit_write(e, k->o->out, err, sizeof err);
    gguf_edit_free(e);
    if (rc == TANDEM_OK)
        return 0;
    fprintf(stderr, "tandem calibrate: %s: %s\n", k->o->out, *err ? err : tandem_strerror(rc));
    return 1;
}

/* --- the table --------------------------------------------------------------------- */

static void print_pair(double before, double after, int prec) {
    char b[32] = "-", a[32] = "-";
    if (isfinite(before))
        snprintf(b, sizeof b, "%.*f", prec, before);
    if (isfinite(after))
        snprintf(a, sizeof a, "%.*f", prec, after);
    printf("  %8s -> %-8s", b, a);
}

static void print_group(const json_t *g) {
    const json_t *a = json_object_get(g, "a");
    bool kept = json_is_true(json_object_get(g, "kept"));
    const char *note = json_string_value(json_object_get(g, "note"));
    printf("%-12s %5" JSON_INTEGER_FORMAT " %5" JSON_INTEGER_FORMAT,
           json_string_value(json_object_get(g, "group")),
           json_integer_value(json_object_get(g, "n_train")),
           json_integer_value(json_object_get(g, "n_held")));
    if (json_is_real(a))
        printf("  %7.4f", json_real_value(a));
    else
        printf("  %7s", "-");
    print_pair(json_number_value(json_object_get(g, "t_old")),
               json_number_value(json_object_get(g, "t_new")), 4);
    print_pair(json_number_value(json_object_get(g, "nll_before")),
               json_number_value(json_object_get(g, "nll_after")), 3);
    print_pair(json_number_value(json_object_get(g, "ece_before")),
               json_number_value(json_object_get(g, "ece_after")), 3);
    printf("  %s%s%s%s\n", kept ? "yes" : "no", note ? " (" : "", note ? note : "",
           note ? ")" : "");
}

static void print_table(const json_t *s) {
    printf("tandem calibrate: %s (%s, %s), %s: %" JSON_INTEGER_FORMAT " cases, at %s, %.1f s\n",
           json_string_value(json_object_get(s, "model")),
           json_string_value(json_object_get(s, "architecture")),
           json_string_value(json_object_get(s, "decision_type")),
           json_string_value(json_object_get(s, "data")),
           json_integer_value(json_object_get(s, "cases")),
           json_string_value(json_object_get(s, "endpoint")),
           json_real_value(json_object_get(s, "seconds")));
    printf("split: %s\n\n",
           json_string_value(json_object_get(json_object_get(s, "split"), "text")));
    printf("%-12s %5s %5s  %7s%-22s%-22s%-22s  %s\n", "group", "train", "held", "a",
           "     T old -> new", "  held-out NLL", "  held-out ECE", "kept");
    size_t i;
    const json_t *g, *v;
    json_array_foreach(json_object_get(s, "groups"), i, g)
        print_group(g);
    printf("\nwritten to %s:\n", json_string_value(json_object_get(s, "out")));
    const char *key;
    json_object_foreach((json_t *)json_object_get(s, "written"), key, v)
        printf("  %s = %.6f (f32)\n", key, json_real_value(v));
    printf("  tandem.calibration.* (provenance: tandem inspect %s)\n",
           json_string_value(json_object_get(s, "out")));
}

/* --- the command ------------------------------------------------------------------- */

/* Loads the set and runs it once; every request must be answered. Returns 0
 * or 1 (said). */
static int run_set(struct cal *k) {
    static char err[64 * 1024];
    struct eval_params p = k->o->p;
    if (evalset_load(k->o->data, &k->set, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (isatty(STDERR_FILENO)) {
        p.progress = cli_progress;
        p.progress_user = "calibrate";
    }
    if (eval_run_new(k->set, &p, &k->run, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem calibrate: %s\n", err);
        return 1;
    }
    for (size_t c = 0; c < k->set->n_cases && k->run->n_errors; c++) {
        const struct eval_answer *a = eval_run_answer(k->run, c, 0);
        if (a->status != TANDEM_OK)
            fprintf(stderr, "tandem calibrate: case %s (line %zu): %s\n", k->set->cases[c].id,
                    k->set->cases[c].line, a->error ? a->error : tandem_strerror(a->status));
    }
    if (k->run->n_errors)
        fprintf(stderr, "tandem calibrate: %zu of %zu requests failed; a fit needs every "
                        "answer\n", k->run->n_errors, k->set->n_cases);
    return k->run->n_errors ? 1 : 0;
}

/* Hashes the model and the data into the given buffers. Returns 0 or 1 (said). */
static int hash_inputs(const struct cal_cli *o, char *model_sha, char *data_sha) {
    char err[1024];
    bool cached;
    if (hash_file_sha256_cached(o->model, model_sha, &cached, err, sizeof err) != TANDEM_OK ||
        hash_file_sha256(o->data, data_sha, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem calibrate: %s\n", err);
        return 1;
    }
    return 0;
}

/* Points the run at --endpoint, or at MODEL.gguf itself on a private daemon
 * (file:MODEL.gguf). Returns 0 or the exit status. */
static int start_endpoint(struct cal *k) {
    static char spec[PATH_MAX + 8]; /* the endpoint's model points into it for the run */
    snprintf(spec, sizeof spec, "file:%s", k->o->model);
    struct model_endpoint ep = {.flag = "--endpoint",
                                .spec = k->o->p.endpoint ? k->o->p.endpoint : spec,
                                .model = k->o->p.model};
    struct model_endpoints_params mp = {.command = "tandem calibrate", .no_config = true,
                                        .llama_server = k->o->llama_server};
    int rc = model_endpoints_start(&mp, &ep, 1, &k->daemons);
    k->o->p.endpoint = ep.url;
    k->o->p.model = ep.model;
    return rc;
}

static int calibrate(struct cal *k) {
    char model_sha[HASH_SHA256_HEX_LEN + 1], data_sha[HASH_SHA256_HEX_LEN + 1];
    int rc;
    if (load_model(k->o->model, &k->m) || refuse_same_file(k->o->model, k->o->out) ||
        hash_inputs(k->o, model_sha, data_sha))
        return 1;
    if ((rc = start_endpoint(k)))
        return rc;
    if (run_set(k) || collect_answers(k))
        return 1;
    if (!fit_all(k)) {
        fprintf(stderr, "tandem calibrate: %s: no question type can be fitted:\n", k->o->data);
        for (size_t i = 0; i < k->n_groups; i++)
            fprintf(stderr, "  %s: %s\n", evalset_type_name(k->groups[i].type),
                    k->groups[i].note);
        if (!k->n_groups)
            fprintf(stderr, "  no question has a gold answer\n");
        return 1;
    }
    json_t *summary = summary_json(k, model_sha, data_sha);
    rc = summary ? write_copy(k, summary) : 1;
    if (!summary)
        fprintf(stderr, "tandem calibrate: out of memory\n");
    else if (!rc && k->o->as_json) {
        json_dumpf(summary, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("\n");
    } else if (!rc) {
        print_table(summary);
    }
    json_decref(summary);
    return rc;
}

int cmd_calibrate_main(int argc, char **argv, const char *llama_server) {
    struct cal_cli o = {.p = eval_default_params(), .holdout = DEFAULT_HOLDOUT,
                        .timeout_s = 60, .seed = 1, .min_bucket = DEFAULT_MIN_BUCKET};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    o.llama_server = llama_server;
    struct cal *k = mem_calloc(1, sizeof *k);
    if (!k) {
        fprintf(stderr, "tandem calibrate: out of memory\n");
        return 1;
    }
    k->o = &o;
    rc = calibrate(k);
    eval_run_free(k->run);
    evalset_free(k->set);
    gguf_free(k->m.g);
    mem_free(k->ans);
    mem_free(k->scratch);
    mem_free(k->held);
    model_endpoints_free(k->daemons);
    mem_free(k);
    return rc;
}
