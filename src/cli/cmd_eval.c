/* cmd_eval.c: `tandem eval`, accuracy, calibration and stability of a decision model.
 *
 * The flow is load (evalset) -> run (eval) -> score (summary) -> render.
 * The summary is one JSON object, the documented `--json` output; the
 * terminal table and the HTML report (report.c) are both rendered from it,
 * so the three views cannot disagree. Failed requests are listed one by one
 * and make the exit status 1, after the report of what was answered. Options
 * add sections to the same summary: "permutation" (permute.c), "thresholds"
 * (cli_thresholds.c over eval/thresholds.c) and "compare" (an earlier
 * summary's metrics). */
#include "cli/cmd_eval.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/host.h"
#include "base/mem.h"
#include "cli/api_key.h"
#include "cli/cli_opts.h"
#include "cli/cli_thresholds.h"
#include "eval/permute.h"
#include "eval/report.h"
#include "eval/summary.h"
#include "flow/dataset.h"
#include "flow/model_endpoint.h"

#define DEFAULT_LOW_CONFIDENCE 0.6
#define MAX_BOOTSTRAP 100000
#define MAX_PERMUTE 100

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem eval (--endpoint E [--model M] | --config F --model M) --data FILE\n"
            "                   [--repeat N] [--concurrency K] [--report out.html] [--json]\n"
            "                   [--api-key-file FILE] [--low-confidence P] [--timeout S]\n"
            "                   [--retries R]\n"
            "                   [--target-risk R] [--bootstrap N] [--seed S] [--permute K]\n"
            "                   [--suggest-thresholds [--target-precision P]\n"
            "                    [--write-thresholds PIPELINE (--config F | --apply F)]]\n"
            "                   [--compare BEFORE.json]\n"
            "\n"
            "Sends every case of FILE (JSONL, see docs/eval-format.md) to E/v1/systemone and\n"
            "scores the answers against the gold ones: accuracy (noul at 0.5), Brier score,\n"
            "NLL, ECE over 15 confidence bins, MAE of score questions and the low-confidence\n"
            "rate, overall and per question type; the risk-coverage curve, its area (AURC)\n"
            "and the coverage at a target risk, with bootstrap intervals. With --repeat N\n"
            "every case is sent N times and each question's answers are compared: max |dp|\n"
            "and top-answer flips; the verdict is \"deterministic\" only if every repeat\n"
            "returned identical probabilities.\n"
            "\n"
            "  --endpoint E          any /v1/systemone server (tandem, llama-server, a hosted API),\n"
            "                        config:MODEL (a model of --config) or file:PATH (a GGUF\n"
            "                        file): these two start the model on a private tandem serve\n"
            "                        and stop it, with its engine, at the end\n"
            "  --config F            tandem serve's configuration: the models config:MODEL (and\n"
            "                        --model M without --endpoint) name, and the pipeline\n"
            "                        --write-thresholds names\n"
            "  --model M             the request's \"model\" (omitted when not given)\n"
            "  --data FILE           the dataset\n"
            "  --repeat N            send each case N times (default 1, at most %u)\n"
            "  --concurrency K       requests in flight (default 1, at most %u)\n"
            "  --report FILE         also write a self-contained HTML report with a reliability\n"
            "                        diagram and a confidence histogram\n"
            "  --json                the stable machine-readable summary (docs/eval.md)\n"
            "  --api-key-file FILE   the bearer token: the file's first line that is not empty\n"
            "                        or a # comment; mode 0600 (default: $TANDEM_API_KEY, if\n"
            "                        set; never on the command line, which every user can read)\n"
            "  --low-confidence P    threshold of the low-confidence rate (default %.1f)\n"
            "  --timeout S           seconds per request (default 60)\n"
            "  --retries R           retries after HTTP 429, 503 or 529 (default 2)\n"
            "  --target-risk R       selective prediction: the coverage whose risk (error rate\n"
            "                        of the answers kept) is at most R (default 0.05)\n"
            "  --bootstrap N         resamples of the 95%% intervals of accuracy, ECE and that\n"
            "                        coverage (default 1000, at most %u; 0 = none)\n"
            "  --seed S              of the resampling and the permutations (default 1)\n"
            "  --permute K           the option-order test: ask every choice question again\n"
            "                        with its options in K seeded orders (at most %u); flip\n"
            "                        rate, mean |dp| and the chi-square test of position bias\n"
            "  --suggest-thresholds  for every noul question, the lowest P(true) threshold whose\n"
            "                        accepted answers reach the target precision, and for\n"
            "                        choice questions the lowest confidence (min_confidence)\n"
            "  --target-precision P  of --suggest-thresholds (default 0.95)\n"
            "  --write-thresholds PIPELINE  print the pipeline's verdict lines for those\n"
            "                        thresholds, as YAML in the config's syntax\n"
            "  --apply F             rewrite those lines of config F in place (comments kept,\n"
            "                        the old file saved as F.bak)\n"
            "  --compare FILE        an earlier --json summary (e.g. before `tandem calibrate`):\n"
            "                        the table and report show calibration before and after\n"
            "  -h, --help\n"
            "\n"
            "Exit status: 0 every request answered, 1 the dataset or some request failed\n"
            "(failures are listed per case, after the report), 2 usage error.\n",
            EVAL_MAX_REPEAT, EVAL_MAX_CONCURRENCY, DEFAULT_LOW_CONFIDENCE, MAX_BOOTSTRAP,
            MAX_PERMUTE);
}

