/* place.c: the joint placement search.
 *
 * Every model gets a device: the CPU, or a GPU its `device:` allows. For each
 * such assignment, each GPU's models either fit together (co-resident), or
 * the GPU offers several variants: all of them rotate (a model too large for
 * the GPU alone rotates at the most layers that fit), or one non-pinned model
 * keeps only the layers that fit beside the others (share). Assignments times
 * variants are enumerated exhaustively up to MAX_CONSIDERED arrangements,
 * which covers every realistic pair or trio; beyond it the search stops and
 * says so in the reason. Footprints come from the caller's function (the
 * planner corrected by measurements), costs from cost.h.
 *
 * Expected seconds per request of a unit of work W:
 *   sum over W's stages of the stage model's request cost on its device
 *   (a partial offload: the layer-weighted mix of its GPU and CPU costs),
 *   plus, per GPU that rotates, the loads W forces: each of W's models that
 *   rotates there loads once per request when W uses two or more of them;
 *   when W uses one, it loads with probability (k-1)/k, where k rotating
 *   models there serve work (interleaved requests); divided by the grouping
 *   min(clients, group_limit), since requests in flight share a load. */
#include "plan/place.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/units.h"

#define MAX_CONSIDERED 20000

const char *place_want_name(enum place_want w) {
    return w == PLACE_WANT_GPU ? "gpu" : w == PLACE_WANT_CPU ? "cpu" : "auto";
}

tandem_err place_want_parse(const char *text, enum place_want *want, int32_t *gpu) {
    *gpu = PLACE_ANY_GPU;
    if (!strcmp(text, "auto") || !strcmp(text, "gpu") || !strcmp(text, "cpu")) {
        *want = text[0] == 'a' ? PLACE_WANT_AUTO : text[0] == 'g' ? PLACE_WANT_GPU : PLACE_WANT_CPU;
        return TANDEM_OK;
    }
    if (strncmp(text, "gpu:", 4) || text[4] < '0' || text[4] > '9')
        return TANDEM_ERR_INVAL;
    char *end;
    long n = strtol(text + 4, &end, 10);
    if (*end || n >= PLACE_MAX_GPUS)
        return TANDEM_ERR_INVAL;
    *want = PLACE_WANT_GPU;
    *gpu = (int32_t)n;
    return TANDEM_OK;
}

char *place_device_name(int32_t device, char *out, size_t cap) {
    if (device == PLACE_CPU)
        snprintf(out, cap, "cpu");
    else
        snprintf(out, cap, "gpu:%d", device);
    return out;
}

struct search {
    const struct place_model *m;
    size_t n;
    const struct place_work *work;
    size_t n_work;
    const struct place_budget *b;
    struct place_params p;
    fit_footprint_fn fn;
    void *user;
    tandem_err err;
    struct plan_footprint full[PLACE_MAX_MODELS]; /* on a GPU at the requested ngl */
    struct plan_footprint cpu[PLACE_MAX_MODELS];  /* a CPU engine */
    int32_t device[PLACE_MAX_MODELS];             /* the assignment being explored */
    struct place_result *out;
    bool have_best;
};

static int32_t all_layers(const struct place_model *m) {
    return (int32_t)plan_model_n_layer(m->model) + 1;
}

static bool auto_ngl(const struct place_model *m) { return m->settings.ngl == PLAN_NGL_AUTO; }

static bool footprint(struct search *s, size_t i, bool gpu, int32_t ngl, struct plan_footprint *f) {
    struct plan_settings st = s->m[i].settings;
    st.gpu = gpu;
    st.ngl = gpu ? ngl : 0;
    tandem_err e = s->fn(s->m[i].model, &st, f, s->user);
    if (e != TANDEM_OK && s->err == TANDEM_OK)
        s->err = e;
    return e == TANDEM_OK;
}

static uint64_t gpu_bytes(const struct plan_footprint *f) {
    return plan_footprint_device_total(f, PLAN_DEVICE_GPU);
}

static uint64_t host_bytes(const struct plan_footprint *f) {
    return plan_footprint_device_total(f, PLAN_DEVICE_HOST);
}

/* Most GPU layers of model i whose GPU part fits in room (0 = none), with
 * its footprint in *f. Fewer than half its layers count as none: such a
 * model is CPU-bound (fit.h's severe class), and the CPU alone serves it
 * about as fast without the GPU context it would pay for. */
