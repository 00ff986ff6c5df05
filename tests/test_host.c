/* Unit tests for host: strict /proc/meminfo parsing, the CPU count, clocks. */
#include <criterion/criterion.h>
#include <sched.h>

#include "base/host.h"

Test(host, parses_meminfo) {
    const char *text = "MemTotal:       24576000 kB\n"
                       "MemFree:        20000000 kB\n"
                       "MemAvailable:   22071236 kB\n";
    struct host_memory m;
    cr_assert_eq(host_memory_parse(text, &m), TANDEM_OK);
    cr_expect_eq(m.total_bytes, 24576000ULL * 1024);
    cr_expect_eq(m.available_bytes, 22071236ULL * 1024);
}

Test(host, rejects_missing_malformed_and_overflowing_fields) {
    struct host_memory m = {1, 2};
    cr_expect_eq(host_memory_parse("MemTotal: 10 kB\n", &m), TANDEM_ERR_FORMAT);
    cr_expect_eq(host_memory_parse("MemTotal: x kB\nMemAvailable: 1 kB\n", &m), TANDEM_ERR_FORMAT);
    cr_expect_eq(host_memory_parse("MemTotal: 10 MB\nMemAvailable: 1 kB\n", &m), TANDEM_ERR_FORMAT);
    cr_expect_eq(host_memory_parse("XMemTotal: 10 kB\nMemAvailable: 1 kB\n", &m), TANDEM_ERR_FORMAT);
    cr_expect_eq(host_memory_parse("MemTotal: 99999999999999999999 kB\nMemAvailable: 1 kB\n", &m),
                 TANDEM_ERR_RANGE);
    cr_expect_eq(host_memory_parse("", &m), TANDEM_ERR_FORMAT);
    cr_expect_eq(m.total_bytes, 1, "output untouched on failure");
}

Test(host, reads_this_machine) {
    struct host_memory m;
    cr_assert_eq(host_memory_read(&m), TANDEM_OK);
    cr_expect_gt(m.total_bytes, 0);
    cr_expect_leq(m.available_bytes, m.total_bytes);
}

Test(host, wall_after_ms_is_a_normalized_time_that_far_ahead) {
    for (int64_t ms = 0; ms <= 2500; ms += 250) {
        struct timespec before, after;
        clock_gettime(CLOCK_REALTIME, &before);
        struct timespec t = host_wall_after_ms(ms);
        clock_gettime(CLOCK_REALTIME, &after);
        cr_assert(t.tv_nsec >= 0 && t.tv_nsec < 1000000000L, "ms %lld", (long long)ms);
        int64_t at = (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
        int64_t lo = (int64_t)before.tv_sec * 1000 + before.tv_nsec / 1000000 + ms;
        int64_t hi = (int64_t)after.tv_sec * 1000 + after.tv_nsec / 1000000 + ms;
        cr_assert(at >= lo - 1 && at <= hi + 1, "ms %lld: %lld not in [%lld, %lld]",
                  (long long)ms, (long long)at, (long long)lo, (long long)hi);
    }
}

/* Criterion runs each test in its own process, so narrowing this one's mask
 * leaves the others alone. */
Test(host, cpus_counts_the_affinity_mask) {
    cpu_set_t all, one;
    cr_assert_eq(sched_getaffinity(0, sizeof all, &all), 0);
    cr_assert_eq(host_cpus(), (unsigned)CPU_COUNT(&all));
    int first = 0;
    while (!CPU_ISSET(first, &all))
        first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0);
    cr_assert_eq(host_cpus(), 1);
}