/* --- rendering ---------------------------------------------------------------- */

/* One right-aligned table cell of the given width: the number at 3 decimals, or "-". */
static void cell(const json_t *o, const char *key, int width) {
    const json_t *v = json_object_get(o, key);
    if (json_is_number(v))
        printf(" %*.3f", width, json_number_value(v));
    else
        printf(" %*s", width, "-");
}

/* " [lo, hi]" of interval name, or nothing without intervals. */
static void print_interval(const json_t *s, const char *name) {
    const json_t *iv = json_object_get(json_object_get(s, "intervals"), name);
    if (json_array_size(iv) == 2)
        printf(" [%.3f, %.3f]", json_number_value(json_array_get(iv, 0)),
               json_number_value(json_array_get(iv, 1)));
}

static void print_selective(const json_t *s) {
    const json_t *sel = json_object_get(s, "selective"), *m = json_object_get(s, "metrics");
    const json_t *iv = json_object_get(s, "intervals");
    const json_t *overall = json_object_get(m, "overall");
    printf("\nselective: AURC %.3f; coverage at risk <= %.3f: %.3f",
           json_number_value(json_object_get(sel, "aurc")),
           json_number_value(json_object_get(sel, "target_risk")),
           json_number_value(json_object_get(sel, "coverage_at_target_risk")));
    print_interval(s, "coverage_at_target_risk");
    const json_t *th = json_object_get(sel, "threshold");
    if (json_is_number(th))
        printf(" (answer when the top probability is >= %.4f)", json_number_value(th));
    printf("\n");
    if (!json_is_object(iv))
        return;
    printf("95%% intervals (%lld bootstrap resamples, seed %lld): accuracy %.3f",
           (long long)json_integer_value(json_object_get(iv, "resamples")),
           (long long)json_integer_value(json_object_get(iv, "seed")),
           json_number_value(json_object_get(overall, "accuracy")));
    print_interval(s, "accuracy");
    printf(", ECE %.3f", json_number_value(json_object_get(overall, "ece")));
    print_interval(s, "ece");
    printf("\n");
}

/* Prints the positions' rates (at most the first 10) of key "rate" or "uniform_rate". */
static void print_position_rates(const json_t *positions, const char *key) {
    size_t j;
    const json_t *row;
    json_array_foreach(positions, j, row) {
        if (j == 10) {
            printf(" ...");
            break;
        }
        printf("%s%s %.2f", j ? " " : "", json_string_value(json_object_get(row, "label")),
               json_number_value(json_object_get(row, key)));
    }
}

