/* cmd_drift.c: `tandem drift`, did another model (or quantization) change the decisions?
 *
 * The reference and the candidate answer the same dataset, one after the
 * other, through eval.h. Each question answered by both is compared:
 * KL(ref || cand) in nats (metrics_kl: candidate probabilities below 1e-12
 * are raised to it), max |dp| over the options, and whether the top answers
 * agree. A question either side failed on is listed as skipped, never
 * compared. Beside the raw flip rate, the flips among "sure" answers (the
 * reference's top-two margin at least --margin) are counted: a near-tie
 * flips on rounding alone. Rates carry Wilson 95% intervals. Like `tandem
 * eval`, the JSON summary is built first and the table rendered from it. */
#include "cli/cmd_drift.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/api_key.h"
#include "cli/cmd_eval.h"
#include "flow/model_endpoint.h"
#include "base/mem.h"
#include "eval/metrics.h"

#define DEFAULT_TOP 10
#define DEFAULT_MARGIN 0.1

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem drift --ref ENDPOINT --cand ENDPOINT --data FILE [--config F]\n"
            "                    [--model-ref M] [--model-cand M] [--top N] [--concurrency K]\n"
            "                    [--margin M] [--repeat N] [--json] [--api-key-file FILE]\n"
            "                    [--timeout S] [--retries R]\n"
            "\n"
            "Sends every case of FILE (docs/eval-format.md; gold answers are optional) to the\n"
            "reference and the candidate endpoint and compares the answers question by\n"
            "question: KL(ref || cand) in nats, max |dp| and top-answer agreement; overall\n"
            "the flip rate (share of questions whose top answer changed) with its Wilson 95%%\n"
            "interval, the flips among answers the reference was sure of (top-two margin at\n"
            "least M), mean and max KL, and the N questions with the largest KL. The question\n"
            "\"did quantization change my decisions?\": serve the original as --ref and the\n"
            "quantized file as --cand (or let tandem quantize --ladder do it, docs/quantize.md).\n"
            "\n"
            "  --ref E, --cand E       each an http(s):// /v1/systemone endpoint, config:MODEL (a\n"
            "                          model of --config, served by a private tandem serve on\n"
            "                          it) or file:PATH (a GGUF file, served likewise); the\n"
            "                          private daemons stop, with their engines, at the end\n"
            "  --config F              the tandem.yaml that config:MODEL names models of\n"
            "  --model-ref M, --model-cand M   the requests' \"model\" (omitted when not given)\n"
            "  --top N                 worst questions to list (default %d)\n"
            "  --margin M              an answer is sure when the reference's top probability\n"
            "                          beats its second by at least M (default %.1f); a\n"
            "                          near-tie flips on rounding alone\n"
            "  --repeat N              send each case N times to each side (default 1): a\n"
            "                          question flips when most of the candidate's repeats\n"
            "                          changed its answer, and the reference's own repeats\n"
            "                          measure the noise to tell drift from\n"
            "  --concurrency K         requests in flight per endpoint (default 1)\n"
            "  --json                  the stable machine-readable summary (docs/eval.md)\n"
            "  --api-key-file FILE     bearer token for both, as for tandem eval (default:\n"
            "                          $TANDEM_API_KEY)\n"
            "  --timeout S, --retries R   as for tandem eval\n"
            "  -h, --help\n"
            "\n"
            "Exit status: 0 every request answered, 1 the dataset or some request failed,\n"
            "2 usage error.\n",
            DEFAULT_TOP, DEFAULT_MARGIN);
}

struct item {
    size_t c, q;
    unsigned flipped;   /* repeats whose top answer differed from the reference's */
    double kl, max_dp;  /* KL averaged over the repeats; max |dp| over them */
    bool agree;         /* flipped in at most half the repeats */
    bool sure;          /* the reference's margin reached the threshold */
};

static int worst_first(const void *a, const void *b) {
    const struct item *x = a, *y = b;
    if (x->kl != y->kl)
        return x->kl < y->kl ? 1 : -1;
    if (x->max_dp != y->max_dp)
        return x->max_dp < y->max_dp ? 1 : -1;
    return x->c != y->c ? (x->c < y->c ? -1 : 1) : (x->q < y->q ? -1 : x->q > y->q);
}

