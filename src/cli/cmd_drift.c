/* cmd_drift.c: `tandem drift`, did another model (or quantization) change the decisions?
 *
 * The reference and the candidate answer the same dataset, one after the
 * other, through eval.h; drift.h compares the two runs question by question
 * (KL, max |dp|, flips, the flips among "sure" answers, Wilson intervals).
 * Like `tandem eval`, the JSON summary is built first and the table rendered
 * from it. */
#include "cli/cmd_drift.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "cli/api_key.h"
#include "cli/cli_opts.h"
#include "eval/drift.h"
#include "flow/dataset.h"
#include "flow/model_endpoint.h"

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
            DRIFT_DEFAULT_TOP, DRIFT_DEFAULT_MARGIN);
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
    struct drift_options o = drift_default_options();
    unsigned top = DRIFT_DEFAULT_TOP, timeout_s = 60;
    int c, as_json = 0, rc = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1 && !rc) {
        switch (c) {
        case O_REF: ref = optarg; break;
        case O_CAND: cand = optarg; break;
        case O_MREF: mref = optarg; break;
        case O_MCAND: mcand = optarg; break;
        case O_DATA: data = optarg; break;
        case O_TOP: rc = cli_parse_uint("drift", "--top", optarg, 0, 1000000, &top); break;
        case O_CONC:
            rc = cli_parse_uint("drift", "--concurrency", optarg, 1, EVAL_MAX_CONCURRENCY,
                                &p.concurrency);
            break;
        case O_JSON: as_json = 1; break;
        case O_KEY:
            fprintf(stderr, "tandem drift: %s\n", api_key_argv_refusal());
            return 2;
        case O_KEY_FILE: key_file = optarg; break;
        case O_CONFIG: config = optarg; break;
        case O_REPEAT:
            rc = cli_parse_uint("drift", "--repeat", optarg, 1, EVAL_MAX_REPEAT, &p.repeat);
            break;
        case O_MARGIN:
            rc = cli_parse_double("drift", "--margin", optarg, 0, 1, &o.margin);
            break;
        case O_TIMEOUT:
            rc = cli_parse_uint("drift", "--timeout", optarg, 1, 86400, &timeout_s);
            break;
        case O_RETRIES:
            rc = cli_parse_uint("drift", "--retries", optarg, 0, 10, &p.retries);
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
    if (dataset_load(data, &(struct dataset_opts){.config_path = config}, &set, NULL, err,
                     sizeof err) != TANDEM_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    struct model_endpoint eps[2] = {{.flag = "--ref", .spec = ref, .model = mref},
                                    {.flag = "--cand", .spec = cand, .model = mcand}};
    struct model_endpoints_params mp = {.command = "tandem drift", .config = config,
                                        .llama_server = llama_server};
    struct model_endpoints *daemons = NULL;
    tandem_err e = model_endpoints_start(&mp, eps, 2, &daemons);
    if (e != TANDEM_OK) {
        evalset_free(set);
        return e == TANDEM_ERR_INVAL ? 2 : 1;
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
        p.progress = tty ? cli_progress : NULL;
        p.progress_user = (void *)labels[i];
        if (eval_run_new(set, &p, &runs[i], err, sizeof err) != TANDEM_OK) {
            fprintf(stderr, "tandem drift: %s: %s\n", labels[i], err);
            status = 1;
        }
    }
    if (!status) {
        o.top = top;
        json_t *s = drift_compare(runs[0], mref, runs[1], mcand, &o);
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