static int32_t max_ngl(struct search *s, size_t i, uint64_t room, struct plan_footprint *f) {
    int32_t lo = 0, hi = all_layers(&s->m[i]);
    struct plan_footprint t;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (footprint(s, i, true, mid, &t) && gpu_bytes(&t) <= room)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo >= 1 && 2 * lo >= all_layers(&s->m[i]) && footprint(s, i, true, lo, f) ? lo : 0;
}

/* --- one arrangement ---------------------------------------------------------------------- */

static double mix(const struct place_model *m, int32_t ngl, int32_t all, uint32_t tokens) {
    const struct cost_figure *g = &m->cost.on[COST_GPU], *c = &m->cost.on[COST_CPU];
    double share = all > 0 ? (double)ngl / (double)all : 0;
    return COST_REQUEST_S + (double)tokens * (share * g->token_s + (1 - share) * c->token_s);
}

static void set_slot(struct search *s, struct place_arrangement *a, size_t i, int32_t dev,
                     int32_t ngl, const struct plan_footprint *f, bool rotates) {
    const struct place_model *m = &s->m[i];
    struct place_slot *sl = &a->slot[i];
    *sl = (struct place_slot){.device = dev, .ngl = dev == PLACE_CPU ? 0 : ngl,
                              .rotates = rotates, .footprint = *f};
    uint32_t tokens = s->p.tokens; /* a request cannot be longer than a slot's context */
    if (f->n_ctx_slot && tokens > f->n_ctx_slot)
        tokens = f->n_ctx_slot;
    sl->request_s = mix(m, sl->ngl, all_layers(m), tokens);
    sl->load_s = m->cost.on[dev == PLACE_CPU ? COST_CPU : COST_GPU].load_s;
}

static uint32_t grouping(const struct search *s) {
    uint32_t g = s->p.clients < s->p.group_limit ? s->p.clients : s->p.group_limit;
    return g ? g : 1;
}

static bool in_work(const struct place_work *w, size_t i) {
    for (size_t k = 0; k < w->n; k++)
        if (w->models[k] == i)
            return true;
    return false;
}

/* Rotating models on gpu that any work uses. */
static size_t rotating_used(const struct search *s, const struct place_arrangement *a, int32_t gpu) {
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) {
        bool used = false;
        for (size_t w = 0; w < s->n_work && !used; w++)
            used = in_work(&s->work[w], i);
        k += used && a->slot[i].rotates && a->slot[i].device == gpu;
    }
    return k;
}

/* Expected loads (and their seconds) per request of work w. */
static double work_loads(const struct search *s, const struct place_arrangement *a,
                         const struct place_work *w, double *seconds) {
    double loads = 0;
    *seconds = 0;
    for (int32_t g = PLACE_CPU; g < (int32_t)s->b->n_gpus; g++) {
        size_t mine = 0;
        double mine_s = 0;
        for (size_t i = 0; i < s->n; i++)
            if (a->slot[i].rotates && a->slot[i].device == g && in_work(w, i))
                mine++, mine_s += a->slot[i].load_s;
        if (mine >= 2) {
            loads += (double)mine, *seconds += mine_s;
        } else if (mine == 1) {
            size_t k = rotating_used(s, a, g);
            double p = k > 1 ? (double)(k - 1) / (double)k : 0;
            loads += p, *seconds += p * mine_s;
        }
    }
    loads /= grouping(s), *seconds /= grouping(s);
    return loads;
}

static void score(struct search *s, struct place_arrangement *a) {
    double sum = 0;
    for (size_t w = 0; w < s->n_work; w++) {
        const struct place_work *wk = &s->work[w];
        double t = 0, load_s;
        for (size_t k = 0; k < wk->n; k++)
            t += a->slot[wk->models[k]].request_s;
        a->loads[w] = work_loads(s, a, wk, &load_s);
        a->work_s[w] = t + load_s;
        sum += a->work_s[w];
    }
    a->score = s->n_work ? sum / (double)s->n_work : 0;
}

static void describe(const struct search *s, struct place_arrangement *a) {
    size_t o = 0;
    a->label[0] = '\0';
    for (size_t i = 0; i < s->n && o < sizeof a->label; i++) {
        const struct place_slot *sl = &a->slot[i];
        char dev[16];
        place_device_name(sl->device, dev, sizeof dev);
        int all = all_layers(&s->m[i]);
        char extra[48] = "";
        if (sl->device != PLACE_CPU && sl->ngl < all)
            snprintf(extra, sizeof extra, " %d/%d layers", sl->ngl, all);
        o += (size_t)snprintf(a->label + o, sizeof a->label - o, "%s%s %s%s%s", i ? ", " : "",
                              s->m[i].name, dev, extra, sl->rotates ? " (rotates)" : "");
    }
}

