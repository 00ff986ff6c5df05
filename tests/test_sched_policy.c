/* Unit tests for sched_policy: the scheduler's decisions on made-up models,
 * with no engine, loop or clock. Fit per GPU and on the host; which waiting
 * job may start and which starts use up a turn; the eviction order
 * (priority, then least recently used), pinned models, the linger that
 * groups a client's requests, the busy rule and its starvation bound
 * (group_limit, max_wait from readiness); admin loads; the make-room and
 * lookahead decisions; deadline refusals, keep-alive and the back-off. */
#include <criterion/criterion.h>

#include "serve/sched_policy.h"

#define GIB (1ull << 30)
#define NOW 100000 /* the clock of every case, ms */

/* Two GPUs of 8 GiB, 32 GiB of host RAM, turns of 3 jobs or 2 s. */
static struct sched_policy policy(void) {
    return (struct sched_policy){.n_gpus = 2, .gpu_budget = {8 * GIB, 8 * GIB},
                                 .host_budget = 32 * GIB, .group_limit = 3, .max_wait_ms = 2000};
}

/* An idle resident on device with gpu GiB there and 1 GiB on the host, last
 * used long ago, ready since long ago. */
static struct sched_policy_model resident(int32_t device, uint64_t gpu) {
    return (struct sched_policy_model){.state = SCHED_RESIDENT, .device = device,
                                       .gpu_bytes = gpu * GIB, .host_bytes = GIB, .slots = 1,
                                       .last_used_ms = NOW - 60000, .ready_at_ms = NOW - 90000,
                                       .ready_ms = -1, .keep_alive_ms = -1};
}

/* A model with no engine that needs gpu GiB on device. */
static struct sched_policy_model unloaded(int32_t device, uint64_t gpu) {
    struct sched_policy_model m = resident(device, gpu);
    m.state = SCHED_UNLOADED;
    m.waiting = 1;
    return m;
}

/* The ask of a job for model index submitted wait_ms ago. */
static struct sched_policy_ask ask_for(size_t index, int64_t wait_ms) {
    return (struct sched_policy_ask){.model = index, .submitted_ms = NOW - wait_ms,
                                     .now_ms = NOW};
}

/* --- fit ------------------------------------------------------------------------------------- */

Test(sched_policy, fits_per_gpu_beside_every_model_holding_memory) {
    struct sched_policy p = policy();
    struct sched_policy_model m[] = {resident(0, 5), unloaded(0, 3), unloaded(0, 4),
                                     unloaded(1, 4)};
    cr_expect(sched_policy_fits(&p, m, 4, 1, NULL), "5 + 3 GiB fill GPU 0 exactly");
    cr_expect_not(sched_policy_fits(&p, m, 4, 2, NULL), "5 + 4 GiB do not fit on GPU 0");
    cr_expect(sched_policy_fits(&p, m, 4, 3, NULL), "GPU 1 is empty");
    m[0].state = SCHED_STOPPING;
    cr_expect_not(sched_policy_fits(&p, m, 4, 2, NULL), "a stopping engine still holds memory");
    m[0].state = SCHED_LOADING;
    cr_expect_not(sched_policy_fits(&p, m, 4, 2, NULL), "so does a loading one");
    m[0].state = SCHED_FAILED;
    cr_expect(sched_policy_fits(&p, m, 4, 2, NULL), "a failed model holds nothing");
    m[0].state = SCHED_RESIDENT;
    struct sched_policy_usage freed = {.gpu = {GIB}};
    cr_expect(sched_policy_fits(&p, m, 4, 2, &freed), "1 GiB freed on GPU 0 makes room");
}

Test(sched_policy, fits_on_the_host_too) {
    struct sched_policy p = policy();
    struct sched_policy_model m[] = {resident(PLACE_CPU, 0), unloaded(PLACE_CPU, 0)};
    m[0].host_bytes = 20 * GIB;
    m[1].host_bytes = 12 * GIB;
    cr_expect(sched_policy_fits(&p, m, 2, 1, NULL));
    m[1].host_bytes = 13 * GIB;
    cr_expect_not(sched_policy_fits(&p, m, 2, 1, NULL), "33 GiB of 32 on the host");
    struct sched_policy_usage u = {0};
    sched_policy_usage_add(&u, &m[0]);
    sched_policy_usage_add(&u, &m[1]);
    cr_expect_eq(u.host, 33 * GIB);
    cr_expect_eq(u.gpu[0] + u.gpu[1], 0, "a CPU model adds nothing to a GPU");
}

/* --- who runs -------------------------------------------------------------------------------- */

