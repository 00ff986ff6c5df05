/* Unit tests for dcache, the decision cache: hits are the stored bytes,
 * flights coalesce identical lookups, the byte cap holds with LRU eviction,
 * and a changed model (file or settings) is never answered from the cache.
 * No scheduler: the cache is tested alone (sched NULL). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "serve/dcache.h"

#define BODY "{\"model\":\"m\",\"answers\":{\"q\":{\"type\":\"noul\",\"noul\":0.25}}}"

static char model_path[64];

/* A cache of max bytes over two models backed by a temporary file. */
static struct dcache *new_cache(uint64_t max) {
    snprintf(model_path, sizeof model_path, "/tmp/tandem-dcache-XXXXXX");
    int fd = mkstemp(model_path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, "GGUF", 4), 4);
    close(fd);
    struct dcache *c = dcache_new(max, 2, NULL);
    cr_assert(c);
    for (size_t m = 0; m < 2; m++) {
        struct dcache_model_spec spec = {.path = model_path, .engine = "/bin/sh",
                                         .settings = "ctx=512", .enabled = true};
        cr_assert_eq(dcache_model_set(c, m, &spec), TANDEM_OK);
    }
    return c;
}

static void done_cache(struct dcache *c) {
    dcache_free(c);
    unlink(model_path);
}

static struct dcache_request req(size_t model, const char *text) {
    return (struct dcache_request){.model = model, .text = text, .len = strlen(text)};
}

static void answer(struct dcache_ticket *t, int status, const char *body) {
    dcache_ticket_done(t, &(struct dcache_answer){status, body, strlen(body)});
}

/* Looks rq up, expecting a lead, and answers it with body. */
static void evaluate(struct dcache *c, const struct dcache_request *rq, const char *body) {
    struct dcache_ticket *t;
    struct dcache_answer hit;
    cr_assert_eq(dcache_lookup(c, rq, &t, &hit), DCACHE_LEAD);
    answer(t, 200, body);
}

static enum dcache_outcome look(struct dcache *c, struct dcache_request rq,
                                struct dcache_answer *hit) {
    struct dcache_ticket *t = NULL;
    enum dcache_outcome o = dcache_lookup(c, &rq, &t, hit);
    dcache_ticket_cancel(t);
    return o;
}

Test(dcache, an_evaluated_answer_is_the_next_lookups_hit_byte_for_byte) {
    struct dcache *c = new_cache(1 << 20);
    struct dcache_request rq = req(0, "{\"state\":\"s\"}");
    evaluate(c, &rq, BODY);
    struct dcache_answer hit;
    cr_assert_eq(look(c, rq, &hit), DCACHE_HIT);
    cr_expect_eq(hit.status, 200);
    cr_expect_eq(hit.len, strlen(BODY));
    cr_expect_eq(memcmp(hit.body, BODY, hit.len), 0);
    struct dcache_stats st;
    dcache_stats(c, 0, &st);
    cr_expect_eq(st.hits, 1);
    cr_expect_eq(st.misses, 1);
    cr_expect_eq(st.entries, 1);
    cr_expect_gt(st.bytes, strlen(BODY));
    done_cache(c);
}

Test(dcache, another_text_or_model_is_a_miss) {
    struct dcache *c = new_cache(1 << 20);
    evaluate(c, &(struct dcache_request){.model = 0, .text = "{\"a\":1}", .len = 7}, BODY);
    struct dcache_answer hit;
    cr_expect_eq(look(c, req(0, "{\"a\":2}"), &hit), DCACHE_LEAD);
    cr_expect_eq(look(c, req(1, "{\"a\":1}"), &hit), DCACHE_LEAD);
    cr_expect_eq(look(c, req(0, "{\"a\":1}"), &hit), DCACHE_HIT);
    done_cache(c);
}

Test(dcache, an_error_is_not_kept) {
    struct dcache *c = new_cache(1 << 20);
    struct dcache_request rq = req(0, "{}");
    struct dcache_ticket *t;
    struct dcache_answer hit;
    cr_assert_eq(dcache_lookup(c, &rq, &t, &hit), DCACHE_LEAD);
    answer(t, 502, "{\"error\":{}}");
    cr_expect_eq(look(c, rq, &hit), DCACHE_LEAD);
    done_cache(c);
}

