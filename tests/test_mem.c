/* Unit tests for mem: counting, fault injection, overflow checks, and the
 * bounded buffer's hard maximum. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "base/mem.h"

static void disarm(void) { mem_fail_after(-1); }

Test(mem, counts_allocations_and_frees) {
    struct mem_stats a, b;
    mem_stats_get(&a);
    void *p = mem_alloc(10), *q = mem_calloc(3, 4);
    char *s = mem_strdup("tandem");
    cr_assert(p && q && s);
    cr_expect_str_eq(s, "tandem");
    mem_free(p);
    mem_free(q);
    mem_free(s);
    mem_free(NULL);
    mem_stats_get(&b);
    cr_expect_eq(b.allocs - a.allocs, 3);
    cr_expect_eq(b.frees - a.frees, 3);
}

Test(mem, injected_failure_hits_the_nth_allocation, .fini = disarm) {
    mem_fail_after(2);
    void *a = mem_alloc(1), *b = mem_alloc(1);
    cr_expect(a && b);
    cr_expect_null(mem_alloc(1));
    cr_expect_null(mem_strdup("x"));
    disarm();
    void *c = mem_alloc(1);
    cr_expect_not_null(c);
    mem_free(a);
    mem_free(b);
    mem_free(c);
}

Test(mem, overflowing_counts_fail_before_multiplying) {
    struct mem_stats a, b;
    mem_stats_get(&a);
    cr_expect_null(mem_alloc_array(SIZE_MAX / 2, 3));
    cr_expect_null(mem_calloc(SIZE_MAX, 2));
    mem_stats_get(&b);
    cr_expect_eq(b.failures - a.failures, 2);
}

Test(mem, failed_realloc_keeps_the_old_block, .fini = disarm) {
    char *p = mem_alloc(4);
    cr_assert_not_null(p);
    memcpy(p, "abc", 4);
    mem_fail_after(0);
    cr_expect_null(mem_realloc(p, 1 << 20));
    disarm();
    cr_expect_str_eq(p, "abc");
    mem_free(p);
}

Test(mem, strndup_copies_unterminated_input) {
    char raw[3] = {'a', 'b', 'c'};
    char *s = mem_strndup(raw, 2);
    cr_assert_not_null(s);
    cr_expect_str_eq(s, "ab");
    mem_free(s);
}

Test(mem, buf_grows_to_its_maximum_and_no_further) {
    struct mem_buf b;
    mem_buf_init(&b, 1000);
    char chunk[300];
    memset(chunk, 'x', sizeof chunk);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(mem_buf_append(&b, chunk, sizeof chunk), TANDEM_OK);
    cr_expect_eq(b.len, 900);
    cr_expect_eq(mem_buf_append(&b, chunk, sizeof chunk), TANDEM_ERR_TOOBIG);
    cr_expect_eq(b.len, 900, "a refused append changes nothing");
    cr_expect_eq(mem_buf_append(&b, chunk, 100), TANDEM_OK);
    cr_expect_eq(b.len, 1000);
    cr_expect_eq(b.data[1000], '\0');
    mem_buf_deinit(&b);
    cr_expect_null(b.data);
}

Test(mem, buf_reports_allocation_failure, .fini = disarm) {
    struct mem_buf b;
    mem_buf_init(&b, 1 << 20);
    mem_fail_after(0);
    cr_expect_eq(mem_buf_append(&b, "abc", 3), TANDEM_ERR_NOMEM);
    cr_expect_eq(b.len, 0);
    disarm();
    mem_buf_deinit(&b);
}

Test(mem, array_grow_doubles_respects_limit_and_keeps_state_on_failure, .fini = disarm) {
    int *arr = NULL;
    size_t cap = 0;
    cr_assert_eq(mem_array_grow((void **)&arr, &cap, 1, sizeof *arr, SIZE_MAX), TANDEM_OK);
    cr_expect_eq(cap, 16);
    cr_assert_eq(mem_array_grow((void **)&arr, &cap, 17, sizeof *arr, 20), TANDEM_OK);
    cr_expect_eq(cap, 20, "doubling stops at the limit");
    cr_expect_eq(mem_array_grow((void **)&arr, &cap, 21, sizeof *arr, 20), TANDEM_ERR_NOMEM);
    mem_fail_after(0);
    cr_expect_eq(mem_array_grow((void **)&arr, &cap, 21, sizeof *arr, SIZE_MAX), TANDEM_ERR_NOMEM);
    cr_expect_eq(cap, 20, "unchanged on failure");
    disarm();
    cr_expect_eq(mem_array_grow((void **)&arr, &cap, SIZE_MAX / 2, 8, SIZE_MAX), TANDEM_ERR_NOMEM,
                 "overflowing sizes fail");
    mem_free(arr);
}
