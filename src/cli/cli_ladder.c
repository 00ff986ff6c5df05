/* cli_ladder.c: `tandem quantize SRC --ladder`: its options, its progress line and its output.
 *
 * The ladder itself is flow/qladder: this file turns quantize's argv into
 * qladder_params, draws the progress line on a terminal, and renders the
 * summary the ladder returns as the table (or --json), the HTML report
 * (eval/report) and --write-config's line. */
#include "cli/cli_ladder.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/host.h"
#include "base/mem.h"
#include "cli/cli_opts.h"
#include "eval/report.h"
#include "flow/qladder.h"
#include "plan/plan_cli.h"

#define DEFAULT_TYPES QLADDER_DEFAULT_TYPES
#define MIB (1024.0 * 1024.0)

/* What the command adds to the ladder's parameters. */
struct opts {
    struct qladder_params p;
    const char *report;
    bool write_config;
};

/* --- usage and options ------------------------------------------------------------------------ */

static void usage(FILE *f) {
    fprintf(f,
        "usage: tandem quantize SRC.gguf --ladder [TYPES] --data SET.jsonl\n"
        "           [--imatrix auto|none|FILE] [--with OTHER.gguf] [--vram SIZE]\n"
        "           [--config F --model M] [--max-flip-rate R] [--margin M] [--repeat N]\n"
        "           [--out-dir DIR] [--json] [--report OUT.html] [--write-config]\n"
        "\n"
        "Finds the smallest quantization of SRC that keeps its decisions and fits the\n"
        "memory budget beside its partner. Every type is sized by the engine's dry run and\n"
        "planned before anything is built; the rungs that fit are bisected: each judged one\n"
        "is built, served by the real engine and compared with SRC on held-out cases.\n"
        "\n"
        "  SRC.gguf               the source and the reference: a decision model stored at\n"
        "                         F32, F16, BF16 or Q8_0\n"
        "  --ladder [TYPES]       the rungs, comma-separated llama-quantize types (default\n"
        "                         " DEFAULT_TYPES ");\n"
        "                         ordered by their exact dry-run size\n"
        "  --data SET.jsonl       the decision cases (docs/eval-format.md), or an audit log\n"
        "                         kept with logs.bodies on\n"
        "  --imatrix MODE         auto (default): build an importance matrix from the\n"
        "                         calibration share of the cases and build every rung at or\n"
        "                         below 4 bits with and without it, keeping it only where\n"
        "                         it flipped fewer answers; none; or FILE, an existing one\n"
        "  --calibration-share X  the share of the cases that shapes the importance matrix\n"
        "                         and is never judged (default 0.5; every case is judged\n"
        "                         when no rung uses a matrix)\n"
        "  --seed N               the seed of that split (default 0)\n"
        "  --with OTHER.gguf      the partner that must stay resident beside the rung\n"
        "  --config F --model M   plan with the config's settings for model M (SRC is its\n"
        "                         replacement) beside the config's other models, on the\n"
        "                         config's budget\n"
        "  --vram SIZE, --reserve SIZE, --ram SIZE, --cpu, --ctx N, --ngl N, ...\n"
        "                         the budget and launch settings, as for tandem plan\n"
        "                         (default: the GPU NVML finds, else host RAM)\n"
        "  --max-flip-rate R      the gate: the Wilson 95%% upper bound of the flip rate\n"
        "                         among sure answers must be at most R (default 0.02)\n"
        "  --margin M             a sure answer: the reference's top probability beats its\n"
        "                         second by at least M (default 0.1)\n"
        "  --repeat N             send each case N times (default 1): a question flips\n"
        "                         when most repeats changed it; the reference's own repeats\n"
        "                         show the noise\n"
        "  --out-dir DIR          where rungs are built and cached (default ./STEM-ladder);\n"
        "                         a rerun reuses what its inputs' hashes match\n"
        "  --allow-requantize     accept a source stored below Q8_0 (its flips are then\n"
        "                         measured against an already degraded reference)\n"
        "  --timeout S            per request (default 120)\n"
        "  --json                 print the summary as JSON instead of the table\n"
        "  --report OUT.html      write the table and the size-against-flips plot as HTML\n"
        "  --write-config         print the `path:` line of the recommended file\n"
        "  --all                  judge every rung that fits instead of bisecting (the\n"
        "                         whole size-against-flips curve)\n"
        "  --plan-only            size and plan every rung, build and judge nothing (no\n"
        "                         --data needed): which rungs fit beside the partner\n"
        "  --verbose              the engines' and tools' logs on stderr\n"
        "  -h, --help\n"
        "\n"
        "Exit status: 0 a rung was recommended, 1 none passed or the work failed,\n"
        "2 usage error.\n");
}