struct agg {
    size_t n, flips, sure, sure_flips, unstable;
    double kl_sum, kl_max, dp_sum, dp_max;
};

static void agg_add(struct agg *a, const struct item *it) {
    a->n++;
    a->flips += !it->agree;
    a->sure += it->sure;
    a->sure_flips += it->sure && !it->agree;
    a->unstable += it->agree && it->flipped;
    a->kl_sum += it->kl;
    a->dp_sum += it->max_dp;
    if (it->kl > a->kl_max)
        a->kl_max = it->kl;
    if (it->max_dp > a->dp_max)
        a->dp_max = it->max_dp;
}

/* [lo, hi]: the Wilson 95% interval of k in n, or null when n is 0. */
static json_t *interval_json(size_t k, size_t n) {
    double lo, hi;
    metrics_wilson(k, n, &lo, &hi);
    return n ? json_pack("[f,f]", lo, hi) : json_null();
}

static json_t *rate_json(size_t k, size_t n) {
    return cmd_eval_number(n ? (double)k / (double)n : NAN);
}

static json_t *agg_json(const struct agg *a) {
    double n = (double)a->n;
    return json_pack("{s:I,s:I,s:o,s:o,s:I,s:I,s:o,s:o,s:I,s:o,s:o,s:o,s:o}", "compared",
                     (json_int_t)a->n, "flips", (json_int_t)a->flips, "flip_rate",
                     rate_json(a->flips, a->n), "flip_ci95", interval_json(a->flips, a->n),
                     "sure_compared", (json_int_t)a->sure, "sure_flips", (json_int_t)a->sure_flips,
                     "sure_flip_rate", rate_json(a->sure_flips, a->sure), "sure_ci95",
                     interval_json(a->sure_flips, a->sure), "unstable", (json_int_t)a->unstable,
                     "kl_mean",
                     cmd_eval_number(a->n ? a->kl_sum / n : NAN), "kl_max",
                     cmd_eval_number(a->n ? a->kl_max : NAN), "max_dp_mean",
                     cmd_eval_number(a->n ? a->dp_sum / n : NAN), "max_dp_max",
                     cmd_eval_number(a->n ? a->dp_max : NAN));
}

static json_t *item_json(const struct eval_run *ref, const struct eval_run *cand,
                         const struct item *it) {
    const struct evalset_case *cs = &ref->set->cases[it->c];
    const struct evalset_question *q = &cs->q[it->q];
    const double *p = eval_run_dist(ref, it->c, 0, it->q), *r = eval_run_dist(cand, it->c, 0, it->q);
    size_t tp = metrics_top(p, q->n_options), tr = metrics_top(r, q->n_options);
    json_t *j = json_pack("{s:s,s:s,s:s,s:f,s:f,s:b,s:b,s:o,s:f,s:o,s:f}", "case", cs->id,
                          "question", q->id, "type", evalset_type_name(q->type), "kl", it->kl,
                          "max_dp", it->max_dp, "agree", it->agree, "sure", it->sure,
                          "ref_answer", cmd_eval_answer_json(q, tp), "ref_p", p[tp],
                          "cand_answer", cmd_eval_answer_json(q, tr), "cand_p", r[tr]);
    if (j && cand->repeat > 1)
        json_object_set_new(j, "flipped_repeats", json_integer(it->flipped));
    return j;
}

/* Compares question q of case c: the reference's repeat 0 against run's
 * repeats from..repeat-1. False when a request of either failed. */
static bool compare_one(const struct eval_run *ref, const struct eval_run *run, unsigned from,
                        size_t c, size_t q, double margin, struct item *it) {
    const double *p = eval_run_dist(ref, c, 0, q);
    size_t n = ref->set->cases[c].q[q].n_options;
    if (!p || from >= run->repeat)
        return false;
    *it = (struct item){.c = c, .q = q, .sure = metrics_margin(p, n) >= margin};
    for (unsigned r = from; r < run->repeat; r++) {
        const double *d = eval_run_dist(run, c, r, q);
        if (!d)
            return false;
        it->kl += metrics_kl(p, d, n) / (run->repeat - from);
        it->max_dp = fmax(it->max_dp, metrics_max_abs_diff(p, d, n));
        it->flipped += metrics_top(p, n) != metrics_top(d, n);
    }
    it->agree = 2 * it->flipped <= run->repeat - from;
    return true;
}

