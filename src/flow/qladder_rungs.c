/* qladder_rungs.c: the ladder's source and rungs, before anything is built.
 *
 * The source must be a decision model stored at F32, F16, BF16 or Q8_0 (it
 * is also the reference); its cls.* tensors, the decision head, are kept as
 * stored in every rung (one --tensor-type each). Every type is sized by
 * `llama-quantize --dry-run` (engine_quantize: exact bytes, fallbacks) and
 * planned beside the partners (qladder_plan: the placement search, the
 * weights scaled to the rung's size); a rung that does not fit is never
 * built. The rungs are ordered by their real size, largest first, and each
 * gets its variants: at or below 4 bits, --imatrix auto judges it with and
 * without the importance matrix. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/mem.h"
#include "flow/qladder_int.h"
#include "gguf/ggml_types.h"

#define ERR_PREFIX "tandem quantize --ladder: "

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
int qladder_rungs_check_source(struct qladder *L) {
    char err[1024];
    if (gguf_open(L->o.src, &L->g, err, sizeof err) != TANDEM_OK ||
        plan_model_open(L->o.src, &L->pm, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, ERR_PREFIX "%s\n", err);
        return 1;
    }
    if (!*plan_model_decision_type(L->pm)) {
        fprintf(stderr, ERR_PREFIX "%s is not a decision model (no "
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
        fprintf(stderr, ERR_PREFIX "%s stores %.1f of its %.1f MiB of matrices "
                        "as %s: it is the reference, and flips measured against an already "
                        "quantized reference hide what quantization changed; start from the "
                        "F16, BF16 or Q8_0 file, or pass --allow-requantize\n",
                L->o.src, (double)bytes / QLADDER_MIB, (double)total / QLADDER_MIB, c ? c->name : "?");
        return 1;
    }
    return 0;
}

/* The cls.* matrices (the decision head: Kev's pointer head, Laya's scorer)
 * are kept at their stored type in every rung: they are a sliver of the
 * file and their output is the decision itself. One --tensor-type each. */
int qladder_rungs_protect_head(struct qladder *L) {
    uint64_t bytes = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(L->g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(L->g, i);
        if (t->n_dims < 2 || t->name.len < 4 || memcmp(t->name.ptr, "cls.", 4))
            continue;
        const struct ggml_type_info *ti = ggml_type_get(t->type);
        if (L->n_protect == QLADDER_MAX_PROTECT || !ti) {
            fprintf(stderr, ERR_PREFIX "more than %d cls.* matrices\n",
                    QLADDER_MAX_PROTECT);
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
                 (double)bytes / QLADDER_MIB);
    else
        snprintf(L->protect_note, sizeof L->protect_note,
                 "no cls.* tensors: the decision is read from the LM head, which "
                 "llama-quantize keeps at its own higher type");
    return 0;
}

/* --- the rungs -------------------------------------------------------------------------------- */

static bool low_bit(const char *type) {
    const char *p = type + (type[0] == 'I' || type[0] == 'i');
    return (p[0] == 'Q' || p[0] == 'q') && p[1] >= '1' && p[1] <= '4';
}

/* Puts the rungs in size order, largest first (ladder_order: ties keep the
 * order given). */
static int sort_rungs(struct qladder *L) {
    size_t order[QLADDER_MAX_TYPES];
    uint64_t bytes[QLADDER_MAX_TYPES];
    for (size_t i = 0; i < L->n_rungs; i++)
        bytes[i] = L->rungs[i].size.bytes;
    struct qladder_rung *sorted = mem_alloc_array(L->n_rungs ? L->n_rungs : 1, sizeof *sorted);
    if (!sorted) {
        fprintf(stderr, ERR_PREFIX "out of memory\n");
        return 1;
    }
    ladder_order(bytes, L->n_rungs, order);
    for (size_t i = 0; i < L->n_rungs; i++)
        sorted[i] = L->rungs[order[i]];
    memcpy(L->rungs, sorted, L->n_rungs * sizeof *sorted);
    mem_free(sorted);
    return 0;
}

/* Plans rung r beside the partners. */
static int plan_rung(struct qladder *L, struct qladder_rung *r) {
    if (qladder_plan_rung(&L->plan, r->type, r->size.bytes, &r->fit) != TANDEM_OK) {
        fprintf(stderr, ERR_PREFIX "%s: the planner failed\n", r->type);
        return 1;
    }
    return 0;
}

int qladder_rungs_size(struct qladder *L) {
    char list[1024];
    snprintf(list, sizeof list, "%s", L->o.types);
    char log[PATH_MAX + 32];
    snprintf(log, sizeof log, "%s/dry-run.log", L->out_dir);
    for (char *save, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (L->n_rungs == QLADDER_MAX_TYPES) {
            fprintf(stderr, ERR_PREFIX "at most %d types\n", QLADDER_MAX_TYPES);
            return 2;
        }
        struct qladder_rung *r = &L->rungs[L->n_rungs];
        snprintf(r->type, sizeof r->type, "%s", t);
        for (char *c = r->type; *c; c++)
            *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
        struct engine_quant_params p = qladder_quant_params(L, r->type, NULL, log, NULL);
        char err[600];
        qladder_progress(L, r->type, "dry-run");
        if (engine_quant_dry_run(&p, &r->size, err, sizeof err) != TANDEM_OK) {
            fprintf(stderr, ERR_PREFIX "%s: %s\n", r->type, err);
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
        struct qladder_rung *r = &L->rungs[i];
        L->states[i] = r->fit.fits ? LADDER_PENDING : LADDER_NO_FIT;
        bool automatic = !strcmp(L->o.imatrix, "auto");
        bool both = automatic && low_bit(r->type) && !r->size.needs_imatrix;
        bool only = (automatic && r->size.needs_imatrix) ||
                    (!automatic && strcmp(L->o.imatrix, "none"));
        r->n_variants = both && r->fit.fits && !L->o.plan_only ? 2 : 1;
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

