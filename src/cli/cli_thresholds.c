/* cli_thresholds.c: `tandem eval --suggest-thresholds`, its flags, config and output.
 *
 * The thresholds themselves are eval/thresholds.c's. What is here is what
 * ties them to a pipeline of tandem.yaml: the flags' combinations, the check
 * that every noul question of the dataset is one of the pipeline's verify
 * noul questions, which of them accept from below (a "<=" or "<" threshold in
 * the config), the table lines, the pipeline's YAML lines, and --apply, which
 * rewrites the config in place through config_edit after saving it as .bak
 * and only when the rewritten file still loads. */
#include "cli/cli_thresholds.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/host.h"
#include "base/mem.h"
#include "eval/thresholds.h"
#include "serve/config.h"
#include "serve/config_edit.h"

#define THRESHOLDS_LINE "      thresholds:\n" /* in the snippet, under pipelines.P.verdict */

int cli_thresholds_check_args(struct cli_thresholds *th, const char *config) {
    if (config && th->apply && strcmp(config, th->apply)) {
        fprintf(stderr, "tandem eval: --config %s and --apply %s name different files\n",
                config, th->apply);
        return 2;
    }
    th->config = config ? config : th->apply;
    if (th->apply && !th->pipeline) {
        fprintf(stderr, "tandem eval: --apply %s needs --write-thresholds PIPELINE\n", th->apply);
        return 2;
    }
    if (th->pipeline && !th->config) {
        fprintf(stderr, "tandem eval: --write-thresholds %s needs the config that declares it: "
                        "--config F or --apply F\n", th->pipeline);
        return 2;
    }
    th->suggest |= th->pipeline != NULL;
    return 0;
}

void cli_thresholds_deinit(struct cli_thresholds *th) {
    config_free(th->cfg);
    th->cfg = NULL;
}

/* "consistent, on_topic": the verify noul questions of pl. */
static void verify_names(const struct config_pipeline *pl, char *out, size_t cap) {
    size_t len = 0;
    out[0] = '\0';
    for (size_t s = 0; s < pl->n_verify; s++)
        for (size_t q = 0; q < pl->verify[s].n_questions && len < cap; q++)
            if (pl->verify[s].questions[q].type == S1Q_TYPE_NOUL)
                len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? ", " : "",
                                        pl->verify[s].questions[q].id);
}

/* Checks that question q of the dataset belongs to pipeline pl as a noul
 * verify question. Returns 0, or 1 with err. */
static int check_question(const struct config_pipeline *pl, const struct evalset *set,
                          const struct evalset_case *c, const struct evalset_question *q,
                          char *err, size_t errlen) {
    const struct config_question *cq = config_find_verify_question(pl, q->id);
    if (cq && cq->type == S1Q_TYPE_NOUL)
        return 0;
    char names[512];
    verify_names(pl, names, sizeof names);
    if (cq)
        tandem_errmsg(err, errlen, "%s:%zu: question %s is a %s question of pipeline %s; "
                      "thresholds are suggested for its noul questions (%s)", set->path, c->line,
                      q->id, cq->type == S1Q_TYPE_CHOICE ? "choice" : "score", pl->name, names);
    else
        tandem_errmsg(err, errlen, "%s:%zu: question %s is not a verify question of pipeline "
                      "%s (its noul verify questions: %s)", set->path, c->line, q->id, pl->name,
                      names);
    return 1;
}

/* Checks that every noul question of set with a gold answer is a noul
 * verify question of pl. Returns 0, or 1 with err. */
static int check_questions(const struct config_pipeline *pl, const struct evalset *set,
                           char *err, size_t errlen) {
    for (size_t c = 0; c < set->n_cases; c++)
        for (size_t i = 0; i < set->cases[c].n_questions; i++) {
            const struct evalset_question *q = &set->cases[c].q[i];
            if (q->has_gold && q->type == S1Q_TYPE_NOUL &&
                check_question(pl, set, &set->cases[c], q, err, errlen))
                return 1;
        }
    return 0;
}

int cli_thresholds_check_set(const struct evalset *set, struct cli_thresholds *th, char *err,
                             size_t errlen) {
    if (th->pipeline) {
        if (config_load(th->config, &th->cfg, err, errlen) != TANDEM_OK)
            return 1;
        const struct config_pipeline *pl = config_find_pipeline(th->cfg, th->pipeline);
        if (!pl) {
            tandem_errmsg(err, errlen, "--write-thresholds %s: %s has no pipeline of that name",
                          th->pipeline, th->config);
            return 1;
        }
        if (check_questions(pl, set, err, errlen))
            return 1;
    }
    return thresholds_check_set(set, th->target_precision, err, errlen) != TANDEM_OK;
}