/* The reference against itself: its repeats 1.. against its repeat 0, the
 * noise a candidate's flips are to be told from. */
static json_t *noise_json(const struct eval_run *ref, double margin) {
    struct agg a = {0};
    struct item it;
    for (size_t c = 0; c < ref->set->n_cases; c++)
        for (size_t q = 0; q < ref->set->cases[c].n_questions; q++)
            if (compare_one(ref, ref, 1, c, q, margin, &it))
                agg_add(&a, &it);
    return agg_json(&a);
}

/* The side's facts: endpoint, model, failed requests and accuracy on the gold questions. */
static json_t *side_json(const struct eval_run *run, const char *model) {
    size_t n = 0, correct = 0;
    const struct evalset *set = run->set;
    for (size_t c = 0; c < set->n_cases; c++)
        for (size_t q = 0; q < set->cases[c].n_questions; q++) {
            const struct evalset_question *qq = &set->cases[c].q[q];
            const double *p = eval_run_dist(run, c, 0, q);
            if (!qq->has_gold || !p)
                continue;
            n++;
            correct += metrics_top(p, qq->n_options) == qq->gold;
        }
    return json_pack("{s:s,s:o,s:I,s:I,s:o,s:f}", "endpoint", run->url, "model",
                     model ? json_string(model) : json_null(), "errors",
                     (json_int_t)run->n_errors, "scored", (json_int_t)n, "accuracy",
                     cmd_eval_number(n ? (double)correct / (double)n : NAN), "seconds",
                     run->seconds);
}

static json_t *errors_json(const struct eval_run *run, const char *side) {
    json_t *a = json_array();
    for (size_t c = 0; a && c < run->set->n_cases; c++) {
        const struct eval_answer *ans = eval_run_answer(run, c, 0);
        if (ans->status == TANDEM_OK)
            continue;
        json_array_append_new(
            a, json_pack("{s:s,s:s,s:I,s:I,s:s}", "side", side, "case", run->set->cases[c].id,
                         "line", (json_int_t)run->set->cases[c].line, "http_status",
                         (json_int_t)ans->http_status, "error",
                         ans->error ? ans->error : tandem_strerror(ans->status)));
    }
    return a;
}

struct drift_options cmd_drift_default_options(void) {
    return (struct drift_options){.top = DEFAULT_TOP, .margin = DEFAULT_MARGIN};
}

json_t *cmd_drift_compare(const struct eval_run *ref, const char *ref_model,
                          const struct eval_run *cand, const char *cand_model,
                          const struct drift_options *o) {
    const struct evalset *set = ref->set;
    struct item *items = mem_alloc_array(set->n_questions ? set->n_questions : 1, sizeof *items);
    if (!items)
        return NULL;
    size_t n = 0, skipped = 0;
    struct agg all = {0}, by_type[EVALSET_TYPE_COUNT] = {{0}};
    for (size_t c = 0; c < set->n_cases; c++)
        for (size_t q = 0; q < set->cases[c].n_questions; q++) {
            struct item it;
            if (!compare_one(ref, cand, 0, c, q, o->margin, &it)) {
                skipped++;
                continue;
            }
            items[n++] = it;
            agg_add(&all, &it);
            agg_add(&by_type[set->cases[c].q[q].type], &it);
        }
    json_t *questions = json_array(), *worst = json_array(), *types = json_object();
    for (size_t i = 0; questions && i < n; i++)
        json_array_append_new(questions, item_json(ref, cand, &items[i]));
    qsort(items, n, sizeof *items, worst_first);
    for (size_t i = 0; worst && i < n && i < o->top; i++)
        json_array_append_new(worst, item_json(ref, cand, &items[i]));
    for (int t = 0; types && t < EVALSET_TYPE_COUNT; t++)
        json_object_set_new(types, evalset_type_name((enum evalset_type)t), agg_json(&by_type[t]));
    mem_free(items);
    json_t *errors = errors_json(ref, "ref"), *cerr = errors_json(cand, "cand");
    json_array_extend(errors, cerr);
    json_decref(cerr);
    json_t *out = json_pack("{s:s,s:s,s:I,s:I,s:o,s:o,s:I,s:s,s:f,s:I}", "format",
                            "tandem-drift/1", "data", set->path, "cases", (json_int_t)set->n_cases,
                            "questions", (json_int_t)set->n_questions, "ref",
                            side_json(ref, ref_model), "cand", side_json(cand, cand_model),
                            "skipped", (json_int_t)skipped, "kl_direction",
                            "KL(ref || cand), nats", "margin", o->margin, "repeat",
                            (json_int_t)cand->repeat);
    if (out && ref->repeat > 1)
        json_object_set_new(out, "ref_noise", noise_json(ref, o->margin));
    if (!out || !questions || !worst || !types || !errors) {
        json_decref(out);
        json_decref(questions);
        json_decref(worst);
        json_decref(types);
        json_decref(errors);
        return NULL;
    }
    json_t *overall = agg_json(&all); /* compared, flips, flip_rate, kl_*, max_dp_* */
    json_object_update(out, overall);
    json_decref(overall);
    json_object_set_new(out, "by_type", types);
    json_object_set_new(out, "worst", worst);
    json_object_set_new(out, "errors", errors);
    json_object_set_new(out, "results", questions);
    return out;
}

