/* cmd_ladder.c: `tandem quantize SRC --ladder`: the smallest quantization that keeps the decisions.
 *
 * The steps, each reusing the module that owns it:
 *   1. the source: a decision model stored at F32, F16, BF16 or Q8_0 (it is
 *      also the reference); its cls.* tensors, the decision head, are kept as
 *      stored in every rung (--tensor-type per tensor);
 *   2. the rungs: every type is sized by `llama-quantize --dry-run`
 *      (engine_quantize: exact bytes, fallbacks) and planned alone and beside
 *      the partner with the planner's own accounting (fit_models: KV, compute,
 *      overhead, reserve), the weights scaled to the rung's size; a rung that
 *      does not fit is never built;
 *   3. the reference answers the held-out cases once (a private daemon on
 *      file:SRC); too few sure answers to tell --max-flip-rate from zero at
 *      95% stops the ladder before anything is built;
 *   4. the importance matrix (--imatrix auto) comes from the calibration
 *      cases only (cmd_imatrix), so no rung is judged on the text that shaped
 *      it;
 *   5. the search (eval/ladder) bisects over the fitting rungs; each judged
 *      rung is built atomically (cached by its inputs' hashes, so a rerun
 *      resumes), served by the real engine, and compared with the reference
 *      by drift_compare. The gate: the Wilson 95% upper bound of the flip
 *      rate among answers the reference held with a margin >= --margin is at
 *      most --max-flip-rate. At or below 4 bits, auto builds the rung with
 *      and without the matrix and keeps the matrix only where it flipped
 *      fewer sure answers;
 *   6. the table, the recommendation, --json, --report (eval/report) and
 *      --write-config, all from one JSON summary. */
#include "cli/cmd_ladder.h"

#include <errno.h>
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
#include "eval/drift.h"
#include "cli/cli_opts.h"
#include "eval/summary.h"
#include "flow/imatrix.h"
#include "flow/model_endpoint.h"
#include "engine/engine.h"
#include "engine/engine_quantize.h"
#include "eval/eval.h"
#include "eval/ladder.h"
#include "eval/metrics.h"
#include "eval/report.h"
#include "gguf/ggml_types.h"
#include "gguf/gguf.h"
#include "plan/fit.h"
#include "plan/plan_cli.h"
#include "serve/config.h"
#include "serve/placement.h"
#include "version.h"

#define DEFAULT_TYPES "Q8_0,Q6_K,Q5_K_M,Q4_K_M,Q4_K_S,IQ4_XS,Q3_K_M,IQ3_M,Q2_K"
#define MAX_TYPES 24
#define MAX_PROTECT 16
#define MAX_PARTNERS 8
#define MIB (1024.0 * 1024.0)

/* --- state ------------------------------------------------------------------------------------ */

struct variant {
    bool imatrix;
    enum ladder_state state;
    char path[PATH_MAX];
    char reason[600];  /* one line: why it failed or could not be judged */
    json_t *judged;    /* the drift summary's figures; NULL until judged */
    double seconds;    /* what building (when it was built) and judging it took */
    bool cached;       /* the judgement came from an earlier run */
};

struct rung {
    char type[16];
    struct engine_quant_size size;
    char size_error[600];      /* the dry run failed: the rung is an error */
    uint64_t mem_alone, mem_pair;
    bool fits;
    char fit_reason[512];
    size_t n_variants;
    struct variant v[2];
    char skipped[256];         /* why it was never judged */
};

struct opts {
    const char *src, *data, *with, *out_dir, *imatrix, *report, *model, *types;
    double max_flip, margin, share;
    unsigned repeat, timeout_s, seed;
    bool write_config, allow_requantize, verbose, plan_only, all;
    struct plan_cli plan;
};

struct ladder {
    struct opts o;
    const char *llama_server;
    bool tty;
    double t0;
    char tool[PATH_MAX], out_dir[PATH_MAX], stem[128];
    char src_sha[HASH_SHA256_HEX_LEN + 1], data_sha[HASH_SHA256_HEX_LEN + 1];
    char src_type[16];
    struct gguf *g;
    struct plan_model *pm;
    char *protect[MAX_PROTECT]; /* "^cls\.output\.weight$=f32" */
    size_t n_protect;
    char protect_note[256];
    struct evalset *set;
    struct evalset judged;       /* a view of set: the held-out cases */
    bool *calibration;           /* per case of set */
    size_t n_calibration;
    struct rung rungs[MAX_TYPES];        /* largest first, once sized */
    size_t n_rungs;
    enum ladder_state states[MAX_TYPES]; /* of each rung: the search's view, the better of
                                          * its variants */
    struct eval_run *ref;
    size_t ref_questions, ref_sure;
    double ref_accuracy;
    char imatrix[PATH_MAX], imatrix_sha[HASH_SHA256_HEX_LEN + 1], imatrix_note[600];
    double imatrix_seconds; /* building it this run; 0 = given or cached */
    size_t n_judged;        /* rungs judged this run, and the seconds they took */
    double judge_seconds;
    bool imatrix_tried;
    char api_key[256];
    /* the budget */
    struct fit_budget budget;
    const char *budget_source;
    struct fit_model partners[MAX_PARTNERS];
    struct plan_model *partner_pm[MAX_PARTNERS];
    size_t n_partners;
    struct plan_settings settings;
    struct config *cfg;
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
            o->types = arg;
        else if (is_type_list(argv[optind]))
            o->types = argv[optind++];
        return 0;
    case O_DATA: o->data = arg; return 0;
    case O_IMATRIX: o->imatrix = arg; return 0;
    case O_SHARE:
        return cli_parse_double(cmd, "--calibration-share", arg, 0.01, 0.99, &o->share);
    case O_SEED: return cli_parse_uint(cmd, "--seed", arg, 0, UINT32_MAX, &o->seed);
    case O_WITH: o->with = arg; return 0;
    case O_MODEL: o->model = arg; return 0;
    case O_MAXFLIP:
        return cli_parse_double(cmd, "--max-flip-rate", arg, 0.0001, 1, &o->max_flip);
    case O_MARGIN: return cli_parse_double(cmd, "--margin", arg, 0, 1, &o->margin);
    case O_REPEAT: return cli_parse_uint(cmd, "--repeat", arg, 1, 100, &o->repeat);
    case O_OUTDIR: o->out_dir = arg; return 0;
    case O_REQUANT: o->allow_requantize = true; return 0;
    case O_TIMEOUT: return cli_parse_uint(cmd, "--timeout", arg, 1, 86400, &o->timeout_s);
    case O_REPORT: o->report = arg; return 0;
    case O_WRITECFG: o->write_config = true; return 0;
    case O_VERBOSE: o->verbose = true; return 0;
    case O_PLANONLY: o->plan_only = true; return 0;
    case O_ALL: o->all = true; return 0;
    default: return plan_cli_option(c, arg, &o->plan);
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
    *o = (struct opts){.imatrix = "auto", .types = DEFAULT_TYPES, .max_flip = 0.02,
                       .margin = 0.1, .share = 0.5, .repeat = 1, .timeout_s = 120,
                       .plan = {.settings = plan_default_settings()}};
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
    if (argc - optind != 1 || (!o->data && !o->plan_only)) {
        fprintf(stderr, "tandem quantize --ladder: expected SRC.gguf and --data SET.jsonl\n");
        usage(stderr);
        return 2;
    }
    o->src = argv[optind];
    if (!!o->plan.config != !!o->model) {
        fprintf(stderr, "tandem quantize --ladder: --config and --model go together\n");
        return 2;
    }
    if (o->with && o->plan.config) {
        fprintf(stderr, "tandem quantize --ladder: give --with or --config, not both (the "
                        "config's other models are the partners)\n");
        return 2;
    }
    return 0;
}