/* The pipeline's YAML lines, or NULL when some group has no threshold. New
 * string, caller frees with mem_free(). */
static char *yaml_snippet(const json_t *groups, const struct cli_thresholds *th,
                          const char *data) {
    struct mem_buf b;
    mem_buf_init(&b, 1u << 20);
    char line[512];
    int n = snprintf(line, sizeof line, "# tandem eval --suggest-thresholds: precision >= %.4g "
                     "on %s\npipelines:\n  %s:\n    verdict:\n", th->target_precision, data,
                     th->pipeline);
    mem_buf_append(&b, line, (size_t)n);
    size_t i;
    const json_t *g;
    bool header = false;
    json_array_foreach(groups, i, g) {
        const char *q = json_string_value(json_object_get(g, "question"));
        if (strcmp(json_string_value(json_object_get(g, "status")), "ok")) {
            mem_buf_deinit(&b);
            return NULL;
        }
        const char *value = json_string_value(json_object_get(g, "value"));
        double prec = json_number_value(json_object_get(g, "precision"));
        double cov = json_number_value(json_object_get(g, "coverage"));
        if (q && !header)
            mem_buf_append(&b, THRESHOLDS_LINE, strlen(THRESHOLDS_LINE));
        header |= q != NULL;
        n = q ? snprintf(line, sizeof line, "        %s: \"%s\"  # precision %.3f, coverage "
                         "%.3f\n", q, value, prec, cov)
              : snprintf(line, sizeof line, "      min_confidence: %s  # precision %.3f, "
                         "coverage %.3f\n", value, prec, cov);
        mem_buf_append(&b, line, (size_t)n);
    }
    mem_buf_append(&b, "", 1);
    return b.data;
}

/* The verify questions of pl whose threshold accepts P(true) from below
 * ("<=" or "<"), borrowed from pl into ids (at least pl->n_thresholds long);
 * returns their count. */
static size_t below_ids(const struct config_pipeline *pl, const char **ids) {
    size_t n = 0;
    for (size_t i = 0; i < pl->n_thresholds; i++)
        if (pl->thresholds[i].op[0] == '<')
            ids[n++] = pl->thresholds[i].question;
    return n;
}

json_t *cli_thresholds_suggest(const struct eval_run *run, const struct cli_thresholds *th,
                               const struct summary_scoring *sc, char *err, size_t errlen) {
    const struct config_pipeline *pl = th->cfg ? config_find_pipeline(th->cfg, th->pipeline)
                                               : NULL;
    struct thresholds_params p = {.target_precision = th->target_precision,
                                  .bootstrap = sc->bootstrap, .seed = sc->seed};
    const char **below = NULL;
    if (pl && pl->n_thresholds) {
        if (!(below = mem_alloc_array(pl->n_thresholds, sizeof *below))) {
            tandem_errmsg(err, errlen, "out of memory");
            return NULL;
        }
        p.below = below;
        p.n_below = below_ids(pl, below);
    }
    json_t *out = thresholds_suggest(run, &p, err, errlen);
    mem_free(below);
    if (out && th->pipeline) {
        char *yaml = yaml_snippet(json_object_get(out, "questions"), th, run->set->path);
        json_object_set_new(out, "pipeline", json_string(th->pipeline));
        json_object_set_new(out, "yaml", yaml ? json_string(yaml) : json_null());
        mem_free(yaml);
    }
    return out;
}

/* --- the output ------------------------------------------------------------------------- */

static void print_interval(const json_t *iv) {
    const json_t *lo = json_array_get(iv, 0), *hi = json_array_get(iv, 1);
    if (!json_is_array(iv))
        return;
    printf("  [");
    json_is_number(lo) ? printf("%.4f", json_number_value(lo)) : printf("none");
    printf(", ");
    json_is_number(hi) ? printf("%.4f", json_number_value(hi)) : printf("none");
    printf("]");
}

