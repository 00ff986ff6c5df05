/* mem.h: the one allocation wrapper every tandem module uses.
 *
 * Counting allocations and injecting failures lets tests prove that each
 * out-of-memory path returns TANDEM_ERR_NOMEM instead of crashing.
 * Also: bounded growable byte buffers (a hard maximum is set at init). */
#ifndef TANDEM_MEM_H
#define TANDEM_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* Allocates size bytes (size 0 is treated as 1). Returns NULL on failure.
 * The caller owns the result and releases it with mem_free(). */
void *mem_alloc(size_t size);

/* Allocates n * size zeroed bytes. Returns NULL on failure, including when
 * n * size overflows size_t. Caller owns the result (mem_free()). */
void *mem_calloc(size_t n, size_t size);

/* Allocates n * size uninitialised bytes, NULL on failure or overflow.
 * Use it for every count that came from untrusted input. Caller owns it. */
void *mem_alloc_array(size_t n, size_t size);

/* Resizes p (which may be NULL) to size bytes (0 is treated as 1). On failure
 * returns NULL and p is left valid and unchanged. Ownership stays with the caller. */
void *mem_realloc(void *p, size_t size);

/* Returns a copy of the NUL-terminated s, or NULL on failure. Caller owns it. */
char *mem_strdup(const char *s);

/* Returns a NUL-terminated copy of the first n bytes of s (s need not be
 * terminated), or NULL on failure. Caller owns it. */
char *mem_strndup(const char *s, size_t n);

/* Grows the array *arr (elements of elem bytes, capacity *cap, both in-out) to
 * hold at least need elements, doubling from 16 but never past limit (pass
 * SIZE_MAX for none). On failure *arr and *cap are unchanged. Returns
 * TANDEM_ERR_NOMEM when allocation fails or need exceeds limit. */
tandem_err mem_array_grow(void **arr, size_t *cap, size_t need, size_t elem, size_t limit);

/* Releases p, from any function above. mem_free(NULL) is a no-op. */
void mem_free(void *p);

/* Counters since process start; safe to read from any thread. */
struct mem_stats {
    uint64_t allocs;   /* successful allocations, including reallocs of NULL */
    uint64_t frees;    /* mem_free() calls with a non-NULL pointer */
    uint64_t failures; /* allocations that returned NULL, injected or real */
};

/* Fills *out with the current counters. */
void mem_stats_get(struct mem_stats *out);

/* Test hook: after n more successful allocations, every allocation fails
 * until mem_fail_after(-1) disarms it. n = 0 fails the very next one. */
void mem_fail_after(long n);

/* A growable byte buffer with a hard maximum. data is always NUL-terminated
 * (the terminator is not counted in len and not charged against max).
 * Caller-allocated: mem_buf_init() then mem_buf_deinit(). */
struct mem_buf {
    char *data; /* NULL until the first append; owned by the buffer */
    size_t len; /* bytes held */
    size_t cap; /* bytes allocated, terminator included */
    size_t max; /* hard maximum for len */
};

/* Initialises an empty buffer that may grow to max bytes. Allocates nothing. */
void mem_buf_init(struct mem_buf *b, size_t max);

/* Appends n bytes from p. Returns TANDEM_ERR_TOOBIG if len would pass max
 * (nothing is appended then), TANDEM_ERR_NOMEM on allocation failure. */
tandem_err mem_buf_append(struct mem_buf *b, const void *p, size_t n);

/* Appends the whole file at path (borrowed). Returns TANDEM_ERR_IO when it
 * cannot be opened or read (errno says why), TANDEM_ERR_TOOBIG past max,
 * TANDEM_ERR_NOMEM. */
tandem_err mem_buf_append_file(struct mem_buf *b, const char *path);

/* Releases the buffer's memory; b may be reused after mem_buf_init(). */
void mem_buf_deinit(struct mem_buf *b);

#endif
