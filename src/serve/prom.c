/* prom.c: a small Prometheus registry and its text exposition (format 0.0.4).
 *
 * The registry is an array of metrics in registration order; each metric
 * holds an array of series in creation order, found by a linear scan of the
 * label values (serve has a few hundred series at most, and a scan over a
 * contiguous array beats hashing at that size). A series is created on its
 * first prom_add/prom_set/prom_observe, fully built before it is linked in,
 * so an allocation failure leaves the registry exactly as it was.
 *
 * Histograms keep one count per bucket (bounds ascending, then +Inf) and
 * render them cumulatively, as the format requires, with _sum and _count.
 *
 * Numbers: a value that is integral and below 2^53 in magnitude is written
 * without a decimal point ("3", "-2"); any other finite value in the shortest
 * of %.15g/%.16g/%.17g that reads back to the same double (so 0.005 stays
 * "0.005", and every value round-trips); non-finite values as "+Inf", "-Inf"
 * and "NaN". Histogram bounds in le="..." use the same rule. %g follows
 * LC_NUMERIC; tandem never calls setlocale, so that is "C".
 *
 * Label values are passed as arrays of exactly as many strings as the metric
 * has label names (a NULL-terminated array works too). Too few values (a NULL
 * pointer or a NULL entry among them) is TANDEM_ERR_INVAL; an extra value
 * cannot be detected without reading past an exact-size array, so it is not.
 *
 * Invariants: names are validated at registration (metric names
 * [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* not starting
 * with "__", no duplicates, no "le" on a histogram); a metric holds at most
 * PROM_MAX_SERIES series, so a caller feeding untrusted strings into label
 * values cannot grow memory without bound (the excess is TANDEM_ERR_TOOBIG).
 * Not thread-safe: serve's event loop is the only user. */
#include "serve/prom.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROM_MAX_LABELS 4
#define PROM_MAX_SERIES 4096
#define PROM_MAX_METRICS 1024

struct series {
    char *values[PROM_MAX_LABELS];
    double value;       /* counter or gauge */
    uint64_t *buckets;  /* histogram: n_bounds + 1 per-bucket counts, last = +Inf */
    double sum;         /* histogram */
    uint64_t count;     /* histogram */
};

struct prom_metric {
    enum prom_kind kind;
    char *name;
    char *help;
    char *labels[PROM_MAX_LABELS];
    size_t n_labels;
    double *bounds;
    size_t n_bounds;
    struct series **series;
    size_t n_series, cap_series;
};

struct prom {
    struct prom_metric **metrics;
    size_t n, cap;
};

struct prom *prom_new(void) {
    return mem_calloc(1, sizeof(struct prom));
}

static void series_free(struct series *s) {
    if (!s)
        return;
    for (size_t i = 0; i < PROM_MAX_LABELS; i++)
        mem_free(s->values[i]);
    mem_free(s->buckets);
    mem_free(s);
}

static void metric_free(struct prom_metric *m) {
    if (!m)
        return;
    for (size_t i = 0; i < m->n_series; i++)
        series_free(m->series[i]);
    mem_free(m->series);
    for (size_t i = 0; i < PROM_MAX_LABELS; i++)
        mem_free(m->labels[i]);
    mem_free(m->bounds);
    mem_free(m->help);
    mem_free(m->name);
    mem_free(m);
}

void prom_free(struct prom *p) {
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        metric_free(p->metrics[i]);
    mem_free(p->metrics);
    mem_free(p);
}

static bool is_alpha_(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* colon: whether ':' is allowed (metric names yes, label names no). */
static bool valid_name(const char *s, bool colon) {
    if (!s || !*s || !(is_alpha_(*s) || (colon && *s == ':')))
        return false;
    for (s++; *s; s++)
        if (!(is_alpha_(*s) || is_digit(*s) || (colon && *s == ':')))
            return false;
    return true;
}

static bool valid_labels(enum prom_kind kind, const char *const *labels, size_t *n_out) {
    size_t n = 0;
    for (; labels && labels[n]; n++) {
        if (n == PROM_MAX_LABELS || !valid_name(labels[n], false) ||
            strncmp(labels[n], "__", 2) == 0 ||
            (kind == PROM_HISTOGRAM && strcmp(labels[n], "le") == 0))
            return false;
        for (size_t j = 0; j < n; j++)
            if (strcmp(labels[j], labels[n]) == 0)
                return false;
    }
    *n_out = n;
    return true;
}

static bool valid_bounds(const double *bounds, size_t n) {
    if (n && !bounds)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(bounds[i]) || (i && !(bounds[i] > bounds[i - 1])))
            return false;
    return true;
}