struct woken {
    int calls;
    bool with_answer;
    int status;
    char body[256];
    struct dcache *relook; /* when set, look up again from the callback */
    enum dcache_outcome relooked;
};

static void on_wake(void *user, const struct dcache_answer *a) {
    struct woken *w = user;
    w->calls++;
    w->with_answer = a != NULL;
    if (a) {
        w->status = a->status;
        snprintf(w->body, sizeof w->body, "%.*s", (int)a->len, a->body);
    }
    if (w->relook) {
        struct dcache_answer hit;
        struct dcache_ticket *t;
        struct dcache_request rq = req(0, "{}");
        w->relooked = dcache_lookup(w->relook, &rq, &t, &hit);
        dcache_ticket_cancel(t);
    }
}

Test(dcache, identical_lookups_in_flight_wait_for_the_leaders_answer) {
    struct dcache *c = new_cache(1 << 20);
    struct dcache_ticket *lead, *t[3];
    struct dcache_answer hit;
    struct woken w[3] = {0};
    struct dcache_request rq = req(0, "{}");
    cr_assert_eq(dcache_lookup(c, &rq, &lead, &hit), DCACHE_LEAD);
    for (int i = 0; i < 3; i++) {
        struct dcache_request wq = rq;
        wq.wake = on_wake;
        wq.user = &w[i];
        cr_assert_eq(dcache_lookup(c, &wq, &t[i], &hit), DCACHE_WAIT);
    }
    dcache_ticket_cancel(t[1]); /* its client left: it is not woken */
    answer(lead, 200, BODY);
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(w[i].calls, i == 1 ? 0 : 1);
        if (i != 1) {
            cr_expect(w[i].with_answer);
            cr_expect_str_eq(w[i].body, BODY);
        }
    }
    struct dcache_stats st;
    dcache_stats(c, SIZE_MAX, &st);
    cr_expect_eq(st.coalesced, 3);
    cr_expect_eq(st.misses, 1);
    cr_expect_eq(look(c, rq, &hit), DCACHE_HIT);
    done_cache(c);
}

Test(dcache, waiters_get_the_leaders_error_too) {
    struct dcache *c = new_cache(1 << 20);
    struct dcache_ticket *lead, *t;
    struct dcache_answer hit;
    struct woken w = {0};
    struct dcache_request rq = req(0, "{}");
    cr_assert_eq(dcache_lookup(c, &rq, &lead, &hit), DCACHE_LEAD);
    rq.wake = on_wake;
    rq.user = &w;
    cr_assert_eq(dcache_lookup(c, &rq, &t, &hit), DCACHE_WAIT);
    answer(lead, 400, "{\"error\":\"bad\"}");
    cr_expect_eq(w.calls, 1);
    cr_expect_eq(w.status, 400);
    cr_expect_str_eq(w.body, "{\"error\":\"bad\"}");
    done_cache(c);
}

Test(dcache, a_leader_that_goes_away_wakes_its_waiters_to_look_again) {
    struct dcache *c = new_cache(1 << 20);
    struct dcache_ticket *lead, *t;
    struct dcache_answer hit;
    struct woken w = {.relook = c};
    struct dcache_request rq = req(0, "{}");
    cr_assert_eq(dcache_lookup(c, &rq, &lead, &hit), DCACHE_LEAD);
    rq.wake = on_wake;
    rq.user = &w;
    cr_assert_eq(dcache_lookup(c, &rq, &t, &hit), DCACHE_WAIT);
    dcache_ticket_cancel(lead);
    cr_expect_eq(w.calls, 1);
    cr_expect_not(w.with_answer);
    cr_expect_eq(w.relooked, DCACHE_LEAD, "the woken waiter leads a new flight");
    cr_expect_eq(look(c, req(0, "{}"), &hit), DCACHE_LEAD, "nothing was kept");
    done_cache(c);
}

