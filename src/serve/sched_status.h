/* sched_status.h: what the scheduler shows of itself: metrics, events, and
 * (sched.h's sched_status_json and sched_memory_json) its state as JSON.
 * Private to the scheduler: only serve/sched*.c include it. */
#ifndef TANDEM_SCHED_STATUS_H
#define TANDEM_SCHED_STATUS_H

#include <event2/event.h>
#include <jansson.h>

#include "serve/sched_internal.h"

/* Registers the scheduler's metrics in s->p.metrics (when set), into s->m_*. */
void sched_status_metrics_register(struct sched *s);

/* Adds v to metric (NULL = none) under m's name. */
void sched_status_count(struct prom_metric *metric, const struct sched_model *m, double v);

/* m's state or jobs changed: sets its gauges and the queue's, and schedules a
 * queue event (coalesced). */
void sched_status_publish_state(struct sched_model *m);

/* Publishes event type about m: {"model": name, ...fields}; takes fields
 * (a new reference or NULL). */
void sched_status_publish(struct sched_model *m, const char *type, json_t *fields);

/* Publishes a `loading` event with m's last load progress sample. */
void sched_status_publish_loading(struct sched_model *m);

/* Timer callbacks (arg = the scheduler): the coalesced queue event, and the
 * periodic memory sample (published only while someone subscribes). */
void sched_status_queue_event(evutil_socket_t fd, short what, void *arg);
void sched_status_memory_event(evutil_socket_t fd, short what, void *arg);

#endif
