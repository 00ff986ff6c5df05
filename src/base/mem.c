/* mem.c: counting allocator with fault injection, and bounded buffers.
 *
 * Counters are C11 atomics so that worker threads may allocate. Fault
 * injection is a countdown: fail_countdown < 0 means disarmed; otherwise each
 * successful allocation decrements it and, once it reaches 0, allocations fail.
 * Overflow of n * size is checked before any multiplication. */
#include "base/mem.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_uint_fast64_t n_allocs, n_frees, n_failures;
static atomic_long fail_countdown = -1;

/* Returns 1 when this allocation must fail by injection. */
static int injected_failure(void) {
    long left = atomic_load(&fail_countdown);
    while (left > 0) {
        if (atomic_compare_exchange_weak(&fail_countdown, &left, left - 1))
            return 0;
    }
    return left == 0;
}

static void *counted(void *p) {
    atomic_fetch_add(p ? &n_allocs : &n_failures, 1);
    return p;
}

static void *fail(void) {
    atomic_fetch_add(&n_failures, 1);
    return NULL;
}

void *mem_alloc(size_t size) {
    if (injected_failure())
        return fail();
    return counted(malloc(size ? size : 1));
}

void *mem_alloc_array(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size)
        return fail();
    return mem_alloc(n * size);
}

void *mem_calloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size)
        return fail();
    if (injected_failure())
        return fail();
    return counted(calloc(n ? n : 1, size ? size : 1));
}

void *mem_realloc(void *p, size_t size) {
    if (injected_failure())
        return fail();
    void *q = realloc(p, size ? size : 1);
    if (!q)
        return fail();
    if (!p)
        atomic_fetch_add(&n_allocs, 1);
    return q;
}

char *mem_strndup(const char *s, size_t n) {
    char *d = mem_alloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

char *mem_strdup(const char *s) {
    return mem_strndup(s, strlen(s));
}

tandem_err mem_array_grow(void **arr, size_t *cap, size_t need, size_t elem, size_t limit) {
    if (need <= *cap)
        return TANDEM_OK;
    size_t n = *cap ? (*cap > SIZE_MAX / 2 ? SIZE_MAX : *cap * 2) : 16;
    if (n > limit)
        n = limit;
    if (n < need || (elem && n > SIZE_MAX / elem))
        return TANDEM_ERR_NOMEM;
    void *p = mem_realloc(*arr, n * elem);
    if (!p)
        return TANDEM_ERR_NOMEM;
    *arr = p;
    *cap = n;
    return TANDEM_OK;
}

void mem_free(void *p) {
    if (!p)
        return;
    atomic_fetch_add(&n_frees, 1);
    free(p);
}

void mem_stats_get(struct mem_stats *out) {
    out->allocs = atomic_load(&n_allocs);
    out->frees = atomic_load(&n_frees);
    out->failures = atomic_load(&n_failures);
}

void mem_fail_after(long n) {
    atomic_store(&fail_countdown, n < 0 ? -1 : n);
}

void mem_buf_init(struct mem_buf *b, size_t max) {
    *b = (struct mem_buf){.max = max};
}

tandem_err mem_buf_append(struct mem_buf *b, const void *p, size_t n) {
    if (n > b->max - b->len)
        return TANDEM_ERR_TOOBIG;
    size_t need = b->len + n + 1;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need)
            cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        char *d = mem_realloc(b->data, cap);
        if (!d)
            return TANDEM_ERR_NOMEM;
        b->data = d;
        b->cap = cap;
    }
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return TANDEM_OK;
}

tandem_err mem_buf_append_file(struct mem_buf *b, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return TANDEM_ERR_IO;
    char chunk[65536];
    size_t n;
    tandem_err e = TANDEM_OK;
    while (e == TANDEM_OK && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        e = mem_buf_append(b, chunk, n);
    if (e == TANDEM_OK && ferror(f))
        e = TANDEM_ERR_IO;
    int saved = errno;
    fclose(f);
    errno = saved;
    return e;
}

void mem_buf_deinit(struct mem_buf *b) {
    mem_free(b->data);
    *b = (struct mem_buf){0};
}
