/* cmd_imatrix.c: `tandem imatrix`, an importance matrix computed from the
 * user's own decision requests by the pinned engine's llama-imatrix.
 *
 * The command checks its arguments and paths, loads and splits the data,
 * calls imatrix_build (flow/imatrix.c: the rendering through the engine,
 * llama-imatrix and the output with its provenance), and renders its
 * progress and result. */
#include "cli/cmd_imatrix.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/host.h"
#include "base/mem.h"
#include "flow/dataset.h"
#include "flow/imatrix.h"

/* --- the command ----------------------------------------------------------------- */

struct cli {
    struct imatrix_params p;
    const char *data;
    double share;
    uint64_t seed;
    char out[4096];
    bool tty;       /* stderr is a terminal: progress on one line */
    bool line_open; /* a progress line waits for its newline */
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem imatrix MODEL.gguf --data SET.jsonl [options]\n"
            "\n"
            "Computes an importance matrix for MODEL (a decision model) from your own decision\n"
            "requests, with the pinned engine's llama-imatrix, for llama-quantize --imatrix\n"
            "(and tandem quantize --ladder). Each question of each calibration case is sent\n"
            "alone to a llama-server for MODEL on the CPU, and the prompt the engine rendered\n"
            "for it (its systemone chat template, special tokens included) is read back from\n"
            "GET /slots; the prompts make the text llama-imatrix reads.\n"
            "\n"
            "  --data FILE               an eval set (docs/eval-format.md) or an audit log\n"
            "                            written with logs.bodies: true (its /v1/systemone\n"
            "                            requests); told apart by the first line\n"
            "  --out FILE                the matrix to write (default: MODEL's name with\n"
            "                            .imatrix.gguf, in the current folder); written\n"
            "                            atomically, never over MODEL\n"
            "  --calibration-share X     the share of cases used, 0 < X <= 1 (default %.1f); the\n"
            "                            rest are held out for judging, as the ladder does\n"
            "  --seed N                  seed of the split (default %d): a case's side depends\n"
            "                            only on the seed, its id and the share\n"
            "  --text-out FILE           also keep the rendered text\n"
            "  --verbose                 show the engine's logs\n"
            "  -h, --help\n"
            "\n"
            "exit codes: 0 written, 1 failed (no file is left; a model the engine cannot\n"
            "compute a matrix for is said in one line), 2 usage error\n",
            IMATRIX_DEFAULT_SHARE, IMATRIX_DEFAULT_SEED);
}

static int parse_share(const char *v, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!*v || *end || errno || !(x > 0 && x <= 1)) {
        fprintf(stderr, "tandem imatrix: --calibration-share: expected 0 < X <= 1, got '%s'\n",
                v);
        return 2;
    }
    *out = x;
    return 0;
}

static int parse_seed(const char *v, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (!*v || *end || errno || *v == '-') {
        fprintf(stderr, "tandem imatrix: --seed: expected a non-negative integer, got '%s'\n", v);
        return 2;
    }
    *out = n;
    return 0;
}