static void print_answer(const json_t *v) {
    if (json_is_string(v))
        printf("%s", json_string_value(v));
    else if (json_is_integer(v))
        printf("%lld", (long long)json_integer_value(v));
    else
        printf("%s", json_is_true(v) ? "true" : "false");
}

static void print_side(const char *name, const json_t *side) {
    const char *model = json_string_value(json_object_get(side, "model"));
    const json_t *acc = json_object_get(side, "accuracy");
    printf("%s: %s%s%s%s, %lld failed requests", name,
           json_string_value(json_object_get(side, "endpoint")), model ? " (model " : "",
           model ? model : "", model ? ")" : "",
           (long long)json_integer_value(json_object_get(side, "errors")));
    if (json_is_number(acc))
        printf(", accuracy %.3f on %lld gold questions", json_number_value(acc),
               (long long)json_integer_value(json_object_get(side, "scored")));
    printf("\n");
}

static void print_row(const char *name, const json_t *a) {
    json_int_t n = json_integer_value(json_object_get(a, "compared"));
    printf("%-8s %8lld %6lld", name, (long long)n,
           (long long)json_integer_value(json_object_get(a, "flips")));
    static const char *const keys[] = {"flip_rate", "kl_mean", "kl_max", "max_dp_mean",
                                       "max_dp_max"};
    for (size_t i = 0; i < 5; i++) {
        const json_t *v = json_object_get(a, keys[i]);
        if (json_is_number(v))
            printf(" %10.4g", json_number_value(v));
        else
            printf(" %10s", "-");
    }
    printf("\n");
}

/* "k of n (r%, 95% CI lo-hi%)", or "none compared" */
static void print_rate(const json_t *a, const char *k, const char *n, const char *ci) {
    json_int_t kk = json_integer_value(json_object_get(a, k));
    json_int_t nn = json_integer_value(json_object_get(a, n));
    const json_t *iv = json_object_get(a, ci);
    if (!nn) {
        printf("none compared");
        return;
    }
    printf("%lld of %lld (%.1f%%, 95%% CI %.1f-%.1f%%)", (long long)kk, (long long)nn,
           100.0 * (double)kk / (double)nn, 100 * json_number_value(json_array_get(iv, 0)),
           100 * json_number_value(json_array_get(iv, 1)));
}

static void print_rates(const json_t *s) {
    printf("flips: ");
    print_rate(s, "flips", "compared", "flip_ci95");
    printf("\nflips where the reference was sure (top-two margin >= %g): ",
           json_number_value(json_object_get(s, "margin")));
    print_rate(s, "sure_flips", "sure_compared", "sure_ci95");
    printf("\n");
    json_int_t unstable = json_integer_value(json_object_get(s, "unstable"));
    if (json_integer_value(json_object_get(s, "repeat")) > 1)
        printf("unstable (changed in some repeats, not most): %lld\n", (long long)unstable);
    const json_t *noise = json_object_get(s, "ref_noise");
    if (noise) {
        printf("the reference against itself (noise): ");
        print_rate(noise, "flips", "compared", "flip_ci95");
        printf("\n");
    }
}