/* The option-order test (--permute K): flips, |dp|, chosen positions against uniform. */
static void print_permutation(const json_t *s) {
    const json_t *pm = json_object_get(s, "permutation");
    if (!json_is_object(pm))
        return;
    json_int_t asked = json_integer_value(json_object_get(pm, "orders_asked"));
    printf("\noption order: %lld permutations of %lld choice questions, %lld answered",
           (long long)json_integer_value(json_object_get(pm, "k")),
           (long long)json_integer_value(json_object_get(pm, "choice_questions")),
           (long long)asked);
    json_int_t failed = json_integer_value(json_object_get(pm, "orders_failed"));
    if (failed)
        printf(" (%lld failed, left out)", (long long)failed);
    if (!asked) {
        printf("\n");
        return;
    }
    printf(": flip rate %.3f, mean |dp| %.3f\nchosen position: ",
           json_number_value(json_object_get(pm, "flip_rate")),
           json_number_value(json_object_get(pm, "mean_abs_dp")));
    const json_t *positions = json_object_get(pm, "positions");
    print_position_rates(positions, "rate");
    printf(" (uniform ");
    print_position_rates(positions, "uniform_rate");
    printf("); chi-square %.1f, df %lld, p = %.2g\n",
           json_number_value(json_object_get(pm, "chi_square")),
           (long long)json_integer_value(json_object_get(pm, "df")),
           json_number_value(json_object_get(pm, "p_value")));
}

/* "calibration before -> after" lines of --compare, overall and per type. */
static void print_compare(const json_t *s) {
    const json_t *cmp = json_object_get(s, "compare");
    if (!cmp)
        return;
    printf("\nbefore -> after (before: %s):\n", json_string_value(json_object_get(cmp, "file")));
    static const char *const keys[] = {"accuracy", "brier", "nll", "ece"};
    for (size_t g = 0; g < SUMMARY_N_GROUPS; g++) {
        const json_t *a = json_object_get(json_object_get(cmp, "metrics"), summary_group_names[g]);
        const json_t *b = json_object_get(json_object_get(s, "metrics"), summary_group_names[g]);
        if (!json_integer_value(json_object_get(a, "n")) ||
            !json_integer_value(json_object_get(b, "n")))
            continue;
        printf("  %-8s", summary_group_names[g]);
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            printf(" %s %.3f -> %.3f%s", keys[k], json_number_value(json_object_get(a, keys[k])),
                   json_number_value(json_object_get(b, keys[k])),
                   k + 1 < sizeof keys / sizeof *keys ? "," : "\n");
    }
}

static void print_table(const json_t *s) {
    const json_t *m = json_object_get(s, "metrics");
    const char *model = json_string_value(json_object_get(s, "model"));
    printf("tandem eval: %s, %lld cases, %lld questions (%lld scored), repeat %lld, at %s%s%s%s, "
           "%.1f s\n",
           json_string_value(json_object_get(s, "data")),
           (long long)json_integer_value(json_object_get(s, "cases")),
           (long long)json_integer_value(json_object_get(s, "questions")),
           (long long)json_integer_value(json_object_get(s, "scored_questions")),
           (long long)json_integer_value(json_object_get(s, "repeat")),
           json_string_value(json_object_get(s, "endpoint")), model ? " (model " : "",
           model ? model : "", model ? ")" : "",
           json_number_value(json_object_get(s, "seconds")));
    printf("\n%-8s %6s %9s %7s %7s %7s %9s %10s %7s\n", "type", "n", "accuracy", "brier", "nll",
           "ece", "low-conf", "mean-conf", "mae");
    for (size_t g = 0; g < SUMMARY_N_GROUPS; g++) {
        const json_t *row = json_object_get(m, summary_group_names[g]);
        json_int_t n = json_integer_value(json_object_get(row, "n"));
        if (g && n == 0)
            continue;
        printf("%-8s %6lld", summary_group_names[g], (long long)n);
        cell(row, "accuracy", 8);
        cell(row, "brier", 6);
        cell(row, "nll", 6);
        cell(row, "ece", 6);
        cell(row, "low_confidence_rate", 8);
        cell(row, "mean_confidence", 9);
        cell(row, "mae", 6);
        printf("\n");
    }
    printf("(low-conf: share of answers whose top probability is below %.2f)\n",
           json_number_value(json_object_get(s, "low_confidence_threshold")));
    print_selective(s);
    print_compare(s);
    cli_thresholds_print(json_object_get(s, "thresholds"));
    print_permutation(s);
    const json_t *st = json_object_get(s, "stability");
    const char *verdict = json_string_value(json_object_get(st, "verdict"));
    printf("\nstability: %s", verdict);
    if (strcmp(verdict, "not measured"))
        printf(" over %lld repeats: %lld of %lld questions identical, max |dp| %.6g, "
               "%lld questions with top-answer flips (%lld flips)\n",
               (long long)json_integer_value(json_object_get(st, "repeat")),
               (long long)json_integer_value(json_object_get(st, "questions_identical")),
               (long long)json_integer_value(json_object_get(st, "questions_measured")),
               json_number_value(json_object_get(st, "max_dp")),
               (long long)json_integer_value(json_object_get(st, "questions_with_flips")),
               (long long)json_integer_value(json_object_get(st, "flips")));
    else
        printf(" (use --repeat N)\n");
    size_t i;
    const json_t *u;
    json_array_foreach(json_object_get(st, "unstable"), i, u) {
        if (i == 10) {
            printf("  ... and %zu more (see --json)\n",
                   json_array_size(json_object_get(st, "unstable")) - 10);
            break;
        }
        printf("  %s.%s: max |dp| %.6g, %lld flips, top answers",
               json_string_value(json_object_get(u, "case")),
               json_string_value(json_object_get(u, "question")),
               json_number_value(json_object_get(u, "max_dp")),
               (long long)json_integer_value(json_object_get(u, "flips")));
        const char *key;
        const json_t *count;
        json_object_foreach((json_t *)json_object_get(u, "answers"), key, count)
            printf(" %s x%lld", key, (long long)json_integer_value(count));
        printf("\n");
    }
    const json_t *req = json_object_get(s, "requests");
    json_int_t nerr = json_integer_value(json_object_get(req, "errors"));
    if (!nerr) {
        printf("\nerrors: none (%lld requests answered)\n",
               (long long)json_integer_value(json_object_get(req, "total")));
        return;
    }
    printf("\nerrors: %lld of %lld requests failed\n", (long long)nerr,
           (long long)json_integer_value(json_object_get(req, "total")));
    const json_t *e;
    json_array_foreach(json_object_get(s, "errors"), i, e)
        printf("  case %s (line %lld), repeat %lld: %s\n",
               json_string_value(json_object_get(e, "case")),
               (long long)json_integer_value(json_object_get(e, "line")),
               (long long)json_integer_value(json_object_get(e, "repeat")),
               json_string_value(json_object_get(e, "error")));
}