enum {
    O_LADDER = 1000, O_DATA, O_IMATRIX, O_SHARE, O_SEED, O_WITH, O_MODEL, O_MAXFLIP, O_MARGIN,
    O_REPEAT, O_OUTDIR, O_REQUANT, O_TIMEOUT, O_REPORT, O_WRITECFG, O_VERBOSE, O_PLANONLY, O_ALL
};

static const struct option ladder_options[] = {
    {"ladder", optional_argument, NULL, O_LADDER},
    {"data", required_argument, NULL, O_DATA},
    {"imatrix", required_argument, NULL, O_IMATRIX},
    {"calibration-share", required_argument, NULL, O_SHARE},
    {"seed", required_argument, NULL, O_SEED},
    {"with", required_argument, NULL, O_WITH},
    {"model", required_argument, NULL, O_MODEL},
    {"max-flip-rate", required_argument, NULL, O_MAXFLIP},
    {"margin", required_argument, NULL, O_MARGIN},
    {"repeat", required_argument, NULL, O_REPEAT},
    {"out-dir", required_argument, NULL, O_OUTDIR},
    {"allow-requantize", no_argument, NULL, O_REQUANT},
    {"timeout", required_argument, NULL, O_TIMEOUT},
    {"report", required_argument, NULL, O_REPORT},
    {"write-config", no_argument, NULL, O_WRITECFG},
    {"verbose", no_argument, NULL, O_VERBOSE},
    {"plan-only", no_argument, NULL, O_PLANONLY},
    {"all", no_argument, NULL, O_ALL},
};

/* Whether s reads as a list of type names ("Q4_K_M,Q8_0") and names no file. */
static bool is_type_list(const char *s) {
    if (!s || !*s || access(s, F_OK) == 0)
        return false;
    for (const char *c = s; *c; c++)
        if (!(*c == '_' || *c == ',' || (*c >= '0' && *c <= '9') || (*c >= 'A' && *c <= 'Z') ||
              (*c >= 'a' && *c <= 'z')))
            return false;
    return true;
}

static int ladder_option(int c, const char *arg, char **argv, struct opts *o) {
    const char *cmd = "quantize --ladder";
    switch (c) {
    case O_LADDER:
        if (arg)
            o->p.types = arg;
        else if (is_type_list(argv[optind]))
            o->p.types = argv[optind++];
        return 0;
    case O_DATA: o->p.data = arg; return 0;
    case O_IMATRIX: o->p.imatrix = arg; return 0;
    case O_SHARE:
        return cli_parse_double(cmd, "--calibration-share", arg, 0.01, 0.99, &o->p.share);
    case O_SEED: return cli_parse_uint(cmd, "--seed", arg, 0, UINT32_MAX, &o->p.seed);
    case O_WITH: o->p.with = arg; return 0;
    case O_MODEL: o->p.model = arg; return 0;
    case O_MAXFLIP:
        return cli_parse_double(cmd, "--max-flip-rate", arg, 0.0001, 1, &o->p.max_flip);
    case O_MARGIN: return cli_parse_double(cmd, "--margin", arg, 0, 1, &o->p.margin);
    case O_REPEAT: return cli_parse_uint(cmd, "--repeat", arg, 1, 100, &o->p.repeat);
    case O_OUTDIR: o->p.out_dir = arg; return 0;
    case O_REQUANT: o->p.allow_requantize = true; return 0;
    case O_TIMEOUT: return cli_parse_uint(cmd, "--timeout", arg, 1, 86400, &o->p.timeout_s);
    case O_REPORT: o->report = arg; return 0;
    case O_WRITECFG: o->write_config = true; return 0;
    case O_VERBOSE: o->p.verbose = true; return 0;
    case O_PLANONLY: o->p.plan_only = true; return 0;
    case O_ALL: o->p.all = true; return 0;
    default: return plan_cli_option(c, arg, &o->p.plan);
    }
}