Test(dcache, a_waiter_never_waits_past_its_own_deadline) {
    struct dcache *c = new_cache(1 << 20);
    struct dcache_ticket *lead, *t;
    struct dcache_answer hit;
    struct dcache_request rq = req(0, "{}");
    rq.deadline_ms = 5000;
    cr_assert_eq(dcache_lookup(c, &rq, &lead, &hit), DCACHE_LEAD);
    struct dcache_request sooner = rq, none = rq;
    sooner.deadline_ms = 4000;
    cr_expect_eq(dcache_lookup(c, &sooner, &t, &hit), DCACHE_LEAD);
    answer(t, 200, BODY); /* kept: a second flight of the same key answers first */
    none.deadline_ms = 0;
    cr_expect_eq(look(c, none, &hit), DCACHE_HIT);
    dcache_ticket_cancel(lead);
    done_cache(c);
}

Test(dcache, no_cache_evaluates_and_keeps_no_store_keeps_nothing) {
    struct dcache *c = new_cache(1 << 20);
    struct dcache_request rq = req(0, "{}");
    evaluate(c, &rq, "{\"old\":1}");
    struct dcache_ticket *t;
    struct dcache_answer hit;
    struct dcache_request fresh = rq;
    fresh.no_lookup = true;
    cr_assert_eq(dcache_lookup(c, &fresh, &t, &hit), DCACHE_BYPASS);
    answer(t, 200, BODY);
    cr_assert_eq(look(c, rq, &hit), DCACHE_HIT);
    cr_expect_eq(memcmp(hit.body, "{\"old\":1}", hit.len), 0, "the entry held is the first");
    struct dcache_request other = req(1, "{}");
    other.no_store = true;
    evaluate(c, &other, BODY);
    cr_expect_eq(look(c, req(1, "{}"), &hit), DCACHE_LEAD);
    struct dcache_stats st;
    dcache_stats(c, 0, &st);
    cr_expect_eq(st.bypasses, 1);
    done_cache(c);
}

Test(dcache, the_byte_cap_holds_and_the_least_recently_used_go_first) {
    struct dcache *c = new_cache(4096);
    char text[32], body[200];
    memset(body, 'x', sizeof body - 1);
    body[sizeof body - 1] = '\0';
    evaluate(c, &(struct dcache_request){.model = 0, .text = "keep", .len = 4}, body);
    struct dcache_answer hit;
    for (int i = 0; i < 200; i++) {
        snprintf(text, sizeof text, "{\"n\":%d}", i);
        evaluate(c, &(struct dcache_request){.model = i % 2, .text = text, .len = strlen(text)},
                 body);
        cr_assert_eq(look(c, req(0, "keep"), &hit), DCACHE_HIT, "round %d", i);
        struct dcache_stats st;
        dcache_stats(c, SIZE_MAX, &st);
        cr_assert_leq(st.bytes, 4096);
    }
    struct dcache_stats st;
    dcache_stats(c, SIZE_MAX, &st);
    cr_expect_gt(st.evictions, 150);
    cr_expect_eq(look(c, req(0, "{\"n\":0}"), &hit), DCACHE_LEAD, "the oldest went");
    cr_expect_eq(look(c, req(1, "{\"n\":199}"), &hit), DCACHE_HIT, "the newest stayed");
    done_cache(c);
}

Test(dcache, an_answer_bigger_than_the_cap_is_not_kept) {
    struct dcache *c = new_cache(64);
    evaluate(c, &(struct dcache_request){.model = 0, .text = "a", .len = 1}, BODY);
    struct dcache_answer hit;
    cr_expect_eq(look(c, req(0, "a"), &hit), DCACHE_LEAD);
    done_cache(c);
}

Test(dcache, a_disabled_model_or_a_zero_cap_is_off) {
    struct dcache *c = new_cache(1 << 20);
    struct dcache_model_spec spec = {.path = model_path, .engine = "/bin/sh",
                                     .settings = "ctx=512", .enabled = false};
    cr_assert_eq(dcache_model_set(c, 1, &spec), TANDEM_OK);
    struct dcache_answer hit;
    cr_expect_eq(look(c, req(1, "{}"), &hit), DCACHE_OFF);
    cr_expect_not(dcache_model_enabled(c, 1));
    cr_expect(dcache_model_enabled(c, 0));
    cr_expect_eq(look(c, req(2, "{}"), &hit), DCACHE_OFF, "no such model");
    struct dcache *zero = dcache_new(0, 1, NULL);
    cr_expect_eq(look(zero, req(0, "{}"), &hit), DCACHE_OFF);
    dcache_free(zero);
    done_cache(c);
}