/* The parts of an earlier --json summary (file path) that --compare shows
 * beside this run's: the "compare" object (new reference), or NULL with the
 * reason in err[errlen]. A dataset other than data is allowed, and said on
 * stderr. */
static json_t *load_compare(const char *path, const char *data, char *err, size_t errlen) {
    json_error_t je;
    json_t *before = json_load_file(path, JSON_REJECT_DUPLICATES, &je), *out = NULL;
    const char *format = json_string_value(json_object_get(before, "format"));
    if (!before)
        tandem_errmsg(err, errlen, "%s: line %d: %s", path, je.line, je.text);
    else if (!format || strcmp(format, "tandem-eval/1") ||
             !json_is_object(json_object_get(before, "metrics")) ||
             !json_is_array(json_object_get(before, "reliability")))
        tandem_errmsg(err, errlen, "%s: not a tandem eval --json summary (format "
                      "tandem-eval/1 with metrics and reliability)", path);
    else
        out = json_pack("{s:s,s:O,s:O,s:O,s:O,s:O}", "file", path, "model",
                        json_object_get(before, "model"), "data", json_object_get(before, "data"),
                        "metrics", json_object_get(before, "metrics"), "reliability",
                        json_object_get(before, "reliability"), "selective",
                        json_object_get(before, "selective"));
    const char *d0 = json_string_value(json_object_get(before, "data"));
    if (out && d0 && strcmp(d0, data))
        fprintf(stderr, "tandem eval: --compare %s: it scored %s, this run %s\n", path, d0, data);
    json_decref(before);
    return out;
}

/* --- the command -------------------------------------------------------------- */

/* Everything the command line sets. */
struct eval_cli {
    struct eval_params p;
    struct summary_scoring sc;
    const char *data, *report, *config, *compare, *key_file;
    char key[API_KEY_MAX];
    double timeout_s;
    int as_json;
    unsigned permute;                 /* --permute K: option orders asked per choice question */
    json_t *before;                   /* --compare: the earlier summary's parts; owned */
    struct cli_thresholds th;    /* --suggest-thresholds and what it writes */
};