static void print_table(const json_t *s) {
    printf("tandem drift: %s, %lld cases, %lld questions\n",
           json_string_value(json_object_get(s, "data")),
           (long long)json_integer_value(json_object_get(s, "cases")),
           (long long)json_integer_value(json_object_get(s, "questions")));
    print_side("ref ", json_object_get(s, "ref"));
    print_side("cand", json_object_get(s, "cand"));
    printf("\n%-8s %8s %6s %10s %10s %10s %10s %10s\n", "type", "compared", "flips", "flip-rate",
           "KL-mean", "KL-max", "|dp|-mean", "|dp|-max");
    print_row("overall", s);
    const json_t *types = json_object_get(s, "by_type");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)types, key, v)
        if (json_integer_value(json_object_get(v, "compared")))
            print_row(key, v);
    printf("(KL(ref || cand) in nats; a flip is a question whose top answer changed)\n");
    print_rates(s);
    json_int_t skipped = json_integer_value(json_object_get(s, "skipped"));
    if (skipped)
        printf("skipped: %lld questions (a request failed on one side)\n", (long long)skipped);
    const json_t *worst = json_object_get(s, "worst");
    if (json_array_size(worst)) {
        printf("\nworst questions by KL:\n");
        size_t i;
        json_array_foreach(worst, i, v) {
            printf("  %-32s KL %.4g, max |dp| %.4g, ref ",
                   json_string_value(json_object_get(v, "case")),
                   json_number_value(json_object_get(v, "kl")),
                   json_number_value(json_object_get(v, "max_dp")));
            print_answer(json_object_get(v, "ref_answer"));
            printf(" (%.3f), cand ", json_number_value(json_object_get(v, "ref_p")));
            print_answer(json_object_get(v, "cand_answer"));
            printf(" (%.3f)%s [%s]\n", json_number_value(json_object_get(v, "cand_p")),
                   json_is_true(json_object_get(v, "agree")) ? "" : "  FLIP",
                   json_string_value(json_object_get(v, "question")));
        }
    }
    const json_t *errors = json_object_get(s, "errors");
    if (json_array_size(errors)) {
        printf("\nerrors: %zu failed requests\n", json_array_size(errors));
        size_t i;
        json_array_foreach(errors, i, v)
            printf("  %s: case %s (line %lld): %s\n", json_string_value(json_object_get(v, "side")),
                   json_string_value(json_object_get(v, "case")),
                   (long long)json_integer_value(json_object_get(v, "line")),
                   json_string_value(json_object_get(v, "error")));
    }
}

