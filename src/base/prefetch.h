/* prefetch.h: bring a file into the page cache ahead of its use, off the
 * caller's thread.
 *
 * A model's next load reads gigabytes of weights; when they are already in
 * the page cache, the load is a copy instead of disk reads. prefetch_start
 * hands the file to a detached thread that asks the kernel to read it ahead
 * (posix_fadvise POSIX_FADV_WILLNEED) and then touches it in large reads, so
 * that the event loop never waits on the disk. */
#ifndef TANDEM_PREFETCH_H
#define TANDEM_PREFETCH_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

/* Starts reading path into the page cache in the background when host RAM
 * allows: MemAvailable must exceed the file's size by margin bytes (else
 * TANDEM_ERR_TOOBIG, and nothing starts). Returns TANDEM_ERR_IO when the
 * file cannot be opened or stat'ed, TANDEM_ERR_NOMEM / TANDEM_ERR_SPAWN when
 * the thread cannot start. path is copied. */
tandem_err prefetch_start(const char *path, uint64_t margin);

/* Drops path's pages from the page cache (posix_fadvise
 * POSIX_FADV_DONTNEED; the file alone, never the system's cache), for
 * measurements with a cold cache. Returns TANDEM_ERR_IO when it cannot be
 * opened. */
tandem_err prefetch_drop(const char *path);

/* How many bytes of path are in the page cache now (mincore over a
 * mapping), into *resident (output), and the file's size into *size.
 * Returns TANDEM_ERR_IO when it cannot be opened or mapped. */
tandem_err prefetch_resident(const char *path, uint64_t *resident, uint64_t *size);

#endif