Test(sched_policy, a_job_starts_on_a_resident_with_a_free_slot_unless_it_drains) {
    struct sched_policy_model m = resident(0, 1);
    m.slots = 2;
    m.running = 1;
    cr_expect(sched_policy_can_start(&m));
    m.running = 2;
    cr_expect_not(sched_policy_can_start(&m), "both slots are busy");
    m.running = 1;
    m.draining = true;
    cr_expect_not(sched_policy_can_start(&m), "a draining model starts nothing new");
    m.draining = false;
    m.state = SCHED_LOADING;
    cr_expect_not(sched_policy_can_start(&m), "not ready yet");
}

Test(sched_policy, a_start_uses_up_the_turn_only_while_another_model_waits_for_memory) {
    struct sched_policy_model m[] = {resident(0, 4), resident(1, 4), unloaded(0, 6)};
    m[0].waiting = 1;
    m[2].waiting = 0;
    cr_expect_not(sched_policy_counts_turn(m, 3, 0), "nobody else waits");
    m[1].waiting = 2;
    cr_expect_not(sched_policy_counts_turn(m, 3, 0), "model 1 waits, but holds its engine");
    m[2].waiting = 1;
    cr_expect(sched_policy_counts_turn(m, 3, 0), "model 2 waits for memory");
    cr_expect_not(sched_policy_counts_turn(m, 3, 2), "its own wait does not count");
}

Test(sched_policy, the_turn_ends_after_group_limit_starts_or_max_wait_from_readiness) {
    struct sched_policy p = policy();
    struct sched_policy_model r = resident(0, 4);
    r.group_count = 2;
    cr_expect_not(sched_policy_turn_over(&p, &r, NOW - 1999, NOW));
    cr_expect(sched_policy_turn_over(&p, &r, NOW - 2000, NOW), "held the device for max_wait");
    r.group_count = 3;
    cr_expect(sched_policy_turn_over(&p, &r, NOW - 10, NOW), "started group_limit jobs");
    r.group_count = 0;
    r.ready_at_ms = NOW - 500; /* a slow load: the job waited 5 s, r is ready since 0.5 s */
    cr_expect_not(sched_policy_turn_over(&p, &r, NOW - 5000, NOW),
                  "the wait counts from the resident's readiness");
    cr_expect(sched_policy_turn_over(&p, &r, NOW - 5000, NOW + 1500));
}

/* --- what goes ------------------------------------------------------------------------------- */

Test(sched_policy, victims_go_by_priority_then_least_recently_used) {
    struct sched_policy p = policy();
    struct sched_policy_model m[] = {resident(0, 2), resident(0, 2), resident(0, 2),
                                     resident(0, 2), unloaded(0, 6)};
    m[0].priority = 1, m[0].last_used_ms = NOW - 90000; /* oldest, but a higher priority */
    m[1].last_used_ms = NOW - 20000;
    m[2].last_used_ms = NOW - 30000;
    m[3].last_used_ms = NOW - 10000;
    size_t v[5], n;
    struct sched_policy_ask a = ask_for(4, 100);
    /* 8 GiB used; 6 more need 6 freed: three of the four go */
    cr_assert(sched_policy_victims(&p, m, 5, &a, v, &n));
    cr_assert_eq(n, 3);
    cr_expect_eq(v[0], 2);
    cr_expect_eq(v[1], 1);
    cr_expect_eq(v[2], 3);
}

Test(sched_policy, a_pinned_model_never_goes) {
    struct sched_policy p = policy();
    struct sched_policy_model m[] = {resident(0, 4), resident(0, 4), unloaded(0, 4)};
    m[0].pin = true;
    m[0].last_used_ms = NOW - 99999;
    size_t v[3], n;
    struct sched_policy_ask a = ask_for(2, 100);
    cr_assert(sched_policy_victims(&p, m, 3, &a, v, &n));
    cr_assert_eq(n, 1);
    cr_expect_eq(v[0], 1, "the unpinned one goes, although used more recently");
    m[1].pin = true;
    cr_expect_not(sched_policy_victims(&p, m, 3, &a, v, &n));
    cr_expect_eq(n, 0);
    cr_expect_eq(sched_policy_room(&p, m, 3, &a, v, &n), SCHED_POLICY_ROOM_WAIT);
}

Test(sched_policy, only_a_model_whose_memory_helps_goes) {
    struct sched_policy p = policy();
    struct sched_policy_model m[] = {resident(1, 8), resident(PLACE_CPU, 0), resident(0, 6),
                                     unloaded(0, 4)};
    m[0].last_used_ms = NOW - 99000; /* on the other GPU */
    m[1].last_used_ms = NOW - 98000; /* on the CPU */
    size_t v[4], n;
    struct sched_policy_ask a = ask_for(3, 100);
    cr_assert(sched_policy_victims(&p, m, 4, &a, v, &n));
    cr_assert_eq(n, 1);
    cr_expect_eq(v[0], 2, "GPU 0 lacks memory: only its resident helps");
    m[3].host_bytes = 30 * GIB; /* now the host lacks memory too */
    cr_assert(sched_policy_victims(&p, m, 4, &a, v, &n));
    cr_expect_eq(n, 2);
    cr_expect_eq(v[0], 0, "the other GPU's model frees host memory");
    cr_expect_eq(v[1], 2);
}