/* Parses argv into *o. Returns 0, -1 after --help, or 2 (usage error, said). */
static int parse_args(int argc, char **argv, struct eval_cli *o) {
    enum { O_ENDPOINT = 256, O_CONFIG, O_MODEL, O_DATA, O_REPEAT, O_CONC, O_REPORT, O_JSON,
           O_KEY, O_LOW, O_TIMEOUT, O_RETRIES, O_RISK, O_BOOT, O_SEED, O_PERMUTE, O_SUGGEST,
           O_PRECISION, O_WRITE, O_APPLY, O_COMPARE, O_KEY_FILE };
    static const struct option opts[] = {
        {"endpoint", required_argument, NULL, O_ENDPOINT},
        {"config", required_argument, NULL, O_CONFIG},
        {"model", required_argument, NULL, O_MODEL},
        {"data", required_argument, NULL, O_DATA},
        {"repeat", required_argument, NULL, O_REPEAT},
        {"concurrency", required_argument, NULL, O_CONC},
        {"report", required_argument, NULL, O_REPORT},
        {"json", no_argument, NULL, O_JSON},
        {"api-key", required_argument, NULL, O_KEY},
        {"api-key-file", required_argument, NULL, O_KEY_FILE},
        {"low-confidence", required_argument, NULL, O_LOW},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"retries", required_argument, NULL, O_RETRIES},
        {"target-risk", required_argument, NULL, O_RISK},
        {"bootstrap", required_argument, NULL, O_BOOT},
        {"seed", required_argument, NULL, O_SEED},
        {"permute", required_argument, NULL, O_PERMUTE},
        {"suggest-thresholds", no_argument, NULL, O_SUGGEST},
        {"target-precision", required_argument, NULL, O_PRECISION},
        {"write-thresholds", required_argument, NULL, O_WRITE},
        {"apply", required_argument, NULL, O_APPLY},
        {"compare", required_argument, NULL, O_COMPARE},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    unsigned seed = 1;
    int c, rc = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1 && !rc) {
        switch (c) {
        case O_ENDPOINT: o->p.endpoint = optarg; break;
        case O_CONFIG: o->config = optarg; break;
        case O_MODEL: o->p.model = optarg; break;
        case O_DATA: o->data = optarg; break;
        case O_REPEAT:
            rc = cli_parse_uint("eval", "--repeat", optarg, 1, EVAL_MAX_REPEAT, &o->p.repeat);
            break;
        case O_CONC:
            rc = cli_parse_uint("eval", "--concurrency", optarg, 1, EVAL_MAX_CONCURRENCY,
                                &o->p.concurrency);
            break;
        case O_REPORT: o->report = optarg; break;
        case O_JSON: o->as_json = 1; break;
        case O_KEY:
            fprintf(stderr, "tandem eval: %s\n", api_key_argv_refusal());
            return 2;
        case O_KEY_FILE: o->key_file = optarg; break;
        case O_LOW:
            rc = cli_parse_double("eval", "--low-confidence", optarg, 0, 1, &o->sc.low);
            break;
        case O_RISK:
            rc = cli_parse_double("eval", "--target-risk", optarg, 0, 1, &o->sc.target_risk);
            break;
        case O_BOOT:
            rc = cli_parse_uint("eval", "--bootstrap", optarg, 0, MAX_BOOTSTRAP,
                                &o->sc.bootstrap);
            break;
        case O_SEED:
            rc = cli_parse_uint("eval", "--seed", optarg, 0, UINT32_MAX, &seed);
            break;
        case O_PERMUTE:
            rc = cli_parse_uint("eval", "--permute", optarg, 1, MAX_PERMUTE, &o->permute);
            break;
        case O_SUGGEST: o->th.suggest = true; break;
        case O_PRECISION:
            rc = cli_parse_double("eval", "--target-precision", optarg, 0.5, 0.9999,
                                  &o->th.target_precision);
            break;
        case O_WRITE: o->th.pipeline = optarg; break;
        case O_APPLY: o->th.apply = optarg; break;
        case O_COMPARE: o->compare = optarg; break;
        case O_TIMEOUT:
            rc = cli_parse_double("eval", "--timeout", optarg, 0.001, 86400, &o->timeout_s);
            break;
        case O_RETRIES:
            rc = cli_parse_uint("eval", "--retries", optarg, 0, 10, &o->p.retries);
            break;
        case 'h': usage(stdout); return -1;
        default: usage(stderr); return 2;
        }
    }
    o->sc.seed = seed;
    if (rc)
        return rc;
    if (optind != argc) {
        fprintf(stderr, "tandem eval: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if ((!o->p.endpoint && !(o->config && o->p.model)) || !o->data) {
        fprintf(stderr, "tandem eval: --data FILE and --endpoint (or --config F --model M) are "
                        "required\n");
        usage(stderr);
        return 2;
    }
    bool url = o->p.endpoint && strstr(o->p.endpoint, "://");
    if (url && o->config && !o->th.pipeline) {
        fprintf(stderr, "tandem eval: --config %s is read for --write-thresholds PIPELINE, or to "
                        "serve a model of it (--model M without --endpoint, or --endpoint "
                        "config:M); --endpoint %s needs neither\n", o->config, o->p.endpoint);
        return 2;
    }
    char err[600];
    if (api_key_resolve(o->key_file, o->key, sizeof o->key, &o->p.api_key, err, sizeof err)) {
        fprintf(stderr, "tandem eval: %s\n", err);
        return 2;
    }
    o->p.timeout_ms = (long)(o->timeout_s * 1000);
    return cli_thresholds_check_args(&o->th, o->config);
}

