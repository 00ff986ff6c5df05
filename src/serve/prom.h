/* prom.h: a small Prometheus metrics registry rendered in the text format
 * (version 0.0.4). Counters, gauges and histograms, each with up to 4 label
 * names; series are created on first use. Single-threaded: serve's event
 * loop is its only user. */
#ifndef TANDEM_PROM_H
#define TANDEM_PROM_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/mem.h"

struct prom;        /* opaque registry */
struct prom_metric; /* owned by the registry */

enum prom_kind { PROM_COUNTER, PROM_GAUGE, PROM_HISTOGRAM };

/* Returns a new empty registry (caller frees with prom_free), NULL on OOM. */
struct prom *prom_new(void);
/* Releases the registry and every metric. prom_free(NULL) is a no-op. */
void prom_free(struct prom *p);

/* Registers a metric. name must match [a-zA-Z_:][a-zA-Z0-9_:]* (and must not
 * repeat); help is one line; labels is a NULL-terminated list of up to 4
 * label names (NULL = none). For PROM_HISTOGRAM, bounds[n_bounds] are the
 * ascending upper bounds (seconds, for latency); +Inf is implicit. Strings
 * are copied. Returns the metric (owned by p) or NULL on a bad name, too many
 * labels, unsorted bounds or OOM. */
struct prom_metric *prom_register(struct prom *p, enum prom_kind kind, const char *name,
                                  const char *help, const char *const *labels,
                                  const double *bounds, size_t n_bounds);

/* Adds v (counter: v >= 0) to the series with label values values[] (as many
 * as the metric has labels; NULL when none; copied, escaped on output).
 * Returns TANDEM_ERR_INVAL for a negative counter increment or a wrong value
 * count, TANDEM_ERR_NOMEM. */
tandem_err prom_add(struct prom_metric *m, const char *const *values, double v);
/* Sets a gauge series. Returns TANDEM_ERR_TYPE on a non-gauge. */
tandem_err prom_set(struct prom_metric *m, const char *const *values, double v);
/* Records one observation into a histogram series (bucket counts, _sum, _count). */
tandem_err prom_observe(struct prom_metric *m, const char *const *values, double v);

/* Appends the whole registry in the text exposition format to out (metrics
 * in registration order, series in creation order; label values escaped:
 * backslash, double quote, newline). Returns mem_buf_append's errors. */
tandem_err prom_render(const struct prom *p, struct mem_buf *out);

#endif