/* --- the source ------------------------------------------------------------------------------- */

/* Bits per weight of a ggml type; 0 when unknown. */
static double type_bpw(uint32_t id) {
    const struct ggml_type_info *t = ggml_type_get(id);
    return t && t->block_size ? 8.0 * t->type_size / t->block_size : 0;
}

/* The source's matrices by type: the type holding the most bytes (*dominant,
 * shown as the source's type) and the coarsest type holding at least 5% of
 * them (*coarsest: a Q4_K_M file keeps some matrices at Q8_0 or F16, and its
 * embedding may even hold most bytes). */
static void source_types(const struct gguf *g, uint32_t *dominant, uint32_t *coarsest,
                         uint64_t *coarse_bytes, uint64_t *total) {
    uint64_t by_type[64] = {0};
    *total = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        if (t->n_dims >= 2 && t->type < 64) {
            by_type[t->type] += t->size;
            *total += t->size;
        }
    }
    *dominant = *coarsest = 0;
    for (uint32_t k = 1; k < 64; k++) {
        if (by_type[k] > by_type[*dominant])
            *dominant = k;
        if (by_type[k] * 20 >= *total && by_type[k] &&
            (!by_type[*coarsest] || type_bpw(k) < type_bpw(*coarsest)))
            *coarsest = k;
    }
    *coarse_bytes = by_type[*coarsest];
}

