/* drain.h: the daemon's drain as a pure state machine (drain.c): which
 * state a stop signal or the end of the drain delay leads to, and what the
 * daemon must do on the way. */
#ifndef TANDEM_DRAIN_H
#define TANDEM_DRAIN_H

#include <stdint.h>

enum drain_state {
    DRAIN_STATE_SERVING,  /* no stop signal yet */
    DRAIN_STATE_DELAYING, /* /health says 503; requests still admitted for the drain delay */
    DRAIN_STATE_STOPPING, /* no new requests; admitted ones finish, then the engines stop */
};

enum drain_event {
    DRAIN_EVENT_SIGNAL,     /* SIGTERM or SIGINT */
    DRAIN_EVENT_DELAY_OVER, /* the drain delay's timer fired */
};

/* What the daemon does for a transition, as bits, to be done in this order. */
enum drain_action {
    DRAIN_ACTION_ANNOUNCE = 1 << 0,       /* STOPPING=1, the log line, /health 503 */
    DRAIN_ACTION_ARM_DELAY = 1 << 1,      /* start the drain delay's timer */
    DRAIN_ACTION_CANCEL_DELAY = 1 << 2,   /* stop that timer */
    DRAIN_ACTION_STOP_ADMITTING = 1 << 3, /* refuse new requests, start shutdown.grace */
    DRAIN_ACTION_END_NOW = 1 << 4,        /* end every request and engine now */
};

/* Moves *state (in-out) on event, with delay_ms the drain delay (<= 0 =
 * none), and returns the drain_action bits to carry out:
 *   SERVING  --signal--> DELAYING  ANNOUNCE | ARM_DELAY          (delay > 0)
 *   SERVING  --signal--> STOPPING  ANNOUNCE | STOP_ADMITTING     (no delay)
 *   DELAYING --delay---> STOPPING  STOP_ADMITTING
 *   DELAYING --signal--> STOPPING  CANCEL_DELAY | STOP_ADMITTING | END_NOW
 *   STOPPING --signal--> STOPPING  END_NOW
 * Any other event changes nothing and returns 0. */
unsigned drain_next(enum drain_state *state, enum drain_event event, int64_t delay_ms);

#endif
