/* Unit tests for drain: every transition of the daemon's drain state
 * machine and the actions it asks for, in the orders signals can come. */
#include <criterion/criterion.h>

#include "serve/drain.h"

Test(drain, a_signal_with_a_delay_keeps_admitting_until_it_is_over) {
    enum drain_state s = DRAIN_STATE_SERVING;
    cr_expect_eq(drain_next(&s, DRAIN_EVENT_SIGNAL, 5000),
                 DRAIN_ACTION_ANNOUNCE | DRAIN_ACTION_ARM_DELAY);
    cr_expect_eq(s, DRAIN_STATE_DELAYING);
    cr_expect_eq(drain_next(&s, DRAIN_EVENT_DELAY_OVER, 5000), DRAIN_ACTION_STOP_ADMITTING);
    cr_expect_eq(s, DRAIN_STATE_STOPPING);
}

Test(drain, no_delay_stops_admitting_at_once) {
    for (int64_t delay = -1; delay <= 0; delay++) {
        enum drain_state s = DRAIN_STATE_SERVING;
        cr_expect_eq(drain_next(&s, DRAIN_EVENT_SIGNAL, delay),
                     DRAIN_ACTION_ANNOUNCE | DRAIN_ACTION_STOP_ADMITTING);
        cr_expect_eq(s, DRAIN_STATE_STOPPING);
    }
}

Test(drain, a_second_signal_during_the_delay_ends_everything_now) {
    enum drain_state s = DRAIN_STATE_DELAYING;
    cr_expect_eq(drain_next(&s, DRAIN_EVENT_SIGNAL, 5000),
                 DRAIN_ACTION_CANCEL_DELAY | DRAIN_ACTION_STOP_ADMITTING | DRAIN_ACTION_END_NOW);
    cr_expect_eq(s, DRAIN_STATE_STOPPING);
}

Test(drain, a_signal_while_stopping_ends_everything_now) {
    enum drain_state s = DRAIN_STATE_STOPPING;
    cr_expect_eq(drain_next(&s, DRAIN_EVENT_SIGNAL, 5000), DRAIN_ACTION_END_NOW);
    cr_expect_eq(s, DRAIN_STATE_STOPPING);
    cr_expect_eq(drain_next(&s, DRAIN_EVENT_SIGNAL, 0), DRAIN_ACTION_END_NOW);
    cr_expect_eq(s, DRAIN_STATE_STOPPING);
}

Test(drain, a_late_delay_event_changes_nothing) {
    enum drain_state s = DRAIN_STATE_SERVING;
    cr_expect_eq(drain_next(&s, DRAIN_EVENT_DELAY_OVER, 5000), 0);
    cr_expect_eq(s, DRAIN_STATE_SERVING);
    s = DRAIN_STATE_STOPPING;
    cr_expect_eq(drain_next(&s, DRAIN_EVENT_DELAY_OVER, 5000), 0);
    cr_expect_eq(s, DRAIN_STATE_STOPPING);
}
