/* dcache.c: the decision cache (see dcache.h for what the key covers).
 *
 * Entries live in a chained hash table on the key's first 8 bytes and on one
 * LRU list (TAILQ, most recent at the tail); a hit moves its entry to the
 * tail, and a store evicts from the head until the byte cap holds. Flights
 * (identical requests in evaluation) are a short list scanned by key: there
 * are at most as many as requests admitted. A leader's ticket holds its
 * waiters; its end detaches them before any is woken, so a woken waiter may
 * look up again (and lead a new flight) from its callback. Every model
 * keeps its file's stamp; each lookup compares it with a fresh stat. */
#include "serve/dcache.h"

#include <string.h>
#include <sys/queue.h>
#include <sys/stat.h>

#include "base/hash.h"
#include "base/mem.h"
#include "serve/sched.h"

#define MIN_BUCKETS 64u

struct key {
    unsigned char d[HASH_SHA256_LEN];
};

struct entry {
    struct key key;
    size_t model;
    size_t len;
    struct entry *chain;       /* next in its bucket */
    TAILQ_ENTRY(entry) lru;
    char body[];               /* len bytes */
};

/* A file's identity as stat sees it. */
struct stamp {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
};

struct model {
    char *path;
    bool enabled;
    struct stamp file, engine;
    char *settings;
    unsigned char identity[HASH_SHA256_LEN];
    uint64_t loads_guard;      /* answers are kept once the engine's loads exceed this */
    bool stale;                /* an engine may still run on the file before a change */
    uint64_t generation;       /* bumped when its identity changes */
    struct dcache_stats st;
};

enum ticket_kind { TICKET_LEADER, TICKET_WAITER };

struct dcache_ticket {
    struct dcache *c;
    enum ticket_kind kind;
    struct key key;
    size_t model;
    int64_t deadline_ms;
    bool store, in_flights;    /* kept on done; listed as a flight waiters may join */
    uint64_t identity_gen;     /* the model's identity when looked up */
    TAILQ_HEAD(, dcache_ticket) waiters;  /* a leader's */
    struct dcache_ticket *leader;         /* a waiter's */
    dcache_wake_fn wake;
    void *user;
    TAILQ_ENTRY(dcache_ticket) link;      /* on c->flights, or on its leader's waiters */
};

struct dcache {
    uint64_t max_bytes;
    struct sched *sched;
    struct model *models;
    size_t n_models;
    struct entry **buckets;
    size_t n_buckets;
    TAILQ_HEAD(, entry) lru;
    TAILQ_HEAD(, dcache_ticket) flights;
    struct dcache_stats total;
};

/* --- entries --------------------------------------------------------------------------------- */

static size_t bucket_of(const struct dcache *c, const struct key *k) {
    uint64_t h;
    memcpy(&h, k->d, sizeof h);
    return (size_t)(h & (c->n_buckets - 1));
}

static uint64_t entry_bytes(const struct entry *e) {
    return sizeof *e + e->len;
}

static struct entry **find_slot(struct dcache *c, const struct key *k) {
    struct entry **p = &c->buckets[bucket_of(c, k)];
    while (*p && memcmp((*p)->key.d, k->d, sizeof k->d))
        p = &(*p)->chain;
    return p;
}

static void count_entry(struct dcache *c, const struct entry *e, int sign) {
    struct dcache_stats *st[] = {&c->total, &c->models[e->model].st};
    for (size_t i = 0; i < 2; i++) {
        st[i]->entries += (uint64_t)(int64_t)sign;
        st[i]->bytes += (uint64_t)((int64_t)sign * (int64_t)entry_bytes(e));
    }
}

/* Unlinks e (found through its slot p) and frees it. */
static void drop_entry(struct dcache *c, struct entry **p) {
    struct entry *e = *p;
    *p = e->chain;
    TAILQ_REMOVE(&c->lru, e, lru);
    count_entry(c, e, -1);
    mem_free(e);
}

/* Doubles the table when it holds more entries than buckets. */
static void grow(struct dcache *c) {
    if (c->total.entries < c->n_buckets)
        return;
    size_t n = c->n_buckets * 2;
    struct entry **b = mem_calloc(n, sizeof *b);
    if (!b)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < c->n_buckets; i++)
        for (struct entry *e = c->buckets[i], *next; e; e = next) {
            next = e->chain;
            uint64_t h;
            memcpy(&h, e->key.d, sizeof h);
            e->chain = b[h & (n - 1)];
            b[h & (n - 1)] = e;
        }
    mem_free(c->buckets);
    c->buckets = b;
    c->n_buckets = n;
}

