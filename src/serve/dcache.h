/* dcache.h: the decision cache: an exact repeat of a decision is answered
 * from memory, and identical decisions in flight are evaluated once.
 *
 * tandem's determinism guarantee (docs/serve.md, Determinism) makes a
 * strict model's answer to a request a function of the request and of what
 * the engine computes with: the model file, the engine build and every
 * setting that changes numbers. An answer keyed by all of these is the
 * answer the engine would give again, byte for byte. The key is the SHA-256
 * of the model's identity (its settings text, and the device, inode, size
 * and modification time of the model file and of the engine binary) and the
 * request's canonical text (compact JSON, members in the client's order).
 *
 * Answers are kept per scheduler model index, under one byte cap, evicted
 * least recently used first. A model file that changes on disk is noticed at
 * the next lookup: its entries go, and no answer is kept again until an
 * engine has loaded the new file (when its engine is idle it is stopped, so
 * the next request loads the new file). A lookup that finds an identical
 * request in flight waits for that answer (single flight) when the leader's
 * deadline is no later than its own. */
#ifndef TANDEM_DCACHE_H
#define TANDEM_DCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct sched; /* serve/sched.h */

/* What tandem.yaml's cache.max_bytes says when it is absent. */
#define DCACHE_DEFAULT_MAX_BYTES (64ull << 20)

struct dcache;        /* opaque */
struct dcache_ticket; /* a lookup's part in a flight: leading it, or waiting for it */

/* One model's entry in the cache. */
struct dcache_model_spec {
    const char *path;     /* the model file (copied) */
    const char *engine;   /* the engine binary (copied) */
    const char *settings; /* a text of every setting that changes the engine's numbers
                           * (copied) */
    bool enabled;         /* false: never cached (cache: false, determinism: relaxed) */
};

/* Counts, per model or for the whole cache. */
struct dcache_stats {
    uint64_t hits, misses;   /* answered from memory; evaluated (led a flight) */
    uint64_t coalesced;      /* waited for an identical request in flight */
    uint64_t bypasses;       /* asked not to look (Cache-Control: no-cache) */
    uint64_t evictions;      /* entries dropped for room */
    uint64_t invalidations;  /* entries dropped by a change or a clear */
    uint64_t entries, bytes; /* held now (bytes: answers plus their bookkeeping) */
};

/* Creates a cache of at most max_bytes (0: nothing is ever cached) for
 * n_models models, all disabled until dcache_model_set. sched (borrowed, may
 * be NULL) is asked for a model's loads and state when its file changes.
 * Returns NULL on OOM. */
struct dcache *dcache_new(uint64_t max_bytes, size_t n_models, struct sched *sched);

/* Frees the cache and its entries. Every ticket must have been ended
 * (done or cancelled) first. dcache_free(NULL) is a no-op. */
void dcache_free(struct dcache *c);

/* Sets model m's identity (its settings, and stat of its file and engine,
 * now) and whether it is cached. When the identity differs from the one set
 * before, m's entries go and nothing is kept until its engine has loaded
 * again; when only disabled, its entries go. Returns
 * TANDEM_ERR_RANGE for a bad m, TANDEM_ERR_NOMEM. */
tandem_err dcache_model_set(struct dcache *c, size_t m, const struct dcache_model_spec *spec);

/* Drops model m's entries (every model's when m is SIZE_MAX). Returns how
 * many went. */
uint64_t dcache_clear(struct dcache *c, size_t m);

/* An answer: its HTTP status and body bytes (borrowed). */
struct dcache_answer {
    int status;
    const char *body;
    size_t len;
};

/* Called once for a waiting ticket (then freed): with the leader's answer,
 * or with NULL when the leader went away without one (its client left, or
 * it failed before the engine answered): the caller then looks up again. */
typedef void (*dcache_wake_fn)(void *user, const struct dcache_answer *a);

struct dcache_request {
    size_t model;            /* the scheduler's model index */
    const char *text;        /* the request's canonical text (borrowed) */
    size_t len;
    int64_t deadline_ms;     /* absolute (host_now_ms); 0 = none */
    bool no_lookup;          /* Cache-Control: no-cache: evaluate, never wait */
    bool no_store;           /* Cache-Control: no-store: keep nothing */
    dcache_wake_fn wake;     /* for DCACHE_WAIT */
    void *user;
};

enum dcache_outcome {
    DCACHE_OFF,    /* not cached: the model is disabled, or the cache holds 0 bytes */
    DCACHE_HIT,    /* *hit holds the answer */
    DCACHE_WAIT,   /* an identical request leads: wake comes later */
    DCACHE_LEAD,   /* evaluate, then dcache_ticket_done */
    DCACHE_BYPASS  /* no_lookup: evaluate, then dcache_ticket_done */
};

/* The outcome's name as the x-tandem-cache header and the audit log say it:
 * "hit", "coalesced" (WAIT), "miss" (LEAD), "bypass"; NULL for OFF. */
const char *dcache_outcome_name(enum dcache_outcome o);

/* Looks request rq up. HIT: *hit (output) holds the answer, valid until the
 * next call into c. WAIT, LEAD and BYPASS: *ticket (output) is the caller's
 * until dcache_ticket_done (LEAD, BYPASS), the wake call (WAIT) or
 * dcache_ticket_cancel (any). OFF: *ticket is NULL, as when memory runs out
 * (then LEAD or BYPASS with no ticket: evaluate without the cache). */
enum dcache_outcome dcache_lookup(struct dcache *c, const struct dcache_request *rq,
                                  struct dcache_ticket **ticket, struct dcache_answer *hit);

/* The evaluation of a LEAD or BYPASS ticket ended with answer a (borrowed):
 * a 200 is kept (unless no_store, or the model's file changed since the
 * lookup and no engine has loaded it yet), and the waiters get a, whatever
 * its status. Frees t. NULL is a no-op. */
void dcache_ticket_done(struct dcache_ticket *t, const struct dcache_answer *a);

/* The ticket's owner goes away: a leader's waiters are woken with NULL, a
 * waiter leaves its flight. Frees t. NULL is a no-op. */
void dcache_ticket_cancel(struct dcache_ticket *t);

/* Counts of model m, or of the whole cache when m is SIZE_MAX. */
void dcache_stats(const struct dcache *c, size_t m, struct dcache_stats *out);

/* The byte cap, and whether model m is cached. */
uint64_t dcache_max_bytes(const struct dcache *c);
bool dcache_model_enabled(const struct dcache *c, size_t m);

#endif