void cli_thresholds_print(const json_t *t) {
    if (!t)
        return;
    printf("\nthresholds for a precision of %.4g (each needs >= %lld answers; 95%% interval of "
           "the threshold from %lld resamples):\n",
           json_number_value(json_object_get(t, "target_precision")),
           (long long)json_integer_value(json_object_get(t, "min_answers")),
           (long long)json_integer_value(json_object_get(t, "resamples")));
    size_t i;
    const json_t *g;
    json_array_foreach(json_object_get(t, "questions"), i, g) {
        const char *q = json_string_value(json_object_get(g, "question"));
        printf("  %-22s %4lld answers: ", q ? q : "decide confidence",
               (long long)json_integer_value(json_object_get(g, "answers")));
        const json_t *best = json_object_get(g, "best");
        if (strcmp(json_string_value(json_object_get(g, "status")), "ok")) {
            printf("no threshold reaches it");
            if (json_is_object(best))
                printf(" (the best, %.3f, at %.4f with coverage %.3f)",
                       json_number_value(json_object_get(best, "precision")),
                       json_number_value(json_object_get(best, "threshold")),
                       json_number_value(json_object_get(best, "coverage")));
            printf("\n");
            continue;
        }
        printf("%s%s: precision %.3f, coverage %.3f (%lld accepted)", q ? "" : "min_confidence ",
               json_string_value(json_object_get(g, "value")),
               json_number_value(json_object_get(g, "precision")),
               json_number_value(json_object_get(g, "coverage")),
               (long long)json_integer_value(json_object_get(g, "accepted")));
        print_interval(json_object_get(g, "interval"));
        printf("\n");
    }
}

/* The config values of the groups, as config_edit takes them; texts in buf. */
static size_t edit_values(const json_t *groups, struct config_edit_value *v, char (*buf)[96],
                          size_t cap) {
    size_t i, n = 0;
    const json_t *g;
    json_array_foreach(groups, i, g) {
        if (n == cap)
            break;
        const char *q = json_string_value(json_object_get(g, "question"));
        const char *value = json_string_value(json_object_get(g, "value"));
        snprintf(buf[n], sizeof buf[n], q ? "\"%s\"" : "%s", value);
        v[n] = (struct config_edit_value){q ? "thresholds" : NULL,
                                          q ? q : THRESHOLDS_DECIDER_KEY, buf[n]};
        n++;
    }
    return n;
}

/* Rewrites th->apply with the groups' values, after saving it as .bak. */
static int apply(const json_t *groups, const struct cli_thresholds *th) {
    enum { MAX_VALUES = 256 };
    struct config_edit_value v[MAX_VALUES];
    static char texts[MAX_VALUES][96];
    char err[4096], bak[4096];
    struct mem_buf b;
    mem_buf_init(&b, 16u << 20);
    char *out = NULL;
    size_t len = 0, n = edit_values(groups, v, texts, MAX_VALUES);
    struct config *check = NULL;
    int rc = 1;
    if (mem_buf_append_file(&b, th->apply) != TANDEM_OK)
        fprintf(stderr, "tandem eval: --apply %s: cannot read: %s\n", th->apply, strerror(errno));
    else if (config_edit_verdict(th->apply, b.data, b.len, th->pipeline, v, n, &out, &len, err,
                                 sizeof err) != TANDEM_OK)
        fprintf(stderr, "tandem eval: --apply: %s\n", err);
    else if (config_load_buffer(th->apply, out, len, &check, err, sizeof err) != TANDEM_OK)
        fprintf(stderr, "tandem eval: --apply: the rewritten file would not load, so %s is "
                        "left as it was: %s\n", th->apply, err);
    else if (snprintf(bak, sizeof bak, "%s.bak", th->apply) >= (int)sizeof bak ||
             host_write_atomic(bak, b.data, b.len) != TANDEM_OK)
        fprintf(stderr, "tandem eval: --apply: cannot write %s: %s\n", bak, strerror(errno));
    else if (host_write_atomic(th->apply, out, len) != TANDEM_OK)
        fprintf(stderr, "tandem eval: --apply: cannot write %s: %s\n", th->apply,
                strerror(errno));
    else
        rc = 0;
    if (!rc)
        fprintf(stderr, "tandem eval: applied %zu value%s to pipeline %s in %s (the old file "
                        "is %s)\n", n, n == 1 ? "" : "s", th->pipeline, th->apply, bak);
    config_free(check);
    mem_free(out);
    mem_buf_deinit(&b);
    return rc;
}

int cli_thresholds_write(const json_t *t, const struct cli_thresholds *th, bool as_json) {
    const json_t *groups = json_object_get(t, "questions");
    const char *yaml = json_string_value(json_object_get(t, "yaml"));
    if (!yaml) {
        size_t i;
        const json_t *g;
        json_array_foreach(groups, i, g)
            if (strcmp(json_string_value(json_object_get(g, "status")), "ok")) {
                const char *q = json_string_value(json_object_get(g, "question"));
                fprintf(stderr, "tandem eval: --write-thresholds %s: %s: no threshold reaches "
                        "a precision of %.4g on this data; nothing written (lower "
                        "--target-precision, or add cases)\n", th->pipeline,
                        q ? q : THRESHOLDS_DECIDER_KEY, th->target_precision);
                break;
            }
        return 1;
    }
    if (!as_json)
        printf("\n%s", yaml);
    return th->apply ? apply(groups, th) : 0;
}