struct prom_metric *prom_register(struct prom *p, enum prom_kind kind, const char *name,
                                  const char *help, const char *const *labels,
                                  const double *bounds, size_t n_bounds) {
    size_t n_labels = 0;
    if (!p || (kind != PROM_COUNTER && kind != PROM_GAUGE && kind != PROM_HISTOGRAM) ||
        !valid_name(name, true) || !valid_labels(kind, labels, &n_labels))
        return NULL;
    if (kind != PROM_HISTOGRAM)
        n_bounds = 0; /* bounds mean nothing to counters and gauges */
    else if (!valid_bounds(bounds, n_bounds))
        return NULL;
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->metrics[i]->name, name) == 0)
            return NULL;
    if (p->n == p->cap &&
        mem_array_grow((void **)&p->metrics, &p->cap, p->n + 1, sizeof *p->metrics,
                       PROM_MAX_METRICS) != TANDEM_OK)
        return NULL;

    struct prom_metric *m = mem_calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->kind = kind;
    m->n_labels = n_labels;
    m->n_bounds = n_bounds;
    bool ok = (m->name = mem_strdup(name)) && (m->help = mem_strdup(help ? help : ""));
    for (size_t i = 0; ok && i < n_labels; i++)
        ok = (m->labels[i] = mem_strdup(labels[i])) != NULL;
    if (ok && n_bounds) {
        ok = (m->bounds = mem_alloc_array(n_bounds, sizeof *m->bounds)) != NULL;
        if (ok)
            memcpy(m->bounds, bounds, n_bounds * sizeof *bounds);
    }
    if (!ok) {
        metric_free(m);
        return NULL;
    }
    p->metrics[p->n++] = m;
    return m;
}

/* Checks that values[] supplies the metric's label values (see the top). */
static bool valid_values(const struct prom_metric *m, const char *const *values) {
    if (m->n_labels == 0)
        return !values || !values[0];
    if (!values)
        return false;
    for (size_t i = 0; i < m->n_labels; i++)
        if (!values[i])
            return false;
    return true;
}

/* Finds or creates the series for values (already validated) in *out. */
static tandem_err series_get(struct prom_metric *m, const char *const *values,
                             struct series **out) {
    for (size_t i = 0; i < m->n_series; i++) {
        struct series *s = m->series[i];
        size_t j = 0;
        while (j < m->n_labels && strcmp(s->values[j], values[j]) == 0)
            j++;
        if (j == m->n_labels) {
            *out = s;
            return TANDEM_OK;
        }
    }
    if (m->n_series == PROM_MAX_SERIES)
        return TANDEM_ERR_TOOBIG;
    if (m->n_series == m->cap_series) {
        tandem_err e = mem_array_grow((void **)&m->series, &m->cap_series, m->n_series + 1,
                                      sizeof *m->series, PROM_MAX_SERIES);
        if (e)
            return e;
    }
    struct series *s = mem_calloc(1, sizeof *s);
    bool ok = s != NULL;
    for (size_t j = 0; ok && j < m->n_labels; j++)
        ok = (s->values[j] = mem_strdup(values[j])) != NULL;
    if (ok && m->kind == PROM_HISTOGRAM)
        ok = (s->buckets = mem_calloc(m->n_bounds + 1, sizeof *s->buckets)) != NULL;
    if (!ok) {
        series_free(s);
        return TANDEM_ERR_NOMEM;
    }
    m->series[m->n_series++] = s;
    *out = s;
    return TANDEM_OK;
}

tandem_err prom_add(struct prom_metric *m, const char *const *values, double v) {
    if (!m || !valid_values(m, values))
        return TANDEM_ERR_INVAL;
    if (m->kind == PROM_HISTOGRAM)
        return TANDEM_ERR_TYPE;
    if (m->kind == PROM_COUNTER && !(v >= 0)) /* also refuses NaN */
        return TANDEM_ERR_INVAL;
    struct series *s;
    tandem_err e = series_get(m, values, &s);
    if (e == TANDEM_OK)
        s->value += v;
    return e;
}

tandem_err prom_set(struct prom_metric *m, const char *const *values, double v) {
    if (!m || !valid_values(m, values))
        return TANDEM_ERR_INVAL;
    if (m->kind != PROM_GAUGE)
        return TANDEM_ERR_TYPE;
    struct series *s;
    tandem_err e = series_get(m, values, &s);
    if (e == TANDEM_OK)
        s->value = v;
    return e;
}

tandem_err prom_observe(struct prom_metric *m, const char *const *values, double v) {
    if (!m || !valid_values(m, values))
        return TANDEM_ERR_INVAL;
    if (m->kind != PROM_HISTOGRAM)
        return TANDEM_ERR_TYPE;
    struct series *s;
    tandem_err e = series_get(m, values, &s);
    if (e)
        return e;
    size_t b = 0; /* NaN compares false everywhere and lands in +Inf, like client_golang */
    while (b < m->n_bounds && !(v <= m->bounds[b]))
        b++;
    s->buckets[b]++;
    s->sum += v;
    s->count++;
    return TANDEM_OK;
}

/* --- rendering ---------------------------------------------------------- */

