/* sched_erase.h: the slot erase before a job that repeats its engine's last
 * prompt. Private to the scheduler: only serve/sched*.c include it. */
#ifndef TANDEM_SCHED_ERASE_H
#define TANDEM_SCHED_ERASE_H

#include "serve/sched_internal.h"

/* Starts running job j (ops->start with its engine's socket): at once, or,
 * when j's prompt key repeats the last one started on its single-slot
 * engine, once the engine's slot has been erased. Notes j's key as the
 * engine's last one. */
void sched_erase_start(struct sched_job *j);

/* Ends j's slot check or erase, if one is under way; j will not start
 * through it. */
void sched_erase_cancel(struct sched_job *j);

#endif