Test(sched_policy, a_busy_resident_goes_only_after_its_turn) {
    struct sched_policy p = policy();
    struct sched_policy_model m[] = {resident(0, 6), unloaded(0, 6)};
    m[0].running = 1;
    m[0].group_count = 1;
    m[0].last_used_ms = NOW - 100;
    size_t v[2], n;
    struct sched_policy_ask a = ask_for(1, 1000);
    cr_expect_not(sched_policy_victims(&p, m, 2, &a, v, &n), "busy, and its turn goes on");
    cr_expect_eq(sched_policy_room(&p, m, 2, &a, v, &n), SCHED_POLICY_ROOM_WAIT);
    a = ask_for(1, 2000);
    cr_expect(sched_policy_victims(&p, m, 2, &a, v, &n), "the job waited max_wait");
    cr_expect_eq(n, 1);
    a = ask_for(1, 1000);
    m[0].group_count = 3;
    cr_expect_eq(sched_policy_room(&p, m, 2, &a, v, &n), SCHED_POLICY_ROOM_EVICT,
                 "it started group_limit jobs while the job waited");
    cr_expect_eq(n, 1);
    cr_expect_eq(v[0], 0);
    m[0].group_count = 0;
    m[0].draining = true;
    cr_expect(sched_policy_victims(&p, m, 2, &a, v, &n), "a draining one is already chosen");
}

Test(sched_policy, an_idle_resident_lingers_for_its_client) {
    struct sched_policy p = policy();
    struct sched_policy_model m[] = {resident(0, 6), unloaded(0, 6)};
    m[0].last_used_ms = NOW - (SCHED_POLICY_LINGER_MS - 1);
    size_t v[2], n;
    struct sched_policy_ask a = ask_for(1, 100);
    cr_expect_not(sched_policy_victims(&p, m, 2, &a, v, &n), "its client may come back");
    m[0].last_used_ms = NOW - SCHED_POLICY_LINGER_MS;
    cr_expect(sched_policy_victims(&p, m, 2, &a, v, &n), "the linger is over");
    m[0].last_used_ms = NOW - 1;
    m[0].handed_off = true;
    cr_expect(sched_policy_victims(&p, m, 2, &a, v, &n), "its client moved on to the next stage");
    m[0].handed_off = false;
    m[0].group_count = 3;
    cr_expect(sched_policy_victims(&p, m, 2, &a, v, &n), "its turn is over");
}

Test(sched_policy, idle_residents_go_before_busy_ones) {
    struct sched_policy p = policy();
    struct sched_policy_model m[] = {resident(0, 3), resident(0, 3), unloaded(0, 6)};
    m[0].running = 1, m[0].group_count = 3, m[0].last_used_ms = NOW - 99000; /* busy, turn over */
    m[1].last_used_ms = NOW - 1000;                                           /* idle */
    size_t v[3], n;
    struct sched_policy_ask a = ask_for(2, 100);
    cr_assert(sched_policy_victims(&p, m, 3, &a, v, &n));
    cr_assert_eq(n, 2, "6 GiB used, 6 more: both go");
    cr_expect_eq(v[0], 1, "the idle one first, although used more recently");
    cr_expect_eq(v[1], 0);
}

Test(sched_policy, an_admin_load_takes_idle_residents_only_and_at_once) {
    struct sched_policy p = policy();
    struct sched_policy_model m[] = {resident(0, 4), resident(0, 4), unloaded(0, 4)};
    m[0].last_used_ms = NOW - 1; /* within the linger: an admin load does not wait */
    m[1].running = 1, m[1].group_count = 9;
    size_t v[3], n;
    struct sched_policy_ask a = {.model = 2, .admin = true};
    cr_assert(sched_policy_victims(&p, m, 3, &a, v, &n));
    cr_assert_eq(n, 1);
    cr_expect_eq(v[0], 0);
    m[0].waiting = 1;
    cr_expect_not(sched_policy_victims(&p, m, 3, &a, v, &n), "no busy one, whatever its turn");
}

/* --- decisions ------------------------------------------------------------------------------- */