/* Formats v into buf (at least 32 bytes) by the rule at the top. */
static void format_number(double v, char *buf, size_t len) {
    if (isnan(v)) {
        snprintf(buf, len, "NaN");
    } else if (isinf(v)) {
        snprintf(buf, len, v > 0 ? "+Inf" : "-Inf");
    } else if (fabs(v) < 9007199254740992.0 && v == (double)(int64_t)v) {
        snprintf(buf, len, "%" PRId64, (int64_t)v); /* and -0.0 prints as "0" */
    } else {
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(buf, len, "%.*g", prec, v);
            if (strtod(buf, NULL) == v)
                break;
        }
    }
}

static tandem_err put(struct mem_buf *out, const char *s) {
    return mem_buf_append(out, s, strlen(s));
}

/* Appends s with backslash and newline escaped, and double quote too when quote. */
static tandem_err put_escaped(struct mem_buf *out, const char *s, bool quote) {
    tandem_err e = TANDEM_OK;
    const char *run = s;
    for (; *s && !e; s++) {
        const char *esc = *s == '\\'            ? "\\\\"
                          : *s == '\n'          ? "\\n"
                          : quote && *s == '"' ? "\\\""
                                                : NULL;
        if (!esc)
            continue;
        e = mem_buf_append(out, run, (size_t)(s - run));
        if (!e)
            e = put(out, esc);
        run = s + 1;
    }
    return e ? e : put(out, run);
}

/* Appends `name[suffix]{labels[,le="le"]} ` (the braces only when there are labels). */
static tandem_err put_series_name(struct mem_buf *out, const struct prom_metric *m,
                                  const struct series *s, const char *suffix, const char *le) {
    tandem_err e = put(out, m->name);
    if (!e)
        e = put(out, suffix);
    if (!e && (m->n_labels || le))
        e = put(out, "{");
    for (size_t i = 0; !e && i < m->n_labels; i++) {
        if (i)
            e = put(out, ",");
        if (!e)
            e = put(out, m->labels[i]);
        if (!e)
            e = put(out, "=\"");
        if (!e)
            e = put_escaped(out, s->values[i], true);
        if (!e)
            e = put(out, "\"");
    }
    if (!e && le) {
        e = put(out, m->n_labels ? ",le=\"" : "le=\"");
        if (!e)
            e = put(out, le);
        if (!e)
            e = put(out, "\"");
    }
    if (!e && (m->n_labels || le))
        e = put(out, "}");
    return e ? e : put(out, " ");
}

static tandem_err put_line(struct mem_buf *out, const struct prom_metric *m,
                           const struct series *s, const char *suffix, const char *le,
                           const char *value) {
    tandem_err e = put_series_name(out, m, s, suffix, le);
    if (!e)
        e = put(out, value);
    return e ? e : put(out, "\n");
}

static tandem_err render_histogram(struct mem_buf *out, const struct prom_metric *m,
                                   const struct series *s) {
    char le[40], num[40];
    uint64_t cum = 0;
    tandem_err e = TANDEM_OK;
    for (size_t b = 0; !e && b <= m->n_bounds; b++) {
        cum += s->buckets[b];
        if (b < m->n_bounds)
            format_number(m->bounds[b], le, sizeof le);
        else
            snprintf(le, sizeof le, "+Inf");
        snprintf(num, sizeof num, "%" PRIu64, cum);
        e = put_line(out, m, s, "_bucket", le, num);
    }
    format_number(s->sum, num, sizeof num);
    if (!e)
        e = put_line(out, m, s, "_sum", NULL, num);
    snprintf(num, sizeof num, "%" PRIu64, s->count);
    return e ? e : put_line(out, m, s, "_count", NULL, num);
}

static const char *const KIND_NAMES[] = {"counter", "gauge", "histogram"};

static tandem_err render_metric(struct mem_buf *out, const struct prom_metric *m) {
    tandem_err e = put(out, "# HELP ");
    if (!e)
        e = put(out, m->name);
    if (!e)
        e = put(out, " ");
    if (!e)
        e = put_escaped(out, m->help, false);
    if (!e)
        e = put(out, "\n# TYPE ");
    if (!e)
        e = put(out, m->name);
    if (!e)
        e = put(out, " ");
    if (!e)
        e = put(out, KIND_NAMES[m->kind]);
    if (!e)
        e = put(out, "\n");
    for (size_t i = 0; !e && i < m->n_series; i++) {
        char num[40];
        if (m->kind == PROM_HISTOGRAM) {
            e = render_histogram(out, m, m->series[i]);
        } else {
            format_number(m->series[i]->value, num, sizeof num);
            e = put_line(out, m, m->series[i], "", NULL, num);
        }
    }
    return e;
}

tandem_err prom_render(const struct prom *p, struct mem_buf *out) {
    size_t start = out->len;
    tandem_err e = TANDEM_OK;
    for (size_t i = 0; p && !e && i < p->n; i++)
        e = render_metric(out, p->metrics[i]);
    if (e && out->data) { /* leave out as it was, never half a scrape */
        out->len = start;
        out->data[start] = '\0';
    }
    return e;
}