/* Writes the HTML report of summary to path. Returns 0 or 1 (said on stderr). */
static int write_report(const json_t *summary, const char *path) {
    char *html = NULL;
    size_t len = 0;
    tandem_err e = report_eval_html(summary, &html, &len);
    int rc = 1;
    if (e != TANDEM_OK)
        fprintf(stderr, "tandem eval: report: %s\n", tandem_strerror(e));
    else if (host_write_atomic(path, html, len) != TANDEM_OK)
        fprintf(stderr, "tandem eval: %s: cannot write: %s\n", path, strerror(errno));
    else
        rc = 0;
    mem_free(html);
    return rc;
}

/* Says why the section of option failed; returns 1. */
static int section_failed(const char *option, const char *err) {
    fprintf(stderr, "tandem eval: %s: %s\n", option, err);
    return 1;
}

/* Adds what the options ask beyond the scores: "permutation" (--permute),
 * "thresholds" (--suggest-thresholds) and "compare" (--compare, loaded
 * before the run). Returns 0, or 1 when one of them failed (its reason on
 * stderr; the others are added). */
static int add_sections(json_t *summary, const struct eval_run *run, const struct eval_cli *o,
                        const struct eval_params *p, char *err, size_t errlen) {
    int rc = 0;
    if (o->permute) {
        json_t *perm = NULL;
        if (permute_run(run, p, o->permute, o->sc.seed, &perm, err, errlen) == TANDEM_OK)
            json_object_set_new(summary, "permutation", perm);
        else
            rc = section_failed("--permute", err);
    }
    json_t *th = o->th.suggest ? cli_thresholds_suggest(run, &o->th, &o->sc, err, errlen)
                               : NULL;
    if (th)
        json_object_set_new(summary, "thresholds", th);
    else if (o->th.suggest)
        rc = section_failed("--suggest-thresholds", err);
    if (o->before)
        json_object_set_new(summary, "compare", json_incref(o->before));
    return rc;
}

static bool has_choice(const struct evalset *set) {
    for (size_t c = 0; c < set->n_cases; c++)
        for (size_t q = 0; q < set->cases[c].n_questions; q++)
            if (set->cases[c].q[q].type == S1Q_TYPE_CHOICE)
                return true;
    return false;
}

/* Renders the finished summary: the report, then the table or --json, then
 * the thresholds' YAML. Returns 0 or 1. */
static int render(const json_t *summary, const struct eval_cli *o) {
    int status = o->report ? write_report(summary, o->report) : 0;
    if (json_integer_value(json_object_get(json_object_get(summary, "permutation"),
                                           "orders_failed")))
        status = 1; /* a failed request fails the run, as in the main pass */
    if (o->as_json) {
        json_dumpf(summary, stdout, JSON_INDENT(2));
        printf("\n");
    } else {
        print_table(summary);
        if (o->report && !status)
            printf("report: %s\n", o->report);
    }
    const json_t *th = json_object_get(summary, "thresholds");
    if (o->th.pipeline && th && cli_thresholds_write(th, &o->th, o->as_json))
        status = 1;
    return status;
}

