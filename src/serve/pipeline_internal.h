/* pipeline_internal.h: what pipeline.c, pipeline_set.c and pipeline_systemone.c share.
 * INTERNAL: no other module includes it; serve/pipeline.h is the pipeline's interface.
 *
 * Pipelines are one module in three files, cut along its seams:
 *   pipeline_set.c        a config's pipelines compiled once into stages of templates
 *                         (pipeline_set_new), found by name, listed for GET /v1/pipelines;
 *   pipeline.c            runs: the request contract, one stage at a time through the
 *                         scheduler (or the remote set), the verdict and escalation;
 *   pipeline_systemone.c  the same pipelines on POST /v1/systemone: the request and the
 *                         answer translated, with no state of their own.
 * A set is read-only once pipeline_set_new returns it: runs borrow it, its compiled
 * stages and its config, and never change them. */
#ifndef TANDEM_PIPELINE_INTERNAL_H
#define TANDEM_PIPELINE_INTERNAL_H

#include <stddef.h>

#include "base/err.h"
#include "serve/config.h"
#include "serve/pipeline.h"
#include "serve/tmpl.h"

/* --- pipeline_set.c: the compiled pipelines --------------------------------------------- */

/* A configured question with its templates compiled. */
struct cquestion {
    const struct config_question *q;
    struct tmpl *instructions;
    struct tmpl **criteria;              /* q->n_criteria */
    const struct config_threshold *threshold; /* NULL = informative */
};

/* One stage: the model that answers it and its configured questions. */
struct cstage {
    size_t model;                        /* config index */
    struct cquestion *qs;
    size_t n;
};

/* One pipeline of the config, compiled. */
struct cpipeline {
    const struct config_pipeline *pl;
    struct tmpl *instructions;           /* the default decide instructions, or NULL */
    struct cstage decide;
    struct cstage *verify;
    size_t escalate_model;               /* config index, or SIZE_MAX */
};

struct pipeline_set {
    const struct config *cfg;            /* borrowed: outlives the set */
    const struct pipeline_model *models; /* borrowed: models[cfg->n_models] */
    struct cpipeline *p;                 /* cfg->pipelines compiled, in config order */
    size_t n;
};

/* The compiled pipeline of s named name, or NULL. The pointer is borrowed from s and
 * valid while s is. */
const struct cpipeline *pipeline_set_find(const struct pipeline_set *s, const char *name);

/* Writes th as the listing and the verdict show it ("== <option>", or "<op> <value>")
 * into buf[cap] (caller-owned output, cut to fit) and returns buf. */
char *pipeline_threshold_text(const struct config_threshold *th, char *buf, size_t cap);

/* --- pipeline.c: the request contract ----------------------------------------------------- */

/* Refuses a request for field: err[errlen] gets "<field>: <fmt...>", param[paramlen]
 * (optional output; NULL or 0 = none) the field. Returns TANDEM_ERR_FORMAT. */
__attribute__((format(printf, 6, 7))) tandem_err pipeline_bad_request(
    char *err, size_t errlen, char *param, size_t paramlen, const char *field, const char *fmt,
    ...);

#endif