/* Parses argv into *o: 0, 2 (usage, after a message) or -1 (help printed). */
static int parse_args(int argc, char **argv, struct opts *o) {
    size_t nl = sizeof ladder_options / sizeof *ladder_options, np = 0;
    while (plan_cli_options[np].name)
        np++;
    struct option all[sizeof ladder_options / sizeof *ladder_options + 32];
    if (nl + np + 1 > sizeof all / sizeof *all)
        return 2;
    memcpy(all, ladder_options, sizeof ladder_options);
    memcpy(all + nl, plan_cli_options, (np + 1) * sizeof *all);
    *o = (struct opts){.p = qladder_default_params()};
    int c, rc = 0;
    optind = 0;
    while (!rc && (c = getopt_long(argc, argv, "h", all, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return -1;
        }
        rc = c == '?' ? 2 : ladder_option(c, optarg, argv, o);
    }
    if (rc)
        return rc;
    if (argc - optind != 1 || (!o->p.data && !o->p.plan_only)) {
        fprintf(stderr, "tandem quantize --ladder: expected SRC.gguf and --data SET.jsonl\n");
        usage(stderr);
        return 2;
    }
    o->p.src = argv[optind];
    if (!!o->p.plan.config != !!o->p.model) {
        fprintf(stderr, "tandem quantize --ladder: --config and --model go together\n");
        return 2;
    }
    if (o->p.with && o->p.plan.config) {
        fprintf(stderr, "tandem quantize --ladder: give --with or --config, not both (the "
                        "config's other models are the partners)\n");
        return 2;
    }
    return 0;
}

/* --- progress --------------------------------------------------------------------------------- */

/* qladder_progress_fn on a terminal: the rung, the phase, the time so far
 * and what the rest of the search should take; rung NULL clears the line. */
static void on_progress(void *user, const char *rung, const char *phase, double elapsed_s,
                        size_t left, double eta_s) {
    (void)user;
    if (!rung) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
        return;
    }
    long s = (long)elapsed_s;
    fprintf(stderr, "\r\033[Ktandem quantize: %s: %s (%ld:%02ld", rung, phase, s / 60, s % 60);
    if (left) {
        long eta = (long)(eta_s + 0.5);
        fprintf(stderr, ", at most %zu rung%s and about %ld:%02ld left", left,
                left == 1 ? "" : "s", eta / 60, eta % 60);
    }
    fprintf(stderr, ")");
    fflush(stderr);
}

/* --- output ----------------------------------------------------------------------------------- */

static void fmt_num(char *out, size_t cap, const json_t *v, const char *fmt, double scale) {
    if (json_is_number(v))
        snprintf(out, cap, fmt, json_number_value(v) * scale);
    else
        snprintf(out, cap, "-");
}

/* Where the partners run beside rung r ("cpu", "gpu:0", "gpu:0 12/25 layers"; several
 * joined by ","), or "-" when it does not fit. */
static void partner_cell(const json_t *r, char *out, size_t cap) {
    const json_t *a = json_object_get(r, "partner_device"), *d;
    size_t i, n = 0;
    snprintf(out, cap, "-");
    json_array_foreach(a, i, d) {
        int k = snprintf(out + n, cap - n, "%s%s", i ? "," : "", json_string_value(d));
        if (k < 0 || (size_t)k >= cap - n)
            break;
        n += (size_t)k;
    }
}

static void print_rung(const json_t *r, bool pair) {
    char mib[16], bpw[16], alone[16], with[16], flips[48], kl[24], dp[16], dacc[16], secs[16];
    fmt_num(mib, sizeof mib, json_object_get(r, "mib"), "%.1f", 1);
    fmt_num(bpw, sizeof bpw, json_object_get(r, "bpw"), "%.2f", 1);
    fmt_num(alone, sizeof alone, json_object_get(r, "vram_alone"), "%.0f", 1 / MIB);
    fmt_num(with, sizeof with, json_object_get(r, "vram_pair"), "%.0f", 1 / MIB);
    fmt_num(kl, sizeof kl, json_object_get(r, "kl_mean"), "%.4f", 1);
    fmt_num(dp, sizeof dp, json_object_get(r, "max_dp"), "%.3f", 1);
    fmt_num(dacc, sizeof dacc, json_object_get(r, "delta_accuracy"), "%+.1f", 100);
    fmt_num(secs, sizeof secs, json_object_get(r, "seconds"), "%.0f", 1);
    const json_t *ci = json_object_get(r, "sure_ci95");
    if (json_is_array(ci))
        snprintf(flips, sizeof flips, "%lld/%lld [%.0f-%.0f%%] %lld/%lld",
                 (long long)json_integer_value(json_object_get(r, "sure_flips")),
                 (long long)json_integer_value(json_object_get(r, "sure_compared")),
                 100 * json_number_value(json_array_get(ci, 0)),
                 100 * json_number_value(json_array_get(ci, 1)),
                 (long long)json_integer_value(json_object_get(r, "flips")),
                 (long long)json_integer_value(json_object_get(r, "compared")));
    else
        snprintf(flips, sizeof flips, "-");
    printf("%-8s %-3s %7s %5s %7s", json_string_value(json_object_get(r, "type")),
           json_is_true(json_object_get(r, "imatrix")) ? "yes" : "no", mib, bpw, alone);
    if (pair)
        printf(" %7s", with);
    printf(" %-4s", json_is_true(json_object_get(r, "fits")) ? "yes" : "no");
    if (pair) {
        char where[128];
        partner_cell(r, where, sizeof where);
        printf(" %-18s", where);
    }
    printf(" %-24s %7s %6s %6s %5s  %s\n", flips, kl, dp, dacc, secs,
           json_string_value(json_object_get(r, "status")));
}

