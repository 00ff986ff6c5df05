/* cmd_calibrate.c: `tandem calibrate`, new temperatures for a decision model from served answers.
 *
 * The command parses its options, calls calibrate_run (flow/calibrate.c:
 * the run, the fit and the copy) and renders the summary it returns: as
 * JSON with --json, else as a table. Failures are printed as the library
 * told them. */
#include "cli/cmd_calibrate.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli/api_key.h"
#include "cli/cli_opts.h"
#include "flow/calibrate.h"

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
            CALIBRATE_DEFAULT_HOLDOUT, CALIBRATE_DEFAULT_MIN_BUCKET, EVAL_MAX_CONCURRENCY);
}

/* --- the command line ---------------------------------------------------------- */

struct cal_cli {
    struct calibrate_params p;
    const char *key_file;
    char key[API_KEY_MAX];
    double timeout_s;
    int as_json;
};

static int parse_option(int c, struct cal_cli *o) {
    switch (c) {
    case 'e': o->p.eval.endpoint = optarg; return 0;
    case 'd': o->p.data = optarg; return 0;
    case 'o': o->p.out = optarg; return 0;
    case 'm': o->p.eval.model = optarg; return 0;
    case 'j': o->as_json = 1; return 0;
    case 'K': o->key_file = optarg; return 0;
    case 'k': fprintf(stderr, "tandem calibrate: %s\n", api_key_argv_refusal()); return 2;
    case 'H':
        return cli_parse_double("calibrate", "--holdout", optarg, 0.05, 0.95,
                                     &o->p.holdout);
    case 't':
        return cli_parse_double("calibrate", "--timeout", optarg, 0.001, 86400,
                                     &o->timeout_s);
    case 's':
        return cli_parse_uint("calibrate", "--seed", optarg, 0, UINT32_MAX, &o->p.seed);
    case 'b':
        return cli_parse_uint("calibrate", "--min-bucket", optarg, 1, 1000000,
                                   &o->p.min_bucket);
    case 'c':
        return cli_parse_uint("calibrate", "--concurrency", optarg, 1,
                                   EVAL_MAX_CONCURRENCY, &o->p.eval.concurrency);
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
    o->p.model = argv[optind];
    if (!o->p.data || !o->p.out) {
        fprintf(stderr, "tandem calibrate: --data FILE and --out FILE are required\n");
        return 2;
    }
    char err[600];
    if (api_key_resolve(o->key_file, o->key, sizeof o->key, &o->p.eval.api_key, err,
                        sizeof err)) {
        fprintf(stderr, "tandem calibrate: %s\n", err);
        return 2;
    }
    o->p.eval.timeout_ms = (long)(o->timeout_s * 1000);
    return 0;
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

int cmd_calibrate_main(int argc, char **argv, const char *llama_server) {
    struct cal_cli o = {.p = calibrate_default_params(), .timeout_s = 60};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    o.p.llama_server = llama_server;
    if (isatty(STDERR_FILENO)) {
        o.p.eval.progress = cli_progress;
        o.p.eval.progress_user = "calibrate";
    }
    struct calibrate_result r;
    tandem_err e = calibrate_run(&o.p, &r);
    if (e) {
        fputs(r.diag.data ? r.diag.data : "", stderr);
        rc = r.endpoint_refused ? 2 : 1;
    } else if (o.as_json) {
        json_dumpf(r.summary, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("\n");
    } else {
        print_table(r.summary);
    }
    calibrate_result_deinit(&r);
    return rc;
}