static void evict_oldest(struct dcache *c) {
    struct entry *e = TAILQ_FIRST(&c->lru);
    c->total.evictions++;
    c->models[e->model].st.evictions++;
    drop_entry(c, find_slot(c, &e->key));
}

static void store(struct dcache *c, const struct key *k, size_t model, const char *body,
                  size_t len) {
    if (sizeof(struct entry) + len > c->max_bytes || *find_slot(c, k))
        return;
    struct entry *e = mem_alloc(sizeof *e + len);
    if (!e)
        return;
    *e = (struct entry){.key = *k, .model = model, .len = len};
    memcpy(e->body, body, len);
    while (c->total.bytes + entry_bytes(e) > c->max_bytes)
        evict_oldest(c);
    struct entry **p = find_slot(c, k);
    *p = e;
    TAILQ_INSERT_TAIL(&c->lru, e, lru);
    count_entry(c, e, 1);
    grow(c);
}

uint64_t dcache_clear(struct dcache *c, size_t m) {
    uint64_t n = 0;
    for (size_t i = 0; c && i < c->n_buckets; i++)
        for (struct entry **p = &c->buckets[i]; *p;) {
            if (m != SIZE_MAX && (*p)->model != m) {
                p = &(*p)->chain;
                continue;
            }
            c->models[(*p)->model].st.invalidations++;
            drop_entry(c, p);
            n++;
        }
    if (c)
        c->total.invalidations += n;
    return n;
}

/* --- models ---------------------------------------------------------------------------------- */

static bool stamp_of(const char *path, struct stamp *out) {
    struct stat st;
    *out = (struct stamp){0};
    if (!path || stat(path, &st) != 0)
        return false;
    *out = (struct stamp){st.st_dev, st.st_ino, st.st_size, st.st_mtim};
    return true;
}

static bool stamp_same(const struct stamp *a, const struct stamp *b) {
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* Model m's identity digest from its index (so that each model's entries are
 * its own), settings and the two stamps. */
static tandem_err identify(struct dcache *c, size_t m) {
    struct model *md = &c->models[m];
    struct {
        size_t index;
        struct stamp file, engine;
    } id;
    memset(&id, 0, sizeof id); /* the padding is hashed too */
    id.index = m;
    id.file = md->file;
    id.engine = md->engine;
    return hash_sha256_pair(&id, sizeof id, md->settings, strlen(md->settings), md->identity);
}

/* While model m's engine may still run on the file before a change (its
 * loads have not passed the guard), stops it once it is resident and idle,
 * so that the next request loads the file anew. */
static void stop_stale_engine(struct dcache *c, size_t m) {
    struct model *md = &c->models[m];
    if (!c->sched || !md->stale)
        return;
    struct sched_counts n;
    sched_model_counts(c->sched, m, &n);
    if (n.loads > md->loads_guard) {
        md->stale = false;
        return;
    }
    if (sched_model_state(c->sched, m) == SCHED_RESIDENT && !n.waiting && !n.running)
        (void)sched_unload(c->sched, m);
}

/* Model m's identity changed (its file, or what it was set to): its entries
 * go, the digest follows, and nothing is kept until an engine has loaded the
 * file anew (a load under way may have read the old one). */
static void identity_changed(struct dcache *c, size_t m) {
    struct model *md = &c->models[m];
    dcache_clear(c, m);
    md->generation++;
    if (identify(c, m) != TANDEM_OK)
        md->enabled = false;
    if (!c->sched)
        return;
    struct sched_counts n;
    sched_model_counts(c->sched, m, &n);
    md->loads_guard = n.loads + (sched_model_state(c->sched, m) == SCHED_LOADING);
    md->stale = true;
    stop_stale_engine(c, m);
}

tandem_err dcache_model_set(struct dcache *c, size_t m, const struct dcache_model_spec *spec) {
    if (!c || m >= c->n_models)
        return TANDEM_ERR_RANGE;
    struct model *md = &c->models[m];
    char *path = mem_strdup(spec->path ? spec->path : "");
    char *settings = mem_strdup(spec->settings ? spec->settings : "");
    if (!path || !settings) {
        mem_free(path);
        mem_free(settings);
        return TANDEM_ERR_NOMEM;
    }
    struct stamp file, engine;
    (void)stamp_of(path, &file);
    (void)stamp_of(spec->engine, &engine);
    bool first = !md->path;
    bool same = !first && !strcmp(md->path, path) && !strcmp(md->settings, settings) &&
                stamp_same(&md->file, &file) && stamp_same(&md->engine, &engine);
    mem_free(md->path);
    mem_free(md->settings);
    md->path = path;
    md->settings = settings;
    md->file = file;
    md->engine = engine;
    md->enabled = spec->enabled;
    if (first) /* no engine has run yet: the first load reads this file */
        return identify(c, m) == TANDEM_OK ? TANDEM_OK : TANDEM_ERR_IO;
    if (!same)
        identity_changed(c, m);
    else if (!md->enabled)
        dcache_clear(c, m);
    return TANDEM_OK;
}