/* Totals and whether they fit; sets a->fits and, when not, a->reason. */
static void check_memory(const struct search *s, struct place_arrangement *a) {
    uint64_t host = 0;
    a->fits = true;
    for (uint32_t g = 0; g < s->b->n_gpus; g++) {
        uint64_t fixed = 0, top = 0, top_host = 0;
        for (size_t i = 0; i < s->n; i++) {
            const struct place_slot *sl = &a->slot[i];
            if (sl->device != (int32_t)g)
                continue;
            if (sl->rotates) {
                top = gpu_bytes(&sl->footprint) > top ? gpu_bytes(&sl->footprint) : top;
                top_host = host_bytes(&sl->footprint) > top_host ? host_bytes(&sl->footprint)
                                                                 : top_host;
            } else {
                fixed += gpu_bytes(&sl->footprint);
                host += host_bytes(&sl->footprint);
            }
        }
        a->gpu_need[g] = fixed + top;
        host += top_host;
        if (a->fits && a->gpu_need[g] > s->b->gpu_bytes[g]) {
            char need[32], have[32];
            a->fits = false;
            snprintf(a->reason, sizeof a->reason, "does not fit: gpu:%u needs %s of %s", g,
                     units_format_bytes(a->gpu_need[g], need, sizeof need),
                     units_format_bytes(s->b->gpu_bytes[g], have, sizeof have));
        }
    }
    uint64_t top = 0;
    for (size_t i = 0; i < s->n; i++) {
        const struct place_slot *sl = &a->slot[i];
        if (sl->device == PLACE_CPU && sl->rotates)
            top = host_bytes(&sl->footprint) > top ? host_bytes(&sl->footprint) : top;
        else if (sl->device == PLACE_CPU)
            host += host_bytes(&sl->footprint);
    }
    host += top;
    a->host_need = host;
    if (a->fits && host > s->b->host_bytes) {
        char need[32], have[32];
        a->fits = false;
        snprintf(a->reason, sizeof a->reason, "does not fit: host RAM needs %s of %s",
                 units_format_bytes(host, need, sizeof need),
                 units_format_bytes(s->b->host_bytes, have, sizeof have));
    }
}

static size_t count_rotating(const struct place_arrangement *a, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += a->slot[i].rotates;
    return k;
}

/* Whether a is better than b: fits, lower score, then fewer rotating models,
 * then fewer on the CPU. */
static bool better(const struct place_arrangement *a, const struct place_arrangement *b, size_t n) {
    if (a->fits != b->fits)
        return a->fits;
    if (a->score < b->score * (1 - 1e-9))
        return true;
    if (b->score < a->score * (1 - 1e-9))
        return false;
    size_t ra = count_rotating(a, n), rb = count_rotating(b, n);
    if (ra != rb)
        return ra < rb;
    size_t ca = 0, cb = 0;
    for (size_t i = 0; i < n; i++)
        ca += a->slot[i].device == PLACE_CPU, cb += b->slot[i].device == PLACE_CPU;
    return ca < cb;
}

static void insert_alt(struct place_result *r, const struct place_arrangement *a, size_t n) {
    size_t at = r->n_alts;
    while (at > 0 && better(a, &r->alts[at - 1], n))
        at--;
    if (at >= PLACE_MAX_ALTS)
        return;
    size_t keep = r->n_alts < PLACE_MAX_ALTS ? r->n_alts : PLACE_MAX_ALTS - 1;
    memmove(&r->alts[at + 1], &r->alts[at], (keep - at) * sizeof *r->alts);
    r->alts[at] = *a;
    if (r->n_alts < PLACE_MAX_ALTS)
        r->n_alts++;
}

static void consider(struct search *s, struct place_arrangement *a) {
    struct place_result *r = s->out;
    r->n_considered++;
    describe(s, a);
    check_memory(s, a);
    score(s, a);
    if (!s->have_best) {
        r->best = *a;
        s->have_best = true;
    } else if (better(a, &r->best, s->n)) {
        insert_alt(r, &r->best, s->n);
        r->best = *a;
    } else {
        insert_alt(r, a, s->n);
    }
}

