/* drain.c: the drain state machine of the daemon (daemon.c).
 *
 * A stop signal turns /health to 503 at once, so that gateways take the node
 * out, while requests are still admitted for limits.drain_delay; then the
 * daemon stops admitting and lets admitted requests finish within
 * shutdown.grace. A second signal ends everything now. The transitions are
 * pure, so that they can be tested without a server: the daemon carries out
 * the actions drain_next() returns (drain.h draws the table). */
#include "serve/drain.h"

unsigned drain_next(enum drain_state *state, enum drain_event event, int64_t delay_ms) {
    switch (*state) {
    case DRAIN_STATE_SERVING:
        if (event != DRAIN_EVENT_SIGNAL)
            return 0;
        *state = delay_ms > 0 ? DRAIN_STATE_DELAYING : DRAIN_STATE_STOPPING;
        return DRAIN_ACTION_ANNOUNCE |
               (delay_ms > 0 ? DRAIN_ACTION_ARM_DELAY : DRAIN_ACTION_STOP_ADMITTING);
    case DRAIN_STATE_DELAYING:
        *state = DRAIN_STATE_STOPPING;
        return event == DRAIN_EVENT_DELAY_OVER
                   ? DRAIN_ACTION_STOP_ADMITTING
                   : DRAIN_ACTION_CANCEL_DELAY | DRAIN_ACTION_STOP_ADMITTING |
                         DRAIN_ACTION_END_NOW;
    case DRAIN_STATE_STOPPING:
        return event == DRAIN_EVENT_SIGNAL ? DRAIN_ACTION_END_NOW : 0;
    }
    return 0;
}
