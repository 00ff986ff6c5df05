/* ladder.c: the quantization ladder's ordering and bisection.
 *
 * The range still open is (last pass, first fail below it): everything at or
 * above the smallest passing rung is taken to pass, everything at or below
 * the largest failing rung under it to fail. Judging the middle pending rung
 * of that range halves it, so nine rungs take about three judgements. A rung
 * that could not be judged (an engine error) is stepped over: the search
 * goes on around it. */
#include "eval/ladder.h"

void ladder_order(const uint64_t *bytes, size_t n, size_t *order) {
    for (size_t i = 0; i < n; i++) {
        size_t j = i;
        for (; j > 0 && bytes[order[j - 1]] < bytes[i]; j--)
            order[j] = order[j - 1];
        order[j] = i;
    }
}

/* [*lo, *hi): the open range, from past the smallest pass to the first fail below it. */
static void open_range(const enum ladder_state *st, size_t n, size_t *lo, size_t *hi) {
    *lo = 0;
    for (size_t i = 0; i < n; i++)
        if (st[i] == LADDER_PASS)
            *lo = i + 1;
    *hi = n;
    for (size_t i = *lo; i < n; i++)
        if (st[i] == LADDER_FAIL) {
            *hi = i;
            break;
        }
}

size_t ladder_next(const enum ladder_state *st, size_t n) {
    size_t lo, hi, pending = 0;
    open_range(st, n, &lo, &hi);
    for (size_t i = lo; i < hi; i++)
        pending += st[i] == LADDER_PENDING;
    if (!pending)
        return SIZE_MAX;
    size_t want = pending / 2; /* the middle one, the smaller of two middles */
    for (size_t i = lo; i < hi; i++)
        if (st[i] == LADDER_PENDING && want-- == 0)
            return i;
    return SIZE_MAX; /* not reached */
}

size_t ladder_pending(const enum ladder_state *st, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += st[i] == LADDER_PENDING;
    return k;
}

size_t ladder_remaining(const enum ladder_state *st, size_t n) {
    size_t lo, hi, pending = 0, steps = 0;
    open_range(st, n, &lo, &hi);
    for (size_t i = lo; i < hi; i++)
        pending += st[i] == LADDER_PENDING;
    for (; pending; pending /= 2)
        steps++;
    return steps;
}

size_t ladder_best(const enum ladder_state *st, size_t n) {
    for (size_t i = n; i > 0; i--)
        if (st[i - 1] == LADDER_PASS)
            return i - 1;
    return SIZE_MAX;
}

size_t ladder_decided_by(const enum ladder_state *st, size_t n, size_t i, int *passed) {
    for (size_t j = i + 1; j < n; j++)
        if (st[j] == LADDER_PASS) {
            *passed = 1;
            return j;
        }
    for (size_t j = i; j > 0; j--)
        if (st[j - 1] == LADDER_FAIL) {
            *passed = 0;
            return j - 1;
        }
    return SIZE_MAX;
}
