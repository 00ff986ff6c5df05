/* verdict.c: the one verdict of a plan.
 *
 * fit.c answers whether models are co-resident on one device at their
 * requested settings; place.c chooses where each model runs by expected
 * latency, which may put a model on the CPU or cut its layers so that
 * nothing rotates. A plan states one answer: the verdict is read off the
 * arrangement the placement chose, in fit's words, so that the first line
 * of `tandem plan` and the placement below it agree:
 *   no fit > rotate (a model loads in turn) > partial (a model has fewer
 *   layers on a GPU than it asks, or runs on the CPU against `auto`) >
 *   co-resident.
 * Where fit already said the same about the same arrangement, its reason
 * and alternative stand; otherwise the reason names what the placement does
 * and the alternative is the placement's runner-up. Pure: no I/O. */
#include "plan/verdict.h"

#include <stdio.h>
#include <string.h>

#include "base/utf8.h"

static int32_t all_layers(const struct place_model *m) {
    return (int32_t)plan_model_n_layer(m->model) + 1;
}

static int32_t asked_layers(const struct place_model *m) {
    return m->settings.ngl == PLAN_NGL_AUTO ? all_layers(m) : m->settings.ngl;
}

/* Whether slot sl of model m gives up GPU layers that m asks for. */
static bool short_of_gpu(const struct place_model *m, const struct place_budget *b,
                         const struct place_slot *sl) {
    if (!b->n_gpus)
        return false;
    return sl->device == PLACE_CPU ? m->want != PLACE_WANT_CPU : sl->ngl < asked_layers(m);
}

enum fit_verdict verdict_of_arrangement(const struct place_model *models, size_t n,
                                        const struct place_budget *b,
                                        const struct place_arrangement *a) {
    if (!a->fits)
        return FIT_NO_FIT;
    bool partial = false;
    for (size_t i = 0; i < n; i++) {
        if (a->slot[i].rotates)
            return FIT_ROTATE;
        partial |= short_of_gpu(&models[i], b, &a->slot[i]);
    }
    return partial ? FIT_PARTIAL : FIT_CO_RESIDENT;
}

/* fit's result for the model that models[j] names; NULL when none does. */
static const struct fit_model_result *fit_of(const struct fit_model *fm,
                                             const struct fit_model_result *fr, size_t n,
                                             const struct place_model *m) {
    for (size_t i = 0; i < n; i++)
        if (fm[i].model == m->model)
            return &fr[i];
    return NULL;
}

/* Whether every model sits where fit assumed it: on the budget's device, at
 * fit's layer count. */
static bool as_fit_assumed(const struct fit_model *fm, const struct fit_model_result *fr,
                           size_t n, const struct place_model *models,
                           const struct place_budget *b, const struct place_arrangement *a) {
    for (size_t j = 0; j < n; j++) {
        const struct fit_model_result *r = fit_of(fm, fr, n, &models[j]);
        const struct place_slot *sl = &a->slot[j];
        if (!r || (b->n_gpus && (sl->device == PLACE_CPU || sl->ngl != r->ngl)))
            return false;
    }
    return true;
}

/* Appends what arrangement a does with model m in slot sl, if anything
 * beyond being resident with every layer it asks for, to out[cap] at *o. */
static void describe_slot(const struct place_model *m, const struct place_budget *b,
                          const struct place_slot *sl, char *out, size_t cap, size_t *o) {
    char dev[16], what[320];
    int32_t all = all_layers(m);
    place_device_name(sl->device, dev, sizeof dev);
    if (sl->rotates && sl->device == PLACE_CPU)
        snprintf(what, sizeof what, "%s rotates in host RAM", m->name);
    else if (sl->rotates)
        snprintf(what, sizeof what, "%s rotates on %s%s", m->name, dev,
                 sl->ngl < all ? " with some layers on the host" : "");
    else if (sl->device == PLACE_CPU && b->n_gpus)
        snprintf(what, sizeof what, "%s runs on the CPU%s", m->name,
                 m->want == PLACE_WANT_CPU ? " (as asked)" : "");
    else if (sl->device != PLACE_CPU && sl->ngl < all)
        snprintf(what, sizeof what, "%s keeps %d of %d layers on %s (slowdown: %s)", m->name,
                 sl->ngl, all, dev, fit_slowdown_name(fit_slowdown_of(sl->ngl, all)));
    else
        return;
    if (*o < cap)
        *o += (size_t)snprintf(out + *o, cap - *o, "%s%s", *o ? ", " : "", what);
}

/* Appends s to the string in out[cap], as much of it as fits. */
static void append(char *out, size_t cap, const char *s) {
    size_t len = strlen(out), add = strlen(s);
    if (add >= cap - len)
        add = cap - len - 1;
    memcpy(out + len, s, add);
    out[len + add] = '\0';
}

static void describe_best(const struct place_model *models, size_t n,
                          const struct place_budget *b, const struct place_arrangement *a,
                          enum fit_verdict v, const char *fit_reason, char *out, size_t cap) {
    size_t o = 0;
    out[0] = '\0';
    if (v == FIT_NO_FIT)
        o = (size_t)snprintf(out, cap, "%s", a->reason);
    else
        for (size_t i = 0; i < n; i++)
            describe_slot(&models[i], b, &a->slot[i], out, cap, &o);
    if (!o)
        o = (size_t)snprintf(out, cap, "%s", a->label);
    const char *tail = v == FIT_PARTIAL       ? ", so that nothing rotates"
                       : v == FIT_CO_RESIDENT ? ", and every model stays resident"
                                              : "";
    append(out, cap, tail);
    append(out, cap, "; ");
    append(out, cap, fit_reason);
    tandem_utf8_trim(out, strlen(out));
}

void verdict_settle(const struct fit_model *fm, const struct fit_model_result *fr, size_t n,
                    const struct place_model *models, const struct place_budget *b,
                    const struct place_result *placed, struct fit_result *res) {
    const struct place_arrangement *best = &placed->best;
    enum fit_verdict v = verdict_of_arrangement(models, n, b, best);
    if (v == res->verdict && as_fit_assumed(fm, fr, n, models, b, best))
        return;
    char reason[sizeof res->reason];
    describe_best(models, n, b, best, v, res->reason, reason, sizeof reason);
    memcpy(res->reason, reason, sizeof reason);
    res->verdict = v;
    res->alternative[0] = '\0';
    for (size_t k = 0; k < placed->n_alts; k++)
        if (placed->alts[k].fits) {
            snprintf(res->alternative, sizeof res->alternative, "%s: %s", placed->alts[k].label,
                     placed->alts[k].reason);
            tandem_utf8_trim(res->alternative, strlen(res->alternative));
            break;
        }
}