Test(dcache, a_changed_model_file_drops_its_entries_and_what_was_in_flight) {
    struct dcache *c = new_cache(1 << 20);
    evaluate(c, &(struct dcache_request){.model = 0, .text = "a", .len = 1}, BODY);
    evaluate(c, &(struct dcache_request){.model = 0, .text = "b", .len = 1}, BODY);
    struct dcache_ticket *before;
    struct dcache_answer hit;
    struct dcache_request rq = req(0, "c");
    cr_assert_eq(dcache_lookup(c, &rq, &before, &hit), DCACHE_LEAD);
    FILE *f = fopen(model_path, "a");
    cr_assert(f);
    fputs("more weights", f);
    fclose(f);
    cr_expect_eq(look(c, req(0, "a"), &hit), DCACHE_LEAD, "the file changed");
    answer(before, 200, BODY); /* computed before the change: not kept */
    cr_expect_eq(look(c, req(0, "c"), &hit), DCACHE_LEAD);
    struct dcache_stats st;
    dcache_stats(c, 0, &st);
    cr_expect_eq(st.invalidations, 2);
    cr_expect_eq(st.entries, 0);
    evaluate(c, &(struct dcache_request){.model = 0, .text = "a", .len = 1}, BODY);
    cr_expect_eq(look(c, req(0, "a"), &hit), DCACHE_HIT, "the new file's answers are kept");
    done_cache(c);
}

Test(dcache, new_settings_drop_a_models_entries_and_the_same_keep_them) {
    struct dcache *c = new_cache(1 << 20);
    evaluate(c, &(struct dcache_request){.model = 0, .text = "a", .len = 1}, BODY);
    evaluate(c, &(struct dcache_request){.model = 1, .text = "a", .len = 1}, BODY);
    struct dcache_model_spec same = {.path = model_path, .engine = "/bin/sh",
                                     .settings = "ctx=512", .enabled = true};
    struct dcache_model_spec other = same;
    other.settings = "ctx=1024";
    cr_assert_eq(dcache_model_set(c, 0, &same), TANDEM_OK);
    cr_assert_eq(dcache_model_set(c, 1, &other), TANDEM_OK);
    struct dcache_answer hit;
    cr_expect_eq(look(c, req(0, "a"), &hit), DCACHE_HIT);
    cr_expect_eq(look(c, req(1, "a"), &hit), DCACHE_LEAD);
    done_cache(c);
}

Test(dcache, clear_drops_one_models_entries_or_all) {
    struct dcache *c = new_cache(1 << 20);
    for (size_t m = 0; m < 2; m++)
        for (const char *t = "abc"; *t; t++)
            evaluate(c, &(struct dcache_request){.model = m, .text = t, .len = 1}, BODY);
    cr_expect_eq(dcache_clear(c, 1), 3);
    struct dcache_answer hit;
    cr_expect_eq(look(c, req(0, "a"), &hit), DCACHE_HIT);
    cr_expect_eq(look(c, req(1, "a"), &hit), DCACHE_LEAD);
    cr_expect_eq(dcache_clear(c, SIZE_MAX), 3);
    struct dcache_stats st;
    dcache_stats(c, SIZE_MAX, &st);
    cr_expect_eq(st.entries, 0);
    cr_expect_eq(st.bytes, 0);
    cr_expect_eq(st.invalidations, 6);
    done_cache(c);
}

Test(dcache, null_is_a_no_op) {
    dcache_free(NULL);
    dcache_ticket_done(NULL, &(struct dcache_answer){200, "", 0});
    dcache_ticket_cancel(NULL);
    cr_expect_eq(dcache_clear(NULL, SIZE_MAX), 0);
    struct dcache_stats st;
    dcache_stats(NULL, 0, &st);
    cr_expect_eq(st.entries, 0);
}