int cmd_drift_main(int argc, char **argv, const char *llama_server) {
    enum { O_REF = 256, O_CAND, O_MREF, O_MCAND, O_DATA, O_TOP, O_CONC, O_JSON, O_KEY,
           O_TIMEOUT, O_RETRIES, O_CONFIG, O_MARGIN, O_REPEAT, O_KEY_FILE };
    static const struct option opts[] = {
        {"ref", required_argument, NULL, O_REF},
        {"cand", required_argument, NULL, O_CAND},
        {"model-ref", required_argument, NULL, O_MREF},
        {"model-cand", required_argument, NULL, O_MCAND},
        {"data", required_argument, NULL, O_DATA},
        {"top", required_argument, NULL, O_TOP},
        {"concurrency", required_argument, NULL, O_CONC},
        {"json", no_argument, NULL, O_JSON},
        {"api-key", required_argument, NULL, O_KEY},
        {"api-key-file", required_argument, NULL, O_KEY_FILE},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"retries", required_argument, NULL, O_RETRIES},
        {"config", required_argument, NULL, O_CONFIG},
        {"margin", required_argument, NULL, O_MARGIN},
        {"repeat", required_argument, NULL, O_REPEAT},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    struct eval_params p = eval_default_params();
    const char *ref = NULL, *cand = NULL, *mref = NULL, *mcand = NULL, *data = NULL;
    const char *config = NULL, *key_file = NULL;
    static char key[API_KEY_MAX];
    struct drift_options o = cmd_drift_default_options();
    unsigned top = DEFAULT_TOP, timeout_s = 60;
    int c, as_json = 0, rc = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1 && !rc) {
        switch (c) {
        case O_REF: ref = optarg; break;
        case O_CAND: cand = optarg; break;
        case O_MREF: mref = optarg; break;
        case O_MCAND: mcand = optarg; break;
        case O_DATA: data = optarg; break;
        case O_TOP: rc = cmd_eval_parse_uint("drift", "--top", optarg, 0, 1000000, &top); break;
        case O_CONC:
            rc = cmd_eval_parse_uint("drift", "--concurrency", optarg,
                                     1, EVAL_MAX_CONCURRENCY, &p.concurrency);
            break;
        case O_JSON: as_json = 1; break;
        case O_KEY:
            fprintf(stderr, "tandem drift: %s\n", api_key_argv_refusal());
            return 2;
        case O_KEY_FILE: key_file = optarg; break;
        case O_CONFIG: config = optarg; break;
        case O_REPEAT:
            rc = cmd_eval_parse_uint("drift", "--repeat", optarg, 1, EVAL_MAX_REPEAT, &p.repeat);
            break;
        case O_MARGIN:
            rc = cmd_eval_parse_double("drift", "--margin", optarg, 0, 1, &o.margin);
            break;
        case O_TIMEOUT:
            rc = cmd_eval_parse_uint("drift", "--timeout", optarg, 1, 86400, &timeout_s);
            break;
        case O_RETRIES:
            rc = cmd_eval_parse_uint("drift", "--retries", optarg, 0, 10, &p.retries);
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (rc)
        return rc;
    if (optind != argc) {
        fprintf(stderr, "tandem drift: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!ref || !cand || !data) {
        fprintf(stderr, "tandem drift: --ref, --cand and --data are required\n");
        usage(stderr);
        return 2;
    }
    static char err[64 * 1024];
    if (api_key_resolve(key_file, key, sizeof key, &p.api_key, err, sizeof err)) {
        fprintf(stderr, "tandem drift: %s\n", err);
        return 2;
    }
    p.timeout_ms = (long)timeout_s * 1000;

    struct evalset *set;
    if (evalset_load(data, &set, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    struct model_endpoint eps[2] = {{.flag = "--ref", .spec = ref, .model = mref},
                                    {.flag = "--cand", .spec = cand, .model = mcand}};
    struct model_endpoints_params mp = {.command = "tandem drift", .config = config,
                                        .llama_server = llama_server};
    struct model_endpoints *daemons = NULL;
    if ((rc = model_endpoints_start(&mp, eps, 2, &daemons))) {
        evalset_free(set);
        return rc;
    }
    if (!p.api_key)
        p.api_key = model_endpoints_api_key(daemons);
    mref = eps[0].model, mcand = eps[1].model;
    bool tty = isatty(STDERR_FILENO);
    struct eval_run *runs[2] = {NULL, NULL};
    const char *urls[2] = {eps[0].url, eps[1].url}, *models[2] = {mref, mcand};
    const char *labels[2] = {"ref", "cand"};
    int status = 0;
    for (int i = 0; i < 2 && !status; i++) {
        p.endpoint = urls[i];
        p.model = models[i];
        p.progress = tty ? cmd_eval_progress : NULL;
        p.progress_user = (void *)labels[i];
        if (eval_run_new(set, &p, &runs[i], err, sizeof err) != TANDEM_OK) {
            fprintf(stderr, "tandem drift: %s: %s\n", labels[i], err);
            status = 1;
        }
    }
    if (!status) {
        o.top = top;
        json_t *s = cmd_drift_compare(runs[0], mref, runs[1], mcand, &o);
        if (!s) {
            fprintf(stderr, "tandem drift: out of memory\n");
            status = 1;
        } else {
            if (as_json) {
                json_dumpf(s, stdout, JSON_INDENT(2));
                printf("\n");
            } else {
                print_table(s);
            }
            json_decref(s);
            status = runs[0]->n_errors || runs[1]->n_errors ? 1 : 0;
        }
    }
    eval_run_free(runs[0]);
    eval_run_free(runs[1]);
    model_endpoints_free(daemons);
    evalset_free(set);
    return status;
}