/* Everything checked before a request is sent: gold answers, the thresholds'
 * pipeline and case counts, the --compare file, choice questions for
 * --permute. Returns 0, or 1 with the reason on stderr. */
static int check_before_run(const struct evalset *set, struct eval_cli *o, char *err,
                            size_t errlen) {
    if (set->n_gold == 0) {
        fprintf(stderr, "tandem eval: %s: no case has a gold answer, nothing to score "
                        "(tandem drift compares models without them)\n", o->data);
        return 1;
    }
    if (o->th.suggest && cli_thresholds_check_set(set, &o->th, err, errlen))
        return section_failed("--suggest-thresholds", err);
    if (o->compare && !(o->before = load_compare(o->compare, o->data, err, errlen)))
        return section_failed("--compare", err);
    if (o->permute && !has_choice(set)) {
        fprintf(stderr, "tandem eval: --permute: %s has no choice question: the option-order "
                        "test reorders the options of choice questions\n", o->data);
        return 1;
    }
    return 0;
}

/* Runs the set and renders what it gave. Returns the exit status. */
static int run_and_render(const struct evalset *set, const struct eval_cli *o, char *err,
                          size_t errlen) {
    struct eval_params p = o->p;
    if (isatty(STDERR_FILENO)) {
        p.progress = cli_progress;
        p.progress_user = "eval";
    }
    struct eval_run *run;
    if (eval_run_new(set, &p, &run, err, errlen) != TANDEM_OK) {
        fprintf(stderr, "tandem eval: %s\n", err);
        return 1;
    }
    json_t *summary = summary_build(run, p.model, &o->sc, p.concurrency);
    int status = run->n_errors ? 1 : 0;
    if (!summary) {
        fprintf(stderr, "tandem eval: out of memory\n");
        status = 1;
    } else {
        /* a section that fails is left out, said on stderr; the rest still renders */
        status |= add_sections(summary, run, o, &p, err, errlen);
        status |= render(summary, o);
    }
    json_decref(summary);
    eval_run_free(run);
    return status;
}

/* Points o at its endpoint: a URL as given, or a private daemon serving
 * config:MODEL (also --config F --model M alone) or file:PATH. Returns 0 with
 * *daemons (possibly NULL) to free after the run, else the exit status. */
static int start_endpoint(struct eval_cli *o, const char *llama_server,
                          struct model_endpoints **daemons) {
    static char spec[512]; /* the endpoint's model points into it for the whole run */
    if (!o->p.endpoint)
        snprintf(spec, sizeof spec, "config:%s", o->p.model);
    struct model_endpoint ep = {.flag = "--endpoint", .spec = o->p.endpoint ? o->p.endpoint : spec,
                                .model = o->p.model};
    struct model_endpoints_params mp = {.command = "tandem eval", .config = o->config,
                                        .llama_server = llama_server};
    tandem_err e = model_endpoints_start(&mp, &ep, 1, daemons);
    if (e != TANDEM_OK)
        return e == TANDEM_ERR_INVAL ? 2 : 1;
    o->p.endpoint = ep.url;
    o->p.model = ep.model;
    if (!o->p.api_key)
        o->p.api_key = model_endpoints_api_key(*daemons);
    return 0;
}

int cmd_eval_main(int argc, char **argv, const char *llama_server) {
    struct eval_cli o = {
        .p = eval_default_params(),
        .sc = {.low = DEFAULT_LOW_CONFIDENCE, .target_risk = 0.05, .bootstrap = 1000, .seed = 1},
        .timeout_s = 60,
        .th = {.target_precision = 0.95},
    };
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    static char err[64 * 1024];
    struct evalset *set;
    if (dataset_load(o.data, &(struct dataset_opts){.config_path = o.config}, &set, NULL, err,
                     sizeof err) != TANDEM_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    struct model_endpoints *daemons = NULL;
    int status = check_before_run(set, &o, err, sizeof err);
    if (!status)
        status = start_endpoint(&o, llama_server, &daemons);
    if (!status)
        status = run_and_render(set, &o, err, sizeof err);
    model_endpoints_free(daemons);
    evalset_free(set);
    cli_thresholds_deinit(&o.th);
    json_decref(o.before);
    return status;
}