Test(sched_policy, room_loads_waits_for_settling_engines_or_evicts) {
    struct sched_policy p = policy();
    struct sched_policy_model m[] = {resident(0, 4), resident(1, 4), unloaded(0, 4)};
    size_t v[3], n;
    struct sched_policy_ask a = ask_for(2, 100);
    cr_expect_eq(sched_policy_room(&p, m, 3, &a, v, &n), SCHED_POLICY_ROOM_LOAD);
    m[2].gpu_bytes = 6 * GIB;
    m[1].state = SCHED_STOPPING;
    cr_expect_eq(sched_policy_room(&p, m, 3, &a, v, &n), SCHED_POLICY_ROOM_SETTLING,
                 "an engine stopping anywhere: its memory is on its way");
    m[1].state = SCHED_LOADING;
    cr_expect_eq(sched_policy_room(&p, m, 3, &a, v, &n), SCHED_POLICY_ROOM_SETTLING);
    m[1].state = SCHED_RESIDENT;
    cr_expect_eq(sched_policy_room(&p, m, 3, &a, v, &n), SCHED_POLICY_ROOM_EVICT);
    cr_assert_eq(n, 1);
    cr_expect_eq(v[0], 0);
}

Test(sched_policy, lookahead_loads_when_it_fits_else_reads_ahead) {
    struct sched_policy p = policy();
    struct sched_policy_model m[] = {resident(0, 4), unloaded(0, 4)};
    cr_expect_eq(sched_policy_lookahead(&p, m, 2, 1, NOW), SCHED_POLICY_AHEAD_LOAD);
    m[1].gpu_bytes = 5 * GIB;
    cr_expect_eq(sched_policy_lookahead(&p, m, 2, 1, NOW), SCHED_POLICY_AHEAD_PREFETCH);
    m[1].retry_at_ms = NOW + 1;
    cr_expect_eq(sched_policy_lookahead(&p, m, 2, 1, NOW), SCHED_POLICY_AHEAD_NONE,
                 "backing off");
    m[1].retry_at_ms = 0;
    m[1].state = SCHED_LOADING;
    cr_expect_eq(sched_policy_lookahead(&p, m, 2, 1, NOW), SCHED_POLICY_AHEAD_NONE,
                 "it has an engine");
}

Test(sched_policy, a_deadline_is_refused_only_when_the_expected_load_ends_after_it) {
    struct sched_policy_model m = unloaded(0, 4);
    cr_expect_not(sched_policy_loads_past(&m, NOW + 1, NOW), "no load time known");
    m.load_estimate_ms = 3000;
    cr_expect(sched_policy_loads_past(&m, NOW + 2999, NOW));
    cr_expect_not(sched_policy_loads_past(&m, NOW + 3000, NOW));
    cr_expect_not(sched_policy_loads_past(&m, 0, NOW), "no deadline");
    m.ready_ms = 1000; /* measured here: it wins over the estimate */
    cr_expect_not(sched_policy_loads_past(&m, NOW + 1500, NOW));
    m.state = SCHED_LOADING;
    m.load_started_ms = NOW - 800;
    cr_expect(sched_policy_loads_past(&m, NOW + 199, NOW), "200 ms of the load are left");
    cr_expect_not(sched_policy_loads_past(&m, NOW + 200, NOW));
    m.state = SCHED_RESIDENT;
    cr_expect_not(sched_policy_loads_past(&m, NOW + 1, NOW), "a ready engine never refuses");
}

Test(sched_policy, keep_alive_counts_down_from_the_last_use) {
    struct sched_policy_model m = resident(0, 4);
    cr_expect_eq(sched_policy_until_unload(&m, NOW), -1, "kept forever");
    m.keep_alive_ms = 300000;
    cr_expect_eq(sched_policy_until_unload(&m, NOW), 240000);
    m.keep_alive_ms = 1000;
    cr_expect_eq(sched_policy_until_unload(&m, NOW), 0, "overdue");
    m.keep_alive_ms = 300000;
    m.running = 1;
    cr_expect_eq(sched_policy_until_unload(&m, NOW), -1, "busy");
    m.running = 0;
    m.pin = true;
    cr_expect_eq(sched_policy_until_unload(&m, NOW), -1, "pinned");
    m.pin = false;
    m.state = SCHED_LOADING;
    cr_expect_eq(sched_policy_until_unload(&m, NOW), -1, "not resident");
}

Test(sched_policy, the_backoff_doubles_to_five_minutes) {
    cr_expect_eq(sched_policy_backoff_ms(0), 2000);
    cr_expect_eq(sched_policy_backoff_ms(1), 4000);
    cr_expect_eq(sched_policy_backoff_ms(6), 128000);
    cr_expect_eq(sched_policy_backoff_ms(7), 256000);
    cr_expect_eq(sched_policy_backoff_ms(8), 300000);
    cr_expect_eq(sched_policy_backoff_ms(4000000000u), 300000);
}