/* --- variants per GPU ----------------------------------------------------------------------- */

/* How GPU g holds its models: together, in rotation, or with model `share`
 * cut to the layers that fit beside the others. */
enum variant { V_TOGETHER, V_ROTATE, V_SHARE };

static size_t members(const struct search *s, int32_t g, size_t *idx) {
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->device[i] == g)
            idx[k++] = i;
    return k;
}

/* Fills a's slots on GPU g for variant v (share: model index share). Returns
 * false when the variant cannot exist (nothing to cut, or no layer fits). */
static bool apply_variant(struct search *s, struct place_arrangement *a, int32_t g, enum variant v,
                          size_t share) {
    size_t idx[PLACE_MAX_MODELS];
    size_t k = members(s, g, idx);
    uint64_t cap = s->b->gpu_bytes[g], sum = 0, pinned = 0;
    for (size_t j = 0; j < k; j++) {
        sum += gpu_bytes(&s->full[idx[j]]);
        pinned += s->m[idx[j]].pinned ? gpu_bytes(&s->full[idx[j]]) : 0;
    }
    for (size_t j = 0; j < k; j++) {
        size_t i = idx[j];
        const struct place_model *m = &s->m[i];
        int32_t ngl = auto_ngl(m) ? all_layers(m) : m->settings.ngl;
        struct plan_footprint f = s->full[i];
        bool rotates = false;
        if (v == V_ROTATE && !m->pinned) {
            rotates = true;
            if (pinned + gpu_bytes(&f) > cap) { /* too big alone: its most layers */
                if (!auto_ngl(m) || !(ngl = max_ngl(s, i, cap > pinned ? cap - pinned : 0, &f)))
                    return false;
            }
        } else if (v == V_SHARE && i == share) {
            uint64_t others = sum - gpu_bytes(&f);
            if (m->pinned || !auto_ngl(m) || others >= cap ||
                !(ngl = max_ngl(s, i, cap - others, &f)) || ngl >= all_layers(m))
                return false;
        }
        set_slot(s, a, i, g, ngl, &f, rotates);
    }
    return v != V_ROTATE || k >= 2;
}

/* The CPU's models rotate too when host RAM cannot hold them together:
 * considers a as it is and, when it does not fit and two or more
 * non-pinned models sit on the CPU, with those rotating. */
static void explore_cpu(struct search *s, struct place_arrangement *a) {
    consider(s, a);
    if (a->fits)
        return;
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++)
        if (a->slot[i].device == PLACE_CPU && !s->m[i].pinned)
            a->slot[i].rotates = true, k++;
    if (k >= 2)
        consider(s, a);
    for (size_t i = 0; i < s->n; i++)
        if (a->slot[i].device == PLACE_CPU)
            a->slot[i].rotates = false;
}

/* Explores every variant of GPUs g.. for the current assignment. */
static void explore_gpus(struct search *s, struct place_arrangement *a, uint32_t g) {
    if (s->out->n_considered >= MAX_CONSIDERED || s->err != TANDEM_OK)
        return;
    if (g == s->b->n_gpus) {
        explore_cpu(s, a);
        return;
    }
    size_t idx[PLACE_MAX_MODELS];
    size_t k = members(s, (int32_t)g, idx);
    uint64_t sum = 0;
    for (size_t j = 0; j < k; j++)
        sum += gpu_bytes(&s->full[idx[j]]);
    if (sum <= s->b->gpu_bytes[g]) { /* together: no other variant can be faster */
        apply_variant(s, a, (int32_t)g, V_TOGETHER, 0);
        explore_gpus(s, a, g + 1);
        return;
    }
    bool any = false;
    if (apply_variant(s, a, (int32_t)g, V_ROTATE, 0))
        any = true, explore_gpus(s, a, g + 1);
    for (size_t j = 0; j < k; j++)
        if (apply_variant(s, a, (int32_t)g, V_SHARE, idx[j]))
            any = true, explore_gpus(s, a, g + 1);
    if (!any || k == 1) { /* as asked, although it does not fit: say so */
        apply_variant(s, a, (int32_t)g, V_TOGETHER, 0);
        explore_gpus(s, a, g + 1);
    }
}