/* Compares model m's file with its stamp (one stat) and follows a change;
 * an engine left on the old file is stopped once it is idle. */
static void check_file(struct dcache *c, size_t m) {
    struct stamp now;
    (void)stamp_of(c->models[m].path, &now);
    if (stamp_same(&now, &c->models[m].file)) {
        stop_stale_engine(c, m);
        return;
    }
    c->models[m].file = now;
    identity_changed(c, m);
}

/* --- lookups and flights --------------------------------------------------------------------- */

static struct dcache_ticket *find_flight(struct dcache *c, const struct key *k) {
    struct dcache_ticket *t;
    TAILQ_FOREACH(t, &c->flights, link)
        if (!memcmp(t->key.d, k->d, sizeof k->d))
            return t;
    return NULL;
}

/* Adds one to the counter at offset in struct dcache_stats, for the cache
 * and for model m. */
static void count(struct dcache *c, size_t m, size_t offset) {
    *(uint64_t *)((char *)&c->total + offset) += 1;
    *(uint64_t *)((char *)&c->models[m].st + offset) += 1;
}

static struct dcache_ticket *ticket_new(struct dcache *c, enum ticket_kind kind,
                                        const struct key *k, const struct dcache_request *rq) {
    struct dcache_ticket *t = mem_calloc(1, sizeof *t);
    if (!t)
        return NULL;
    *t = (struct dcache_ticket){.c = c, .kind = kind, .key = *k, .model = rq->model,
                                .deadline_ms = rq->deadline_ms, .store = !rq->no_store,
                                .identity_gen = c->models[rq->model].generation,
                                .wake = rq->wake, .user = rq->user};
    TAILQ_INIT(&t->waiters);
    return t;
}

/* Whether a waiter with deadline mine would wait no longer than it may for
 * leader (0 = none). */
static bool may_wait(const struct dcache_ticket *leader, int64_t mine) {
    return !mine || (leader->deadline_ms && leader->deadline_ms <= mine);
}

static enum dcache_outcome lead(struct dcache *c, const struct key *k,
                                const struct dcache_request *rq, struct dcache_ticket **ticket,
                                enum dcache_outcome how) {
    *ticket = ticket_new(c, TICKET_LEADER, k, rq);
    count(c, rq->model, how == DCACHE_BYPASS ? offsetof(struct dcache_stats, bypasses)
                                             : offsetof(struct dcache_stats, misses));
    if (*ticket && how == DCACHE_LEAD && !find_flight(c, k)) {
        TAILQ_INSERT_TAIL(&c->flights, *ticket, link);
        (*ticket)->in_flights = true;
    }
    return how;
}

const char *dcache_outcome_name(enum dcache_outcome o) {
    static const char *const names[] = {[DCACHE_OFF] = NULL, [DCACHE_HIT] = "hit",
                                        [DCACHE_WAIT] = "coalesced", [DCACHE_LEAD] = "miss",
                                        [DCACHE_BYPASS] = "bypass"};
    return (size_t)o < sizeof names / sizeof *names ? names[o] : NULL;
}

