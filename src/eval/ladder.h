/* ladder.h: the search of `tandem quantize --ladder`, with no I/O.
 *
 * Rungs are quantization types ordered by their exact size, largest first.
 * Each is either judged (passed or failed its flip gate), failed to be judged
 * (an engine error), left out (does not fit the budget) or still pending. The
 * search bisects toward the smallest rung that passes, assuming that a
 * smaller rung never keeps more decisions than a larger one: after a pass
 * every larger rung is taken to pass, after a failure every smaller one to
 * fail. Pure functions over caller-owned arrays, unit-tested by hand. */
#ifndef TANDEM_LADDER_H
#define TANDEM_LADDER_H

#include <stddef.h>
#include <stdint.h>

enum ladder_state {
    LADDER_PENDING, /* not judged (yet) */
    LADDER_PASS,    /* judged: its flips are within the gate */
    LADDER_FAIL,    /* judged: too many flips */
    LADDER_ERROR,   /* could not be built or served: neither pass nor fail */
    LADDER_NO_FIT,  /* does not fit the budget: never built */
};

/* Writes into order[n] the indices of bytes[n] sorted by size, largest first;
 * equal sizes keep their input order. */
void ladder_order(const uint64_t *bytes, size_t n, size_t *order);

/* The next rung to judge, given st[n] in size order (largest first): the
 * middle pending rung between the smallest passing rung and the largest
 * failing rung below it (errors and rungs that do not fit are stepped over).
 * Returns SIZE_MAX when no pending rung is left in that range: the search is
 * done. */
size_t ladder_next(const enum ladder_state *st, size_t n);

/* Rungs still pending among st[n]. */
size_t ladder_pending(const enum ladder_state *st, size_t n);

/* The most judgements the bisection may still need: ceil(log2(p + 1)) for
 * the p pending rungs of the open range (0 when the search is done). */
size_t ladder_remaining(const enum ladder_state *st, size_t n);

/* The recommendation once the search is done: the smallest passing rung (the
 * highest index with LADDER_PASS), or SIZE_MAX when none passed. */
size_t ladder_best(const enum ladder_state *st, size_t n);

/* Why pending rung i was never judged: the index of the nearest rung that
 * decided it (a smaller rung that passed, preferred, else a larger one that
 * failed),
 * with *passed telling which; SIZE_MAX when neither exists (the search
 * stopped before it for another reason). */
size_t ladder_decided_by(const enum ladder_state *st, size_t n, size_t i, int *passed);

#endif