static bool allowed(const struct search *s, size_t i, int32_t dev) {
    const struct place_model *m = &s->m[i];
    switch (m->want) {
    case PLACE_WANT_CPU: return dev == PLACE_CPU;
    case PLACE_WANT_GPU: return dev != PLACE_CPU && (m->gpu == PLACE_ANY_GPU || m->gpu == dev);
    case PLACE_WANT_AUTO: return true;
    }
    return false;
}

/* Explores every device for models i.. */
static void assign(struct search *s, size_t i) {
    if (i == s->n) {
        struct place_arrangement a;
        memset(&a, 0, sizeof a);
        for (size_t k = 0; k < s->n; k++)
            if (s->device[k] == PLACE_CPU)
                set_slot(s, &a, k, PLACE_CPU, 0, &s->cpu[k], false);
        explore_gpus(s, &a, 0);
        return;
    }
    for (int32_t dev = PLACE_CPU; dev < (int32_t)s->b->n_gpus; dev++)
        if (allowed(s, i, dev)) {
            s->device[i] = dev;
            assign(s, i + 1);
        }
}

/* --- reasons ----------------------------------------------------------------------------------- */

static void best_reason(const struct search *s, struct place_arrangement *a) {
    size_t rot = count_rotating(a, s->n);
    const char *kind = rot ? "models rotate" : "no model rotates";
    double loads = 0;
    for (size_t w = 0; w < s->n_work; w++)
        loads += a->loads[w];
    snprintf(a->reason, sizeof a->reason,
             "lowest expected latency: %.3f s per request on average, %.2f loads per request "
             "(%s)%s",
             a->score, s->n_work ? loads / (double)s->n_work : 0, kind,
             s->out->n_considered >= MAX_CONSIDERED
                 ? "; the search stopped at its limit of arrangements"
                 : "");
}

static void alt_reason(const struct search *s, const struct place_arrangement *best,
                       struct place_arrangement *a) {
    if (!a->fits)
        return; /* check_memory said why */
    double loads = 0;
    for (size_t w = 0; w < s->n_work; w++)
        loads += a->loads[w];
    snprintf(a->reason, sizeof a->reason,
             "slower: %.3f s per request on average (%+.3f s), %.2f loads per request", a->score,
             a->score - best->score, s->n_work ? loads / (double)s->n_work : 0);
}

/* The default work: each model's requests alone. */
static size_t default_work(size_t n, struct place_work *w, const struct place_model *m) {
    for (size_t i = 0; i < n; i++)
        w[i] = (struct place_work){.name = m[i].name, .models = {i}, .n = 1};
    return n;
}

tandem_err place_choose(const struct place_model *models, size_t n, const struct place_work *work,
                        size_t n_work, const struct place_budget *b, const struct place_params *p,
                        fit_footprint_fn fn, void *user, struct place_result *out) {
    if (n == 0 || n > PLACE_MAX_MODELS || n_work > PLACE_MAX_WORK || b->n_gpus > PLACE_MAX_GPUS)
        return TANDEM_ERR_INVAL;
    for (size_t w = 0; w < n_work; w++)
        for (size_t k = 0; k < work[w].n; k++)
            if (work[w].n > PLACE_MAX_STAGES || work[w].models[k] >= n)
                return TANDEM_ERR_INVAL;
    struct place_work own[PLACE_MAX_MODELS];
    if (!n_work)
        n_work = default_work(n, own, models), work = own;
    struct search *s = mem_calloc(1, sizeof *s);
    if (!s)
        return TANDEM_ERR_NOMEM;
    *s = (struct search){.m = models, .n = n, .work = work, .n_work = n_work, .b = b, .p = *p,
                         .fn = fn, .user = user, .out = out};
    if (!s->p.tokens)
        s->p.tokens = 1;
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < n && s->err == TANDEM_OK; i++) {
        const struct place_model *m = &models[i];
        footprint(s, i, true, auto_ngl(m) ? all_layers(m) : m->settings.ngl, &s->full[i]);
        footprint(s, i, false, 0, &s->cpu[i]);
    }
    if (s->err == TANDEM_OK)
        assign(s, 0);
    if (s->err == TANDEM_OK && !s->have_best)
        snprintf(out->best.reason, sizeof out->best.reason,
                 "does not fit: a model's device names no GPU of the budget");
    tandem_err e = s->err;
    if (e == TANDEM_OK && out->best.fits) {
        best_reason(s, &out->best);
        for (size_t k = 0; k < out->n_alts; k++)
            alt_reason(s, &out->best, &out->alts[k]);
    }
    mem_free(s);
    return e;
}
