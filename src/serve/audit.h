/* audit.h: the request audit log, one JSON object per line (JSONL).
 *
 * Each record is formatted in full, then written with a single write(2) to a
 * file opened O_APPEND, so a crash of tandem (even SIGKILL) can lose at most
 * the record being written and never corrupt earlier lines; a torn last line
 * is detectable as invalid JSON and is the only possible damage. When the
 * file would grow past max_bytes it is rotated first: audit.jsonl ->
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

/* Closes the log. audit_free(NULL) is a no-op. */
void audit_free(struct audit *a);

/* Appends record (borrowed; serialised compact, one line, keys in insertion
 * order) plus "\n", rotating first when needed. Returns TANDEM_ERR_IO (the
 * daemon logs it and keeps serving), TANDEM_ERR_NOMEM, TANDEM_ERR_TOOBIG for
 * a record over 1 MiB. */
tandem_err audit_write(struct audit *a, const json_t *record);

#endif
