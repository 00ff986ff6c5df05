/* audit.h: the request audit log, one JSON object per line (JSONL).
 *
 * Each record is formatted in full, then written with a single write(2) to a
 * file opened O_APPEND, so a crash of tandem (even SIGKILL) can lose at most
 * the record being written and never corrupt earlier lines; a torn last line
 * is detectable as invalid JSON and is the only possible damage; a write
 * that fails half way (a full disk) is truncated back, never left torn. A
 * line that cannot be written (a failed rotation included) waits in a
 * bounded queue in memory and is written, in order, before the next one
 * (audit_flush retries the queue alone; the daemon calls it every second).
 * When the file would grow past max_bytes it is rotated first: audit.jsonl ->
 * audit.jsonl.1 -> ... -> .keep (the oldest is deleted). */
#ifndef TANDEM_AUDIT_H
#define TANDEM_AUDIT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct audit; /* opaque */

/* Opens (creating, mode 0600, and creating the parent directory if missing)
 * the log at path. max_bytes 0 = never rotate; keep = rotated files kept
 * (0 = rotation truncates). On success *out is a new handle (caller frees
 * with audit_free). Returns TANDEM_ERR_IO with err naming the path. */
tandem_err audit_open(const char *path, uint64_t max_bytes, uint32_t keep, struct audit **out,
                      char *err, size_t errlen);

/* Writes what it can of the pending lines (the rest are lost: call
 * audit_flush first to know) and closes the log. audit_free(NULL) is a
 * no-op. */
void audit_free(struct audit *a);

/* Appends record (borrowed; serialised compact, one line, keys in insertion
 * order) plus "\n", after any pending lines, rotating first when needed.
 * Returns TANDEM_ERR_IO when the line could not be written now: it waits in
 * the pending queue (or, past 4 MiB of pending lines, is dropped and
 * counted). TANDEM_ERR_NOMEM, TANDEM_ERR_TOOBIG for a record over 1 MiB
 * (nothing queued; counted as dropped, like any record that cannot be
 * serialised). */
tandem_err audit_write(struct audit *a, const json_t *record);

/* Writes the pending lines, if any, oldest first, as many as the log takes
 * (each failed attempt counts in errors). TANDEM_OK when none is left,
 * TANDEM_ERR_IO when some still wait. audit_flush(NULL) is TANDEM_OK. */
tandem_err audit_flush(struct audit *a);

struct audit_stats {
    size_t pending_lines, pending_bytes; /* waiting for the disk */
    uint64_t errors;                     /* failed write attempts */
    uint64_t dropped;                    /* lines lost: the pending queue was full, or
                                          * a record could not be serialised */
    char last_error[256];                /* the last failure ("" = none) */
};

/* The log's health, for /v1/status and /metrics. */
void audit_stats(const struct audit *a, struct audit_stats *out);

#endif