static int parse_args(int argc, char **argv, struct cli *o) {
    static const struct option opts[] = {
        {"data", required_argument, NULL, 'd'},
        {"out", required_argument, NULL, 'o'},
        {"calibration-share", required_argument, NULL, 's'},
        {"seed", required_argument, NULL, 'S'},
        {"text-out", required_argument, NULL, 't'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    int c, rc = 0;
    optind = 0;
    while (!rc && (c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': o->data = optarg; break;
        case 'o': snprintf(o->out, sizeof o->out, "%s", optarg); break;
        case 's': rc = parse_share(optarg, &o->share); break;
        case 'S': rc = parse_seed(optarg, &o->seed); break;
        case 't': o->p.text_out = optarg; break;
        case 'v': o->p.verbose = true; break;
        case 'h': usage(stdout); return -1;
        default: rc = 2;
        }
    }
    if (!rc && argc - optind != 1) {
        fprintf(stderr, "tandem imatrix: expected one MODEL.gguf\n");
        rc = 2;
    }
    if (!rc && !o->data) {
        fprintf(stderr, "tandem imatrix: --data SET.jsonl is required\n");
        rc = 2;
    }
    if (rc == 2)
        usage(stderr);
    return rc;
}

/* Whether a and b name the same existing file. */
static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return !strcmp(a, b) || (stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
                             sa.st_ino == sb.st_ino);
}

/* Fills o->out by default and refuses outputs that would overwrite an input. */
static int check_paths(struct cli *o) {
    const char *model = o->p.model;
    if (!o->out[0]) {
        const char *name = host_base_name(model);
        size_t n = strlen(name);
        if (n > 5 && !strcmp(name + n - 5, ".gguf"))
            n -= 5;
        snprintf(o->out, sizeof o->out, "%.*s.imatrix.gguf", (int)n, name);
    }
    o->p.out = o->out;
    const char *outs[] = {o->out, o->p.text_out};
    for (int i = 0; i < 2; i++)
        if (outs[i] && (same_file(outs[i], model) || same_file(outs[i], o->data))) {
            fprintf(stderr, "tandem imatrix: %s: refusing to overwrite an input\n", outs[i]);
            return 2;
        }
    if (o->p.text_out && same_file(o->p.text_out, o->out)) {
        fprintf(stderr, "tandem imatrix: --text-out and --out name the same file\n");
        return 2;
    }
    return 0;
}

/* Ends a progress line left open on the terminal. */
static void close_line(struct cli *o) {
    if (o->line_open)
        fputc('\n', stderr);
    o->line_open = false;
}

static void show_progress(void *user, const char *phase, size_t done, size_t total) {
    struct cli *o = user;
    bool render = !strcmp(phase, "render");
    if (render && o->tty) {
        fprintf(stderr, "\rtandem imatrix: rendering %zu/%zu prompts", done, total);
        o->line_open = true;
    } else if (render && done == 0) {
        fprintf(stderr, "tandem imatrix: rendering %zu prompts...\n", total);
    } else if (!render && done == 0) {
        close_line(o);
        fprintf(stderr, "tandem imatrix: llama-imatrix over %zu chunk(s)...\n", total);
    }
}

/* Loads the data and splits it; prints what is used. Returns 0 or 1. */
static int load_data(struct cli *o, struct evalset **set, bool **use) {
    char err[8192];
    size_t skipped = 0;
    if (dataset_load(o->data, &(struct dataset_opts){.audit_ok = true}, set, &skipped, err,
                     sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem imatrix: %s\n", err);
        return 1;
    }
    struct evalset *s = *set;
    *use = mem_calloc(s->n_cases, sizeof **use);
    if (!*use) {
        fprintf(stderr, "tandem imatrix: out of memory\n");
        return 1;
    }
    size_t n = evalset_split(s, o->seed, o->share, *use);
    if (skipped)
        fprintf(stderr, "tandem imatrix: %s: audit log: %zu line(s) gave no case (other "
                        "routes, failed requests, no body, repeated ids)\n", o->data, skipped);
    fprintf(stderr, "tandem imatrix: %s: %zu case(s): %zu for calibration, %zu held out "
                    "(seed %llu, calibration share %g)\n", o->data, s->n_cases, n,
            s->n_cases - n, (unsigned long long)o->seed, o->share);
    if (n == 0) {
        fprintf(stderr, "tandem imatrix: no calibration case: raise --calibration-share or "
                        "add cases\n");
        return 1;
    }
    return 0;
}

int cmd_imatrix_main(int argc, char **argv, const char *llama_server) {
    struct cli o = {.p = imatrix_default_params(), .share = IMATRIX_DEFAULT_SHARE,
                    .seed = IMATRIX_DEFAULT_SEED};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    o.p.model = argv[optind];
    if (access(o.p.model, R_OK) != 0) {
        fprintf(stderr, "tandem imatrix: %s: cannot read: %s\n", o.p.model, strerror(errno));
        return 1;
    }
    if ((rc = check_paths(&o)))
        return rc;
    struct evalset *set = NULL;
    bool *use = NULL;
    if ((rc = load_data(&o, &set, &use)) == 0) {
        o.p.set = set;
        o.p.use = use;
        o.p.llama_server = llama_server;
        o.p.data_name = o.data;
        o.p.split_seed = o.seed;
        o.p.split_share = o.share;
        o.p.progress = show_progress;
        o.p.progress_user = &o;
        o.tty = isatty(2);
        struct imatrix_stats st;
        char err[2048];
        tandem_err e = imatrix_build(&o.p, &st, err, sizeof err);
        close_line(&o);
        if (e) {
            fprintf(stderr, "tandem imatrix: %s\n", err);
            rc = 1;
        } else {
            printf("tandem imatrix: wrote %s: %zu case(s), %zu prompt(s), %llu tokens, %u "
                   "chunk(s) of %u (render %.1f s, llama-imatrix %.1f s)\n", o.out, st.n_cases,
                   st.n_prompts, (unsigned long long)st.n_tokens, st.n_chunks, st.chunk,
                   st.render_s, st.imatrix_s);
        }
    }
    mem_free(use);
    evalset_free(set);
    return rc;
}