static void print_table(const json_t *s) {
    const json_t *src = json_object_get(s, "source"), *data = json_object_get(s, "data");
    const json_t *ref = json_object_get(s, "reference");
    bool pair = json_is_array(json_object_get(s, "partner"));
    printf("tandem quantize --ladder: %s (%s, %.1f MiB); %s\n",
           json_string_value(json_object_get(src, "path")),
           json_string_value(json_object_get(src, "type")),
           json_number_value(json_object_get(src, "mib")),
           json_string_value(json_object_get(src, "protected")));
    printf("budget %.0f MiB (%s)%s; ",
           (double)json_integer_value(json_object_get(s, "budget_bytes")) / MIB,
           json_string_value(json_object_get(s, "budget_source")),
           pair ? ", beside the partner" : "");
    if (json_is_object(ref))
        printf("judged on %lld of %lld cases of %s (%lld shaped the importance matrix); the "
               "reference holds %lld of %lld answers with a margin >= %g\n",
               (long long)json_integer_value(json_object_get(data, "judged")),
               (long long)json_integer_value(json_object_get(data, "cases")),
               json_string_value(json_object_get(data, "path")),
               (long long)json_integer_value(json_object_get(data, "calibration")),
               (long long)json_integer_value(json_object_get(ref, "sure")),
               (long long)json_integer_value(json_object_get(ref, "questions")),
               json_number_value(json_object_get(s, "margin")));
    else
        printf("plan only: nothing was built or judged\n");
    printf("\n%-8s %-3s %7s %5s %7s", "type", "imx", "MiB", "bpw", "alone");
    if (pair)
        printf(" %7s", "w/part");
    printf(" %-4s", "fits");
    if (pair)
        printf(" %-18s", "partner");
    printf(" %-24s %7s %6s %6s %5s  %s\n", "sure flips [95%] all", "KL", "|dp|", "dacc", "s",
           "verdict");
    const json_t *rungs = json_object_get(s, "rungs"), *r;
    size_t i;
    json_array_foreach(rungs, i, r) print_rung(r, pair);
    printf("(memory in MiB, planned as tandem plan does; sure flips: flips among answers the "
           "reference held with that margin, the gate uses their 95%% upper bound; dacc: change "
           "in accuracy on gold answers, points%s)\n\n",
           pair ? "; partner: where it runs beside the rung, as the placement search puts it, "
                  "nothing rotating"
                : "");
    json_array_foreach(rungs, i, r) {
        const char *reason = json_string_value(json_object_get(r, "reason"));
        if (reason)
            printf("  %s%s: %s\n", json_string_value(json_object_get(r, "type")),
                   json_is_true(json_object_get(r, "imatrix")) ? " (imatrix)" : "", reason);
    }
    const json_t *rec = json_object_get(s, "recommendation");
    if (json_is_object(rec))
        printf("\nrecommended: %s\n  %s\n", json_string_value(json_object_get(rec, "path")),
               json_string_value(json_object_get(rec, "why")));
    else if (json_is_object(ref))
        printf("\nno rung fits and keeps the decisions within --max-flip-rate %g\n",
               json_number_value(json_object_get(s, "max_flip_rate")));
}

static int write_outputs(const struct opts *o, const json_t *s) {
    if (o->p.plan.json) {
        char *text = json_dumps(s, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        puts(text ? text : "{}");
        free(text);
    } else {
        print_table(s);
    }
    int rc = 0;
    if (o->report) {
        char *html = NULL;
        size_t len = 0;
        if (report_ladder_html(s, &html, &len) != TANDEM_OK) {
            fprintf(stderr, "tandem quantize --ladder: cannot render the report\n");
            rc = 1;
        } else {
            rc = host_write_atomic(o->report, html, len) == TANDEM_OK ? 0 : 1;
            if (rc)
                fprintf(stderr, "tandem quantize --ladder: %s: %s\n", o->report,
                        strerror(errno));
        }
        mem_free(html);
    }
    const json_t *rec = json_object_get(s, "recommendation");
    if (o->write_config && json_is_object(rec))
        printf("path: %s\n", json_string_value(json_object_get(rec, "path")));
    return rc;
}

/* --- main ------------------------------------------------------------------------------------- */

int cli_ladder_main(int argc, char **argv, const char *llama_server) {
    struct opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    o.p.llama_server = llama_server;
    if (isatty(STDERR_FILENO) && !o.p.verbose)
        o.p.progress = on_progress;
    json_t *s = NULL;
    tandem_err e = qladder_run(&o.p, &s);
    if (e != TANDEM_OK)
        return e == TANDEM_ERR_INVAL ? 2 : 1;
    rc = write_outputs(&o, s);
    if (!rc && !o.p.plan_only && !json_is_object(json_object_get(s, "recommendation")))
        rc = 1;
    json_decref(s);
    return rc;
}
