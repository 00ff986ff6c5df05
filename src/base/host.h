/* host.h: facts about the host machine that planning and `doctor` need. */
#ifndef TANDEM_HOST_H
#define TANDEM_HOST_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "base/err.h"

struct host_memory {
    uint64_t total_bytes;     /* MemTotal */
    uint64_t available_bytes; /* MemAvailable: what new processes can get */
};

/* Parses the text of /proc/meminfo (NUL-terminated) into *out.
 * Returns TANDEM_ERR_FORMAT when MemTotal or MemAvailable is missing or
 * malformed, TANDEM_ERR_RANGE when a value overflows 64 bits. */
tandem_err host_memory_parse(const char *meminfo, struct host_memory *out);

/* Reads and parses /proc/meminfo into *out. Returns TANDEM_ERR_IO when the
 * file cannot be read, else as host_memory_parse(). */
tandem_err host_memory_read(struct host_memory *out);

/* Reads the number after field (e.g. "VmRSS:", with its colon) in
 * /proc/<pid>/<file> ("status", "io") into *out (output; as written there:
 * status gives kB). Returns TANDEM_ERR_IO when the file cannot be read (the
 * process is gone), TANDEM_ERR_NOTFOUND when no line has field. */
tandem_err host_proc_field(long pid, const char *file, const char *field, uint64_t *out);

/* The number of CPUs this process may run on: its affinity mask (taskset,
 * a cgroup cpuset, systemd's CPUAffinity=), else the CPUs online; at least 1.
 * Engines given more threads than this spin against each other. */
unsigned host_cpus(void);

/* Milliseconds on the monotonic clock (CLOCK_MONOTONIC): for deadlines and
 * durations, never for wall time. */
int64_t host_now_ms(void);

/* The wall-clock time (CLOCK_REALTIME) ms milliseconds from now, as
 * pthread_cond_timedwait takes its deadline. */
struct timespec host_wall_after_ms(int64_t ms);

/* Writes data[0..len) to path through a temporary file beside it and a
 * rename, so that path holds the old bytes or the new ones, never a part.
 * Returns TANDEM_OK, TANDEM_ERR_NOMEM, or TANDEM_ERR_IO with errno set (the
 * temporary file is removed). */
tandem_err host_write_atomic(const char *path, const void *data, size_t len);

/* The file name of path: the part after its last '/' (path itself when it
 * has none). Borrowed from path. */
const char *host_base_name(const char *path);

/* Removes path and, for a folder, everything below it, depth first and
 * without following links; what cannot be removed is left. */
void host_remove_tree(const char *path);

#endif