enum dcache_outcome dcache_lookup(struct dcache *c, const struct dcache_request *rq,
                                  struct dcache_ticket **ticket, struct dcache_answer *hit) {
    *ticket = NULL;
    if (!c || !c->max_bytes || rq->model >= c->n_models)
        return DCACHE_OFF;
    check_file(c, rq->model);
    struct model *md = &c->models[rq->model];
    struct key k;
    if (!md->enabled ||
        hash_sha256_pair(md->identity, sizeof md->identity, rq->text, rq->len, k.d) != TANDEM_OK)
        return DCACHE_OFF;
    if (rq->no_lookup)
        return lead(c, &k, rq, ticket, DCACHE_BYPASS);
    struct entry *e = *find_slot(c, &k);
    if (e) {
        TAILQ_REMOVE(&c->lru, e, lru);
        TAILQ_INSERT_TAIL(&c->lru, e, lru);
        count(c, rq->model, offsetof(struct dcache_stats, hits));
        *hit = (struct dcache_answer){200, e->body, e->len};
        return DCACHE_HIT;
    }
    struct dcache_ticket *leader = find_flight(c, &k);
    if (!leader || !may_wait(leader, rq->deadline_ms))
        return lead(c, &k, rq, ticket, DCACHE_LEAD);
    struct dcache_ticket *w = ticket_new(c, TICKET_WAITER, &k, rq);
    if (!w)
        return lead(c, &k, rq, ticket, DCACHE_LEAD);
    w->leader = leader;
    TAILQ_INSERT_TAIL(&leader->waiters, w, link);
    count(c, rq->model, offsetof(struct dcache_stats, coalesced));
    *ticket = w;
    return DCACHE_WAIT;
}

/* Whether t's answer may be kept: the model's identity is the one looked
 * up, and its engine has loaded the file that identity names. */
static bool keepable(const struct dcache_ticket *t) {
    const struct dcache *c = t->c;
    const struct model *md = &c->models[t->model];
    if (!t->store || md->generation != t->identity_gen || !md->enabled)
        return false;
    if (!c->sched)
        return true;
    struct sched_counts n;
    sched_model_counts(c->sched, t->model, &n);
    return n.loads > md->loads_guard;
}

/* Ends leader t: off the flights, its waiters woken with a (NULL: look up
 * again) after all are detached. Frees t. */
static void end_leader(struct dcache_ticket *t, const struct dcache_answer *a) {
    if (t->in_flights)
        TAILQ_REMOVE(&t->c->flights, t, link);
    TAILQ_HEAD(, dcache_ticket) woken = TAILQ_HEAD_INITIALIZER(woken);
    TAILQ_CONCAT(&woken, &t->waiters, link);
    mem_free(t);
    struct dcache_ticket *w;
    while ((w = TAILQ_FIRST(&woken))) {
        TAILQ_REMOVE(&woken, w, link);
        dcache_wake_fn wake = w->wake;
        void *user = w->user;
        mem_free(w);
        wake(user, a);
    }
}

void dcache_ticket_done(struct dcache_ticket *t, const struct dcache_answer *a) {
    if (!t)
        return;
    if (t->kind == TICKET_LEADER && a->status == 200 && keepable(t))
        store(t->c, &t->key, t->model, a->body, a->len);
    end_leader(t, a);
}

void dcache_ticket_cancel(struct dcache_ticket *t) {
    if (!t)
        return;
    if (t->kind == TICKET_LEADER) {
        end_leader(t, NULL);
        return;
    }
    TAILQ_REMOVE(&t->leader->waiters, t, link);
    mem_free(t);
}

/* --- the cache ------------------------------------------------------------------------------- */

struct dcache *dcache_new(uint64_t max_bytes, size_t n_models, struct sched *sched) {
    struct dcache *c = mem_calloc(1, sizeof *c);
    if (!c)
        return NULL;
    *c = (struct dcache){.max_bytes = max_bytes, .sched = sched, .n_models = n_models,
                         .n_buckets = MIN_BUCKETS};
    TAILQ_INIT(&c->lru);
    TAILQ_INIT(&c->flights);
    c->models = mem_calloc(n_models ? n_models : 1, sizeof *c->models);
    c->buckets = mem_calloc(c->n_buckets, sizeof *c->buckets);
    if (!c->models || !c->buckets) {
        dcache_free(c);
        return NULL;
    }
    return c;
}

void dcache_free(struct dcache *c) {
    if (!c)
        return;
    if (c->buckets && c->models)
        dcache_clear(c, SIZE_MAX);
    for (size_t i = 0; c->models && i < c->n_models; i++) {
        mem_free(c->models[i].path);
        mem_free(c->models[i].settings);
    }
    mem_free(c->models);
    mem_free(c->buckets);
    mem_free(c);
}

void dcache_stats(const struct dcache *c, size_t m, struct dcache_stats *out) {
    *out = (struct dcache_stats){0};
    if (c && m == SIZE_MAX)
        *out = c->total;
    else if (c && m < c->n_models)
        *out = c->models[m].st;
}

uint64_t dcache_max_bytes(const struct dcache *c) {
    return c ? c->max_bytes : 0;
}

bool dcache_model_enabled(const struct dcache *c, size_t m) {
    return c && c->max_bytes && m < c->n_models && c->models[m].enabled;
}