/* Refuses a source that is no decision model, or keeps matrices below Q8_0. */
static int check_source(struct ladder *L) {
    char err[1024];
    if (gguf_open(L->o.src, &L->g, err, sizeof err) != TANDEM_OK ||
        plan_model_open(L->o.src, &L->pm, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem quantize --ladder: %s\n", err);
        return 1;
    }
    if (!*plan_model_decision_type(L->pm)) {
        fprintf(stderr, "tandem quantize --ladder: %s is not a decision model (no "
                        "decision.type): the ladder judges decisions, so it needs one that "
                        "answers /v1/systemone\n", L->o.src);
        return 1;
    }
    uint32_t dominant, coarsest;
    uint64_t bytes, total;
    source_types(L->g, &dominant, &coarsest, &bytes, &total);
    const struct ggml_type_info *t = ggml_type_get(dominant), *c = ggml_type_get(coarsest);
    snprintf(L->src_type, sizeof L->src_type, "%s", t ? t->name : "?");
    uint32_t q8_0 = 0;
    ggml_type_find("Q8_0", &q8_0);
    if (type_bpw(coarsest) < type_bpw(q8_0) && !L->o.allow_requantize &&
        !L->o.plan_only) {
        fprintf(stderr, "tandem quantize --ladder: %s stores %.1f of its %.1f MiB of matrices "
                        "as %s: it is the reference, and flips measured against an already "
                        "quantized reference hide what quantization changed; start from the "
                        "F16, BF16 or Q8_0 file, or pass --allow-requantize\n",
                L->o.src, (double)bytes / MIB, (double)total / MIB, c ? c->name : "?");
        return 1;
    }
    return 0;
}

/* The cls.* matrices (the decision head: Kev's pointer head, Laya's scorer)
 * are kept at their stored type in every rung: they are a sliver of the
 * file and their output is the decision itself. One --tensor-type each. */
static int protect_head(struct ladder *L) {
    uint64_t bytes = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(L->g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(L->g, i);
        if (t->n_dims < 2 || t->name.len < 4 || memcmp(t->name.ptr, "cls.", 4))
            continue;
        const struct ggml_type_info *ti = ggml_type_get(t->type);
        if (L->n_protect == MAX_PROTECT || !ti) {
            fprintf(stderr, "tandem quantize --ladder: more than %d cls.* matrices\n",
                    MAX_PROTECT);
            return 1;
        }
        char re[256], *w = re;
        *w++ = '^';
        for (uint64_t k = 0; k < t->name.len && w < re + sizeof re - 40; k++) {
            if (t->name.ptr[k] == '.')
                *w++ = '\\';
            *w++ = t->name.ptr[k];
        }
        *w = '\0';
        L->protect[L->n_protect] = mem_alloc(strlen(re) + 32);
        if (!L->protect[L->n_protect])
            return 1;
        sprintf(L->protect[L->n_protect++], "%s$=%s", re, ti->name);
        bytes += t->size;
    }
    if (L->n_protect)
        snprintf(L->protect_note, sizeof L->protect_note,
                 "%zu cls.* matrices (%.2f MiB) kept as stored", L->n_protect,
                 (double)bytes / MIB);
    else
        snprintf(L->protect_note, sizeof L->protect_note,
                 "no cls.* tensors: the decision is read from the LM head, which "
                 "llama-quantize keeps at its own higher type");
    return 0;
}

/* --- the cases -------------------------------------------------------------------------------- */

/* Loads --data (an eval set or an audit log). */
static int load_cases(struct ladder *L) {
    static char err[16 * 1024];
    if (evalset_load_any(L->o.data, &L->set, NULL, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem quantize --ladder: %s\n", err);
        return 1;
    }
    bool cached;
    if (hash_file_sha256_cached(L->o.data, L->data_sha, &cached, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem quantize --ladder: %s\n", err);
        return 1;
    }
    return 0;
}

/* Splits the cases when an importance matrix is to be built or used: the
 * calibration share is never judged. Without one, every case is judged. */
static int split_cases(struct ladder *L, bool with_imatrix) {
    L->calibration = mem_calloc(L->set->n_cases, sizeof *L->calibration);
    L->judged.cases = mem_alloc_array(L->set->n_cases, sizeof *L->judged.cases);
    if (!L->calibration || !L->judged.cases) {
        fprintf(stderr, "tandem quantize --ladder: out of memory\n");
        return 1;
    }
    if (with_imatrix)
        evalset_split(L->set, L->o.seed, L->o.share, L->calibration);
    L->judged.path = L->set->path;
    for (size_t c = 0; c < L->set->n_cases; c++) {
        const struct evalset_case *cs = &L->set->cases[c];
        if (L->calibration[c]) {
            L->n_calibration++;
            continue;
        }
        L->judged.cases[L->judged.n_cases++] = *cs; /* a view: shares the case's contents */
        L->judged.n_questions += cs->n_questions;
        for (size_t q = 0; q < cs->n_questions; q++)
            L->judged.n_gold += cs->q[q].has_gold;
    }
    if (!L->judged.n_cases) {
        fprintf(stderr, "tandem quantize --ladder: %s: no case is left to judge after the "
                        "calibration share %.2f; lower --calibration-share\n",
                L->o.data, L->o.share);
        return 1;
    }
    return 0;
}

/* --- memory ----------------------------------------------------------------------------------- */

/* fit_footprint_fn for the rung: the source's plan with its weights scaled to
 * the rung's size; the partners' as tandem plan computes them. */
struct rung_plan {
    const struct plan_model *src;
    double scale;
    bool measured;
};

static tandem_err rung_footprint(const struct plan_model *m, const struct plan_settings *s,
                                 struct plan_footprint *out, void *user) {
    struct rung_plan *rp = user;
    bool measured = rp->measured;
    if (m != rp->src)
        return plan_cli_footprint(m, s, out, &measured);
    tandem_err e = plan_model_footprint(m, s, out);
    for (int d = 0; e == TANDEM_OK && d < PLAN_DEVICE_COUNT; d++)
        out->bytes[d][PLAN_PART_WEIGHTS] =
            (uint64_t)((double)out->bytes[d][PLAN_PART_WEIGHTS] * rp->scale + 0.5);
    return e;
}

/* The partners: --with's file, or the config's other local models. */
static int load_partners(struct ladder *L) {
    char err[1024];
    L->settings = L->o.plan.settings;
    if (L->o.plan.config) {
        if (config_load(L->o.plan.config, &L->cfg, err, sizeof err) != TANDEM_OK) {
            fprintf(stderr, "tandem quantize --ladder: %s\n", err);
            return 1;
        }
        const struct config_model *me = config_find_model(L->cfg, L->o.model);
        if (!me || !me->path) {
            fprintf(stderr, "tandem quantize --ladder: %s declares no local model \"%s\"\n",
                    L->o.plan.config, L->o.model);
            return 1;
        }
        L->settings = me->settings;
        struct plan_cli *p = &L->o.plan;
        if (!p->have_vram && L->cfg->vram)
            p->vram = L->cfg->vram, p->have_vram = true;
        if (!p->have_reserve)
            p->reserve = L->cfg->reserve, p->have_reserve = true;
        for (size_t i = 0; i < L->cfg->n_models && L->n_partners < MAX_PARTNERS; i++) {
            const struct config_model *cm = &L->cfg->models[i];
            if (cm == me || !cm->path)
                continue;
            if (plan_model_open(cm->path, &L->partner_pm[L->n_partners], err, sizeof err)) {
                fprintf(stderr, "tandem quantize --ladder: %s\n", err);
                return 1;
            }
            L->partners[L->n_partners] = (struct fit_model){
                cm->name, L->partner_pm[L->n_partners], cm->settings, cm->pin};
            L->n_partners++;
        }
    } else if (L->o.with) {
        if (plan_model_open(L->o.with, &L->partner_pm[0], err, sizeof err) != TANDEM_OK) {
            fprintf(stderr, "tandem quantize --ladder: --with: %s\n", err);
            return 1;
        }
        L->partners[0] = (struct fit_model){host_base_name(L->o.with), L->partner_pm[0],
                                            L->o.plan.settings, false};
        if (plan_model_is_encoder(L->partner_pm[0]))
            L->partners[0].settings.ctx = 0; /* whole-batch encoders run at their window */
        L->n_partners = 1;
    }
    if (plan_model_is_encoder(L->pm) && !L->cfg)
        L->settings.ctx = 0;
    uint64_t total;
    L->budget_source = plan_cli_budget(&L->o.plan, &L->budget, &total);
    return 0;
}

/* The planned bytes of m with every layer on the budget's device. */
static uint64_t full_need(const struct ladder *L, const struct fit_model *m, struct rung_plan *rp) {
    struct plan_settings want = m->settings, resolved;
    if (want.ngl == PLAN_NGL_AUTO)
        want.ngl = (int32_t)plan_model_n_layer(m->model) + 1;
    want.gpu = L->budget.gpu;
    plan_model_resolve(m->model, &want, &resolved);
    struct plan_footprint f;
    if (rung_footprint(m->model, &resolved, &f, rp) != TANDEM_OK)
        return UINT64_MAX;
    return plan_footprint_device_total(&f, L->budget.gpu ? PLAN_DEVICE_GPU : PLAN_DEVICE_HOST);
}

/* Plans rung r alone and beside the partners: the bytes with every layer
 * on the device, and whether the planner keeps them all co-resident. */
static int plan_rung(struct ladder *L, struct rung *r) {
    struct rung_plan rp = {L->pm, (double)r->size.bytes / (double)plan_model_weight_bytes(L->pm),
                           !L->o.plan.no_measured};
    struct fit_model fm[MAX_PARTNERS + 1];
    struct fit_model_result res[MAX_PARTNERS + 1];
    struct fit_result alone, pair;
    fm[0] = (struct fit_model){"the rung", L->pm, L->settings, true};
    memcpy(fm + 1, L->partners, L->n_partners * sizeof *fm);
    if (fit_models(fm, 1, &L->budget, rung_footprint, &rp, res, &alone) != TANDEM_OK ||
        fit_models(fm, L->n_partners + 1, &L->budget, rung_footprint, &rp, res, &pair) !=
            TANDEM_OK) {
        fprintf(stderr, "tandem quantize --ladder: %s: the planner failed\n", r->type);
        return 1;
    }
    r->mem_alone = r->mem_pair = full_need(L, &fm[0], &rp);
    for (size_t i = 0; i < L->n_partners; i++)
        r->mem_pair += full_need(L, &L->partners[i], &rp);
    r->fits = L->n_partners ? pair.verdict == FIT_CO_RESIDENT : alone.verdict == FIT_CO_RESIDENT;
    snprintf(r->fit_reason, sizeof r->fit_reason, "%s",
             L->n_partners ? pair.reason : alone.reason);
    return 0;
}

/* --- the rungs -------------------------------------------------------------------------------- */

static bool low_bit(const char *type) {
    const char *p = type + (type[0] == 'I' || type[0] == 'i');
    return (p[0] == 'Q' || p[0] == 'q') && p[1] >= '1' && p[1] <= '4';
}

static struct engine_quant_params quant_params(const struct ladder *L, const char *type,
                                               const char *imatrix, const char *log,
                                               const char *const *overrides) {
    return (struct engine_quant_params){
        .tool = L->tool, .src = L->o.src, .type = type, .imatrix = imatrix,
        .tensor_types = (const char *const *)L->protect, .overrides = overrides,
        .allow_requantize = strcmp(L->src_type, "F32") && strcmp(L->src_type, "F16") &&
                            strcmp(L->src_type, "BF16"),
        .log_path = log};
}

static double now_s(void) { return (double)host_now_ms() / 1000.0; }

/* On a terminal: the rung, the phase, the time so far and, once a rung was
 * judged, the time the rest of the search should take (the judgements it
 * may still need, at the mean time of those done). */
static void progress(const struct ladder *L, const char *type, const char *phase) {
    if (!L->tty)
        return;
    long s = (long)(now_s() - L->t0);
    fprintf(stderr, "\r\033[Ktandem quantize: %s: %s (%ld:%02ld", type, phase, s / 60, s % 60);
    if (L->n_judged) {
        size_t left = L->o.all ? ladder_pending(L->states, L->n_rungs)
                               : ladder_remaining(L->states, L->n_rungs);
        long eta = (long)(L->judge_seconds / (double)L->n_judged * (double)left + 0.5);
        if (left)
            fprintf(stderr, ", at most %zu rung%s and about %ld:%02ld left", left,
                    left == 1 ? "" : "s", eta / 60, eta % 60);
    }
    fprintf(stderr, ")");
    fflush(stderr);
}

/* Clears the progress line before a message or the table. */
static void end_progress(const struct ladder *L) {
    if (L->tty) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
    }
}

/* Puts the rungs in size order, largest first (ladder_order: ties keep the
 * order given). */
static int sort_rungs(struct ladder *L) {
    size_t order[MAX_TYPES];
    uint64_t bytes[MAX_TYPES];
    for (size_t i = 0; i < L->n_rungs; i++)
        bytes[i] = L->rungs[i].size.bytes;
    struct rung *sorted = mem_alloc_array(L->n_rungs ? L->n_rungs : 1, sizeof *sorted);
    if (!sorted) {
        fprintf(stderr, "tandem quantize --ladder: out of memory\n");
        return 1;
    }
    ladder_order(bytes, L->n_rungs, order);
    for (size_t i = 0; i < L->n_rungs; i++)
        sorted[i] = L->rungs[order[i]];
    memcpy(L->rungs, sorted, L->n_rungs * sizeof *sorted);
    mem_free(sorted);
    return 0;
}

/* Sizes every type with a dry run, plans it, and orders the rungs. */
static int size_rungs(struct ladder *L) {
    char list[1024];
    snprintf(list, sizeof list, "%s", L->o.types);
    char log[PATH_MAX + 32];
    snprintf(log, sizeof log, "%s/dry-run.log", L->out_dir);
    for (char *save, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (L->n_rungs == MAX_TYPES) {
            fprintf(stderr, "tandem quantize --ladder: at most %d types\n", MAX_TYPES);
            return 2;
        }
        struct rung *r = &L->rungs[L->n_rungs];
        snprintf(r->type, sizeof r->type, "%s", t);
        for (char *c = r->type; *c; c++)
            *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
        struct engine_quant_params p = quant_params(L, r->type, NULL, log, NULL);
        char err[600];
        progress(L, r->type, "dry-run");
        if (engine_quant_dry_run(&p, &r->size, err, sizeof err) != TANDEM_OK) {
            fprintf(stderr, "tandem quantize --ladder: %s: %s\n", r->type, err);
            return 2; /* a type the engine does not know is the user's mistake */
        }
        if (plan_rung(L, r))
            return 1;
        L->n_rungs++;
    }
    unlink(log);
    if (sort_rungs(L))
        return 1;
    for (size_t i = 0; i < L->n_rungs; i++) {
        struct rung *r = &L->rungs[i];
        L->states[i] = r->fits ? LADDER_PENDING : LADDER_NO_FIT;
        bool automatic = !strcmp(L->o.imatrix, "auto");
        bool both = automatic && low_bit(r->type) && !r->size.needs_imatrix;
        bool only = (automatic && r->size.needs_imatrix) ||
                    (!automatic && strcmp(L->o.imatrix, "none"));
        r->n_variants = both && r->fits && !L->o.plan_only ? 2 : 1;
        r->v[0].imatrix = only;
        r->v[1].imatrix = true;
        if (r->size.needs_imatrix && !strcmp(L->o.imatrix, "none")) {
            L->states[i] = LADDER_ERROR;
            snprintf(r->v[0].reason, sizeof r->v[0].reason,
                     "needs an importance matrix: use --imatrix auto or FILE");
        }
    }
    return 0;
}

/* --- judging ---------------------------------------------------------------------------------- */

struct judge_progress {
    const struct ladder *L;
    const char *type;
};

static void on_eval_progress(void *user, size_t done, size_t total, double elapsed) {
    struct judge_progress *jp = user;
    char phase[96];
    double rate = elapsed > 0 ? (double)done / elapsed : 0;
    long left = rate > 0 ? (long)((double)(total - done) / rate + 0.5) : -1;
    if (left >= 0)
        snprintf(phase, sizeof phase, "judge %zu/%zu, this rung's ETA %ld:%02ld", done, total,
                 left / 60, left % 60);
    else
        snprintf(phase, sizeof phase, "judge %zu/%zu", done, total);
    progress(jp->L, jp->type, phase);
}

/* Serves path (a private daemon on file:path) and sends the judged cases. */
static tandem_err serve_and_run(struct ladder *L, const char *path, const char *label,
                                struct eval_run **out, char *err, size_t errlen) {
    char spec[PATH_MAX + 8];
    snprintf(spec, sizeof spec, "file:%s", path);
    struct model_endpoint ep = {.flag = label, .spec = spec};
    struct model_endpoints_params mp = {.command = "tandem quantize --ladder", .no_config = true,
                                        .llama_server = L->llama_server,
                                        .verbose = L->o.verbose};
    struct model_endpoints *d = NULL;
    if (model_endpoints_start(&mp, &ep, 1, &d)) {
        tandem_errmsg(err, errlen, "the engine could not serve %s (its log is above)", path);
        return TANDEM_ERR_CHILD;
    }
    struct eval_params p = eval_default_params();
    struct judge_progress jp = {L, label};
    p.endpoint = ep.url;
    p.model = ep.model;
    p.repeat = L->o.repeat;
    p.timeout_ms = (long)L->o.timeout_s * 1000;
    p.progress = L->tty ? on_eval_progress : NULL;
    p.progress_user = &jp;
    tandem_err e = eval_run_new(&L->judged, &p, out, err, errlen);
    model_endpoints_free(d);
    return e;
}

/* The first failed request's message, for a run whose every request failed. */
static const char *first_error(const struct eval_run *run) {
    for (size_t c = 0; c < run->set->n_cases; c++) {
        const struct eval_answer *a = eval_run_answer(run, c, 0);
        if (a->status != TANDEM_OK)
            return a->error ? a->error : tandem_strerror(a->status);
    }
    return "no error";
}

/* The reference answers once; too few sure answers stop the ladder here. */
static int judge_reference(struct ladder *L) {
    char err[1024];
    progress(L, "reference", "serve");
    tandem_err e = serve_and_run(L, L->o.src, "reference", &L->ref, err, sizeof err);
    if (e != TANDEM_OK) {
        end_progress(L);
        fprintf(stderr, "tandem quantize --ladder: the reference: %s\n", err);
        return 1;
    }
    if (L->ref->n_errors == L->judged.n_cases * L->o.repeat) {
        end_progress(L);
        fprintf(stderr, "tandem quantize --ladder: %s cannot answer the questions of %s: %s\n",
                L->o.src, L->o.data, first_error(L->ref));
        return 1;
    }
    size_t correct = 0, gold = 0;
    for (size_t c = 0; c < L->judged.n_cases; c++)
        for (size_t q = 0; q < L->judged.cases[c].n_questions; q++) {
            const struct evalset_question *qq = &L->judged.cases[c].q[q];
            const double *p = eval_run_dist(L->ref, c, 0, q);
            if (!p)
                continue;
            L->ref_questions++;
            L->ref_sure += metrics_margin(p, qq->n_options) >= L->o.margin;
            if (qq->has_gold) {
                gold++;
                correct += metrics_top(p, qq->n_options) == qq->gold;
            }
        }
    L->ref_accuracy = gold ? (double)correct / (double)gold : NAN;
    size_t need = metrics_min_trials_for_rate(L->o.max_flip);
    if (L->ref_sure < need) {
        double z2 = METRICS_Z95 * METRICS_Z95;
        end_progress(L);
        if (!L->ref_sure) {
            fprintf(stderr, "tandem quantize --ladder: too few cases: the reference holds none "
                            "of the %zu held-out answers with a margin >= %g; lower --margin or "
                            "add cases to %s\n", L->ref_questions, L->o.margin, L->o.data);
            return 1;
        }
        fprintf(stderr,
                "tandem quantize --ladder: too few cases: the reference holds %zu of the %zu "
                "held-out answers with a margin >= %g, and telling a flip rate of %g from zero "
                "at 95%% needs at least %zu; add cases to %s, or raise --max-flip-rate to at "
                "least %.3f\n",
                L->ref_sure, L->ref_questions, L->o.margin, L->o.max_flip, need, L->o.data,
                z2 / ((double)L->ref_sure + z2) + 0.0005);
        return 1;
    }
    if (L->ref->n_errors) {
        end_progress(L);
        fprintf(stderr, "tandem quantize --ladder: the reference failed %zu requests; their "
                        "questions are skipped: %s\n", L->ref->n_errors, first_error(L->ref));
    }
    return 0;
}

/* --- caching ---------------------------------------------------------------------------------- */

/* Hex SHA-256 of text: the key of a build or a judgement. */
static void key_of(const char *text, char out[HASH_SHA256_HEX_LEN + 1]) {
    if (hash_buffer_sha256(text, strlen(text), out) != TANDEM_OK)
        out[0] = '\0';
}

static void build_key(const struct ladder *L, const struct rung *r, const struct variant *v,
                      char out[HASH_SHA256_HEX_LEN + 1]) {
    char text[2048];
    int n = snprintf(text, sizeof text, "build|%s|%s|%s|%d", L->src_sha, r->type,
                     v->imatrix ? L->imatrix_sha : "-", TANDEM_ENGINE_BUILD);
    for (size_t i = 0; i < L->n_protect && n > 0 && (size_t)n < sizeof text; i++)
        n += snprintf(text + n, sizeof text - (size_t)n, "|%s", L->protect[i]);
    key_of(text, out);
}

static void judge_key(const struct ladder *L, const char *build,
                      char out[HASH_SHA256_HEX_LEN + 1]) {
    char text[1024];
    snprintf(text, sizeof text, "judge|%s|%s|%s|%u|%.6f|%u|%.6f|%d", build, L->src_sha,
             L->data_sha, L->o.seed, L->n_calibration ? L->o.share : 0.0,
             L->o.repeat, L->o.margin, TANDEM_ENGINE_BUILD);
    key_of(text, out);
}

/* The sidecar of a built file: {"build": KEY, "judged": {JKEY: figures}}. */
static json_t *sidecar_load(const char *path, const char *build) {
    char side[PATH_MAX + 16];
    snprintf(side, sizeof side, "%s.ladder.json", path);
    json_t *j = json_load_file(side, 0, NULL);
    const char *k = json_string_value(json_object_get(j, "build"));
    if (!k || strcmp(k, build) || access(path, R_OK) != 0) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/* Writes j beside path, atomically. */
static void sidecar_save(const char *path, json_t *j) {
    char side[PATH_MAX + 16];
    snprintf(side, sizeof side, "%s.ladder.json", path);
    char *text = json_dumps(j, JSON_INDENT(2));
    tandem_err e = text ? host_write_atomic(side, text, strlen(text)) : TANDEM_ERR_NOMEM;
    free(text);
    if (e != TANDEM_OK)
        fprintf(stderr, "tandem quantize --ladder: %s: cannot write the cache (%s); a rerun "
                        "judges again\n",
                side, e == TANDEM_ERR_IO ? strerror(errno) : tandem_strerror(e));
}

/* --- building and judging a rung ------------------------------------------------------------- */

static void variant_path(const struct ladder *L, const struct rung *r, const struct variant *v,
                         char *out, size_t cap) {
    snprintf(out, cap, "%.3800s/%s-%s%s.gguf", L->out_dir, L->stem, r->type,
             v->imatrix ? "-imatrix" : "");
}

/* Builds v (unless the cache has it) with its provenance in its metadata. */
static tandem_err build_variant(struct ladder *L, struct rung *r, struct variant *v,
                                const char *key, json_t **side, char *err, size_t errlen) {
    if ((*side = sidecar_load(v->path, key)))
        return TANDEM_OK;
    char kv[6][200], log[PATH_MAX + 16];
    const char *ov[7];
    size_t n = 0;
    snprintf(kv[n++], sizeof kv[0], "tandem.quantize.source_sha256=str:%s", L->src_sha);
    snprintf(kv[n++], sizeof kv[0], "tandem.quantize.type=str:%s", r->type);
    snprintf(kv[n++], sizeof kv[0], "tandem.quantize.engine_build=int:%d", TANDEM_ENGINE_BUILD);
    snprintf(kv[n++], sizeof kv[0], "tandem.quantize.protected=str:%.120s", L->protect_note);
    if (v->imatrix) {
        snprintf(kv[n++], sizeof kv[0], "tandem.quantize.imatrix_sha256=str:%s", L->imatrix_sha);
        snprintf(kv[n++], sizeof kv[0], "tandem.quantize.imatrix_data=str:%.100s",
                 host_base_name(L->o.data));
    }
    for (size_t i = 0; i < n; i++)
        ov[i] = kv[i];
    ov[n] = NULL;
    snprintf(log, sizeof log, "%s.log", v->path);
    struct engine_quant_params p =
        quant_params(L, r->type, v->imatrix ? L->imatrix : NULL, log, ov);
    progress(L, r->type, v->imatrix ? "quantize with the importance matrix" : "quantize");
    tandem_err e = engine_quant_build(&p, v->path, err, errlen);
    if (e != TANDEM_OK) {
        size_t n = strlen(err);
        snprintf(err + n, errlen - n, " (the whole log: %s)", log);
        return e;
    }
    unlink(log);
    *side = json_pack("{s:s,s:{}}", "build", key, "judged");
    return *side ? TANDEM_OK : TANDEM_ERR_NOMEM;
}

/* The figures the table and the gate need, from a drift summary. */
static json_t *figures_of(const json_t *drift, double ref_accuracy) {
    static const char *const keep[] = {"compared", "flips", "flip_rate", "flip_ci95",
                                       "sure_compared", "sure_flips", "sure_flip_rate",
                                       "sure_ci95", "unstable", "kl_mean", "kl_max",
                                       "max_dp_max", "skipped"};
    json_t *f = json_object();
    for (size_t i = 0; f && i < sizeof keep / sizeof *keep; i++)
        json_object_set(f, keep[i], json_object_get(drift, keep[i]));
    const json_t *acc = json_object_get(json_object_get(drift, "cand"), "accuracy");
    json_object_set_new(f, "delta_accuracy",
                        summary_number(json_is_number(acc) ? json_number_value(acc) - ref_accuracy
                                                            : NAN));
    return f;
}

/* Serves v and compares it with the reference. */
static tandem_err judge_variant(struct ladder *L, struct rung *r, struct variant *v,
                                json_t **figures, char *err, size_t errlen) {
    struct eval_run *run = NULL;
    tandem_err e = serve_and_run(L, v->path, r->type, &run, err, errlen);
    if (e != TANDEM_OK)
        return e;
    if (run->n_errors == L->judged.n_cases * L->o.repeat) {
        tandem_errmsg(err, errlen, "every request failed: %s", first_error(run));
        eval_run_free(run);
        return TANDEM_ERR_CHILD;
    }
    struct drift_options o = {.top = 0, .margin = L->o.margin};
    json_t *drift = drift_compare(L->ref, NULL, run, NULL, &o);
    eval_run_free(run);
    *figures = drift ? figures_of(drift, L->ref_accuracy) : NULL;
    json_decref(drift);
    return *figures ? TANDEM_OK : TANDEM_ERR_NOMEM;
}

/* The gate on judged figures: the sure flips' upper bound within --max-flip-rate. */
static void verdict(const struct ladder *L, struct variant *v) {
    const json_t *ci = json_object_get(v->judged, "sure_ci95");
    double hi = json_number_value(json_array_get(ci, 1));
    json_int_t k = json_integer_value(json_object_get(v->judged, "sure_flips"));
    json_int_t n = json_integer_value(json_object_get(v->judged, "sure_compared"));
    bool pass = json_is_number(json_array_get(ci, 1)) && hi <= L->o.max_flip;
    v->state = pass ? LADDER_PASS : LADDER_FAIL;
    snprintf(v->reason, sizeof v->reason,
             "%lld of %lld sure answers flipped; the 95%% upper bound %.1f%% is %s %.1f%%",
             (long long)k, (long long)n, 100 * hi, pass ? "within" : "above",
             100 * L->o.max_flip);
}

static void run_variant(struct ladder *L, struct rung *r, struct variant *v) {
    char key[HASH_SHA256_HEX_LEN + 1], jkey[HASH_SHA256_HEX_LEN + 1], err[600];
    double t0 = now_s();
    variant_path(L, r, v, v->path, sizeof v->path);
    build_key(L, r, v, key);
    judge_key(L, key, jkey);
    json_t *side = NULL;
    tandem_err e = build_variant(L, r, v, key, &side, err, sizeof err);
    if (e == TANDEM_OK) {
        json_t *judged = json_object_get(json_object_get(side, "judged"), jkey);
        v->cached = judged != NULL;
        if (judged) {
            v->judged = json_incref(judged);
        } else if ((e = judge_variant(L, r, v, &v->judged, err, sizeof err)) == TANDEM_OK) {
            json_object_set_new(v->judged, "seconds", json_real(now_s() - t0));
            json_object_set(json_object_get(side, "judged"), jkey, v->judged);
            sidecar_save(v->path, side);
        }
    }
    json_decref(side);
    /* a cached judgement reports what it cost when it was made */
    v->seconds = v->judged ? json_number_value(json_object_get(v->judged, "seconds"))
                           : now_s() - t0;
    if (e != TANDEM_OK) {
        v->state = LADDER_ERROR;
        snprintf(v->reason, sizeof v->reason, "%s", err);
        return;
    }
    verdict(L, v);
}

/* Judges every variant of r; the rung passes when one does. With both, the
 * matrix is kept only where it flipped fewer sure answers. */
static void judge_rung(struct ladder *L, size_t i) {
    struct rung *r = &L->rungs[i];
    bool any_pass = false, any_fail = false;
    for (size_t k = 0; k < r->n_variants; k++) {
        if (r->v[k].imatrix && !L->imatrix[0]) {
            r->v[k].state = LADDER_ERROR;
            snprintf(r->v[k].reason, sizeof r->v[k].reason, "no importance matrix: %.500s",
                     L->imatrix_note);
            continue;
        }
        run_variant(L, r, &r->v[k]);
        L->judge_seconds += r->v[k].seconds;
        any_pass |= r->v[k].state == LADDER_PASS;
        any_fail |= r->v[k].state == LADDER_FAIL;
    }
    L->states[i] = any_pass ? LADDER_PASS : any_fail ? LADDER_FAIL : LADDER_ERROR;
    L->n_judged++;
}

/* The variant to recommend of a rung: the one with fewer sure flips, the
 * plain one on a tie. */
static const struct variant *chosen(const struct rung *r) {
    const struct variant *best = NULL;
    for (size_t k = 0; k < r->n_variants; k++) {
        const struct variant *v = &r->v[k];
        if (v->state != LADDER_PASS && v->state != LADDER_FAIL)
            continue;
        if (!best || json_integer_value(json_object_get(v->judged, "sure_flips")) <
                         json_integer_value(json_object_get(best->judged, "sure_flips")))
            best = v;
    }
    return best;
}

/* --- the importance matrix -------------------------------------------------------------------- */

static void imatrix_progress(void *user, const char *phase, size_t done, size_t total) {
    const struct ladder *L = user;
    char text[96];
    if (total)
        snprintf(text, sizeof text, "importance matrix: %s %zu/%zu", phase, done, total);
    else
        snprintf(text, sizeof text, "importance matrix: %s", phase);
    progress(L, "imatrix", text);
}

/* Sets L->imatrix: FILE as given, or built from the calibration cases
 * (cached under a name from the source's and the data's hashes, the split
 * and the engine build). */
static int prepare_imatrix(struct ladder *L) {
    char err[1024];
    bool cached;
    if (strcmp(L->o.imatrix, "auto")) {
        snprintf(L->imatrix, sizeof L->imatrix, "%s", L->o.imatrix);
    } else {
        char what[512], key[HASH_SHA256_HEX_LEN + 1];
        snprintf(what, sizeof what, "imatrix|%s|%s|%u|%.6f|%d", L->src_sha, L->data_sha,
                 L->o.seed, L->o.share, TANDEM_ENGINE_BUILD);
        key_of(what, key);
        snprintf(L->imatrix, sizeof L->imatrix, "%.3800s/%s.imatrix-%.12s.gguf", L->out_dir,
                 L->stem, key);
        if (access(L->imatrix, R_OK) != 0) {
            struct imatrix_params p = imatrix_default_params();
            p.model = L->o.src, p.set = L->set, p.use = L->calibration, p.out = L->imatrix;
            p.llama_server = L->llama_server, p.data_name = L->o.data;
            p.split_seed = L->o.seed, p.split_share = L->o.share, p.verbose = L->o.verbose;
            p.progress = imatrix_progress, p.progress_user = L;
            double t0 = now_s();
            tandem_err e = imatrix_build(&p, NULL, err, sizeof err);
            L->imatrix_seconds = now_s() - t0;
            if (e != TANDEM_OK) {
                snprintf(L->imatrix_note, sizeof L->imatrix_note, "%.500s", err);
                end_progress(L);
                fprintf(stderr, "tandem quantize --ladder: no importance matrix: %s; the "
                                "ladder goes on without one\n", err);
                L->imatrix[0] = '\0';
                return 0;
            }
        }
    }
    if (hash_file_sha256_cached(L->imatrix, L->imatrix_sha, &cached, err, sizeof err)) {
        fprintf(stderr, "tandem quantize --ladder: --imatrix: %s\n", err);
        return 1;
    }
    snprintf(L->imatrix_note, sizeof L->imatrix_note, "%.500s", L->imatrix);
    return 0;
}

/* Whether a rung the search may judge wants the matrix. */
static bool wants_imatrix(const struct ladder *L) {
    for (size_t i = 0; i < L->n_rungs; i++) {
        const struct rung *r = &L->rungs[i];
        if (L->states[i] != LADDER_NO_FIT && (r->n_variants == 2 || r->v[0].imatrix))
            return true;
    }
    return false;
}

/* --- the summary ------------------------------------------------------------------------------ */

static const char *state_name(enum ladder_state s) {
    switch (s) {
    case LADDER_PASS: return "passed";
    case LADDER_FAIL: return "failed";
    case LADDER_ERROR: return "error";
    case LADDER_NO_FIT: return "does not fit";
    default: return "skipped";
    }
}

static json_t *bytes_or_null(bool have, uint64_t b) {
    return have ? json_integer((json_int_t)b) : json_null();
}

static json_t *fallbacks_json(const struct engine_quant_size *s) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < s->n_fallbacks; i++)
        json_array_append_new(a, json_pack("{s:s,s:s,s:s}", "tensor", s->fallbacks[i].tensor,
                                           "wanted", s->fallbacks[i].wanted, "got",
                                           s->fallbacks[i].got));
    return a;
}

static const char *const figure_keys[] = {
    "compared", "flips", "flip_rate", "flip_ci95", "sure_compared", "sure_flips",
    "sure_flip_rate", "sure_ci95", "unstable", "kl_mean", "kl_max", "delta_accuracy"};

/* One table row: variant v of rung r, whose search state is st. */
static json_t *variant_json(const struct ladder *L, const struct rung *r, enum ladder_state st,
                            const struct variant *v) {
    bool judged = v->judged != NULL;
    const char *status = st == LADDER_NO_FIT                   ? "does not fit"
                         : judged || v->state == LADDER_ERROR ? state_name(v->state)
                         : L->o.plan_only                     ? "fits"
                                                              : "skipped";
    const char *reason = st == LADDER_NO_FIT ? r->fit_reason
                         : v->reason[0]       ? v->reason
                         : r->skipped[0]      ? r->skipped
                                              : NULL;
    json_t *j = json_pack(
        "{s:s,s:b,s:I,s:f,s:f,s:I,s:o,s:b,s:o,s:s,s:o,s:o,s:o}", "type", r->type, "imatrix",
        v->imatrix, "bytes", (json_int_t)r->size.bytes, "mib", (double)r->size.bytes / MIB,
        "bpw", r->size.bpw, "vram_alone", (json_int_t)r->mem_alone, "vram_pair",
        bytes_or_null(L->n_partners > 0, r->mem_pair), "fits", r->fits, "fallbacks",
        fallbacks_json(&r->size), "status", status, "reason",
        reason ? json_string(reason) : json_null(), "seconds",
        judged || v->state == LADDER_ERROR ? json_real(v->seconds) : json_null(), "path",
        v->path[0] && (judged || v->cached) ? json_string(v->path) : json_null());
    for (size_t i = 0; j && i < sizeof figure_keys / sizeof *figure_keys; i++) {
        json_t *x = judged ? json_object_get(v->judged, figure_keys[i]) : NULL;
        json_object_set(j, figure_keys[i], x ? x : json_null());
    }
    json_object_set(j, "max_dp", judged ? json_object_get(v->judged, "max_dp_max") : json_null());
    json_object_set_new(j, "cached", json_boolean(v->cached));
    return j;
}

/* The recommendation and why the next rung down was not it. */
static json_t *recommendation_json(const struct ladder *L) {
    size_t b = ladder_best(L->states, L->n_rungs);
    if (b == SIZE_MAX)
        return json_null();
    const struct rung *r = &L->rungs[b];
    const struct variant *v = chosen(r);
    char why[1024];
    int n = snprintf(why, sizeof why, "%s%s is the smallest rung that fits and passes: %s.",
                     r->type, v->imatrix ? " (with the importance matrix)" : "", v->reason);
    for (size_t i = b + 1; i < L->n_rungs && n > 0 && (size_t)n < sizeof why; i++) {
        const struct rung *next = &L->rungs[i];
        const struct variant *nv = chosen(next);
        if (L->states[i] == LADDER_NO_FIT || L->states[i] == LADDER_PENDING)
            continue;
        snprintf(why + n, sizeof why - (size_t)n, " The next one down, %s, %s: %s.", next->type,
                 L->states[i] == LADDER_FAIL ? "failed" : "could not be judged",
                 nv ? nv->reason : next->v[0].reason);
        break;
    }
    return json_pack("{s:s,s:b,s:s,s:s}", "type", r->type, "imatrix", v->imatrix, "path",
                     v->path, "why", why);
}

static json_t *summary_json(const struct ladder *L) {
    json_t *rungs = json_array();
    for (size_t i = 0; rungs && i < L->n_rungs; i++) {
        const struct rung *r = &L->rungs[i];
        for (size_t k = 0; k < r->n_variants; k++)
            json_array_append_new(rungs, variant_json(L, r, L->states[i], &r->v[k]));
    }
    json_t *partner = json_null();
    if (L->n_partners) {
        partner = json_array();
        for (size_t i = 0; i < L->n_partners; i++)
            json_array_append_new(partner,
                                  json_pack("{s:s,s:s}", "name", L->partners[i].name, "path",
                                            plan_model_path(L->partner_pm[i])));
    }
    json_t *data = json_pack("{s:s,s:I,s:I,s:I,s:I,s:f}", "path", L->o.data ? L->o.data : "-",
                             "cases", (json_int_t)(L->set ? L->set->n_cases : 0), "judged",
                             (json_int_t)L->judged.n_cases, "calibration",
                             (json_int_t)L->n_calibration, "seed", (json_int_t)L->o.seed,
                             "share", L->n_calibration ? L->o.share : 0.0);
    json_t *reference =
        L->ref ? json_pack("{s:I,s:I,s:o,s:f,s:I}", "questions", (json_int_t)L->ref_questions,
                           "sure", (json_int_t)L->ref_sure, "accuracy",
                           summary_number(L->ref_accuracy), "seconds", L->ref->seconds,
                           "repeat", (json_int_t)L->o.repeat)
               : json_null();
    return json_pack(
        "{s:s,s:{s:s,s:s,s:f,s:s,s:s},s:o,s:o,s:s,s:f,s:f,s:o,s:o,s:o,s:o,s:o,s:f}",
        "format", "tandem-ladder/1", "source", "path", L->o.src, "type", L->src_type, "mib",
        (double)plan_model_weight_bytes(L->pm) / MIB, "sha256", L->src_sha, "protected",
        L->protect_note, "partner", partner, "budget_bytes",
        L->budget.gpu ? json_integer((json_int_t)L->budget.gpu_bytes)
                      : json_integer((json_int_t)L->budget.host_bytes),
        "budget_source", L->budget_source, "margin", L->o.margin, "max_flip_rate",
        L->o.max_flip, "data", data, "reference", reference, "imatrix",
        L->imatrix[0] ? json_pack("{s:s,s:s,s:f}", "path", L->imatrix, "sha256", L->imatrix_sha,
                                  "seconds", L->imatrix_seconds)
                      : (L->imatrix_note[0] ? json_pack("{s:s}", "unavailable", L->imatrix_note)
                                            : json_null()),
        "rungs", rungs, "recommendation", recommendation_json(L), "seconds", now_s() - L->t0);
}

/* --- output ----------------------------------------------------------------------------------- */

static void fmt_num(char *out, size_t cap, const json_t *v, const char *fmt, double scale) {
    if (json_is_number(v))
        snprintf(out, cap, fmt, json_number_value(v) * scale);
    else
        snprintf(out, cap, "-");
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
    printf(" %-4s %-24s %7s %6s %6s %5s  %s\n",
           json_is_true(json_object_get(r, "fits")) ? "yes" : "no", flips, kl, dp, dacc, secs,
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
    printf(" %-4s %-24s %7s %6s %6s %5s  %s\n", "fits", "sure flips [95%] all", "KL", "|dp|",
           "dacc", "s", "verdict");
    const json_t *rungs = json_object_get(s, "rungs"), *r;
    size_t i;
    json_array_foreach(rungs, i, r) print_rung(r, pair);
    printf("(memory in MiB, planned as tandem plan does; sure flips: flips among answers the "
           "reference held with that margin, the gate uses their 95%% upper bound; dacc: change "
           "in accuracy on gold answers, points)\n\n");
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

static int write_outputs(const struct ladder *L, const json_t *s) {
    if (L->o.plan.json) {
        char *text = json_dumps(s, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        puts(text ? text : "{}");
        free(text);
    } else {
        print_table(s);
    }
    int rc = 0;
    if (L->o.report) {
        char *html = NULL;
        size_t len = 0;
        if (report_ladder_html(s, &html, &len) != TANDEM_OK) {
            fprintf(stderr, "tandem quantize --ladder: cannot render the report\n");
            rc = 1;
        } else {
            rc = host_write_atomic(L->o.report, html, len) == TANDEM_OK ? 0 : 1;
            if (rc)
                fprintf(stderr, "tandem quantize --ladder: %s: %s\n", L->o.report,
                        strerror(errno));
        }
        mem_free(html);
    }
    const json_t *rec = json_object_get(s, "recommendation");
    if (L->o.write_config && json_is_object(rec))
        printf("path: %s\n", json_string_value(json_object_get(rec, "path")));
    return rc;
}

/* --- the search ------------------------------------------------------------------------------- */

/* Judges rungs as the bisection asks (every one with --all), then says why
 * the others were skipped. */
static void search(struct ladder *L) {
    size_t i;
    for (i = 0; L->o.all && i < L->n_rungs; i++)
        if (L->states[i] == LADDER_PENDING)
            judge_rung(L, i);
    while ((i = ladder_next(L->states, L->n_rungs)) != SIZE_MAX)
        judge_rung(L, i);
    for (i = 0; i < L->n_rungs; i++) {
        struct rung *r = &L->rungs[i];
        if (L->states[i] != LADDER_PENDING)
            continue;
        int passed;
        size_t by = ladder_decided_by(L->states, L->n_rungs, i, &passed);
        char decider[16];
        if (by == SIZE_MAX)
            continue;
        memcpy(decider, L->rungs[by].type, sizeof decider);
        snprintf(r->skipped, sizeof r->skipped, "not built: %s %s %s",
                 passed ? "the smaller" : "the larger", decider,
                 passed ? "passed, so this one is taken to pass"
                        : "failed, so this one is taken to fail");
    }
    end_progress(L);
}

/* --- main ------------------------------------------------------------------------------------- */

static int prepare(struct ladder *L) {
    int rc;
    if ((rc = check_source(L)) || (rc = protect_head(L)) ||
        (!L->o.plan_only && (rc = load_cases(L))) || (rc = load_partners(L)))
        return rc;
    char err[1024];
    bool cached;
    if (hash_file_sha256_cached(L->o.src, L->src_sha, &cached, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem quantize --ladder: %s\n", err);
        return 1;
    }
    const char *base = host_base_name(L->o.src);
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".gguf"))
        n -= 5;
    snprintf(L->stem, sizeof L->stem, "%.*s", (int)(n < 100 ? n : 100), base);
    snprintf(L->out_dir, sizeof L->out_dir, "%s", L->o.out_dir ? L->o.out_dir : L->stem);
    if (!L->o.out_dir)
        strncat(L->out_dir, "-ladder", sizeof L->out_dir - strlen(L->out_dir) - 1);
    if (mkdir(L->out_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "tandem quantize --ladder: %s: %s\n", L->out_dir, strerror(errno));
        return 1;
    }
    tandem_err e = engine_locate_tool(L->llama_server, TANDEM_ENGINE_BUILD, "llama-quantize",
                                      L->tool, sizeof L->tool);
    if (e != TANDEM_OK) {
        fprintf(stderr, "tandem quantize --ladder: %s: no executable llama-quantize; "
                        "scripts/build-engine.sh installs it beside llama-server\n", L->tool);
        return 1;
    }
    return 0;
}

static void ladder_free(struct ladder *L) {
    for (size_t i = 0; i < L->n_rungs; i++) {
        engine_quant_size_free(&L->rungs[i].size);
        for (size_t k = 0; k < 2; k++)
            json_decref(L->rungs[i].v[k].judged);
    }
    for (size_t i = 0; i < L->n_protect; i++)
        mem_free(L->protect[i]);
    for (size_t i = 0; i < L->n_partners; i++)
        plan_model_free(L->partner_pm[i]);
    eval_run_free(L->ref);
    mem_free(L->judged.cases);
    mem_free(L->calibration);
    evalset_free(L->set);
    plan_model_free(L->pm);
    gguf_free(L->g);
    config_free(L->cfg);
    mem_free(L);
}

int cmd_ladder_main(int argc, char **argv, const char *llama_server) {
    struct ladder *L = mem_calloc(1, sizeof *L);
    if (!L) {
        fprintf(stderr, "tandem quantize --ladder: out of memory\n");
        return 1;
    }
    int rc = parse_args(argc, argv, &L->o);
    if (rc) {
        mem_free(L);
        return rc < 0 ? 0 : rc;
    }
    L->llama_server = llama_server;
    L->tty = isatty(STDERR_FILENO) && !L->o.verbose;
    L->t0 = now_s();
    if ((rc = prepare(L)) || (rc = size_rungs(L)))
        goto done;
    if (!L->o.plan_only) {
        bool with_imatrix = strcmp(L->o.imatrix, "none") && wants_imatrix(L);
        if ((rc = split_cases(L, with_imatrix)) || (rc = judge_reference(L)) ||
            (with_imatrix && (rc = prepare_imatrix(L))))
            goto done;
        search(L);
    }
    json_t *s = summary_json(L);
    if (!s) {
        fprintf(stderr, "tandem quantize --ladder: out of memory\n");
        rc = 1;
        goto done;
    }
    rc = write_outputs(L, s);
    if (!rc && !L->o.plan_only && !json_is_object(json_object_get(s, "recommendation")))
        rc = 1;
    json_decref(s);
done:
    ladder_free(L);
    return rc;
}
