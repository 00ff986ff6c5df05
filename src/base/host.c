/* host.c: host memory from /proc/meminfo, the monotonic clock, atomic file writes.
 *
 * Lines look like "MemAvailable:   22071236 kB". Parsing is strict: a key must
 * start a line, be followed by a colon, digits and the "kB" unit; anything
 * else is a format error rather than a guess. */
#include "base/host.h"

#include <ctype.h>
#include <errno.h>
#include <ftw.h>
#include <sched.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/mem.h"

/* Finds "key:" at the start of a line and parses its kB value into bytes. */
static tandem_err field_bytes(const char *text, const char *key, uint64_t *out) {
    size_t klen = strlen(key);
    for (const char *line = text; line && *line;) {
        if (!strncmp(line, key, klen) && line[klen] == ':') {
            const char *p = line + klen + 1;
            while (*p == ' ' || *p == '\t')
                p++;
            if (!isdigit((unsigned char)*p))
                return TANDEM_ERR_FORMAT;
            uint64_t kib = 0;
            for (; isdigit((unsigned char)*p); p++) {
                unsigned d = (unsigned)(*p - '0');
                if (kib > (UINT64_MAX / 1024 - d) / 10)
                    return TANDEM_ERR_RANGE;
                kib = kib * 10 + d;
            }
            if (strncmp(p, " kB", 3))
                return TANDEM_ERR_FORMAT;
            *out = kib * 1024;
            return TANDEM_OK;
        }
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return TANDEM_ERR_FORMAT;
}

tandem_err host_memory_parse(const char *meminfo, struct host_memory *out) {
    struct host_memory m;
    tandem_err e = field_bytes(meminfo, "MemTotal", &m.total_bytes);
    if (e == TANDEM_OK)
        e = field_bytes(meminfo, "MemAvailable", &m.available_bytes);
    if (e == TANDEM_OK)
        *out = m;
    return e;
}

tandem_err host_memory_read(struct host_memory *out) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return TANDEM_ERR_IO;
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return TANDEM_ERR_IO;
    text[n] = '\0';
    return host_memory_parse(text, out);
}

unsigned host_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return (unsigned)CPU_COUNT(&set);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (unsigned)online : 1;
}

int64_t host_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct timespec host_wall_after_ms(int64_t ms) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += (time_t)(ms / 1000);
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

tandem_err host_proc_field(long pid, const char *file, const char *field, uint64_t *out) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/%s", pid, file);
    FILE *f = fopen(path, "r");
    if (!f)
        return TANDEM_ERR_IO;
    size_t n = strlen(field);
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = !strncmp(line, field, n) && sscanf(line + n, "%" SCNu64, out) == 1;
    fclose(f);
    return found ? TANDEM_OK : TANDEM_ERR_NOTFOUND;
}

tandem_err host_write_atomic(const char *path, const void *data, size_t len) {
    size_t n = strlen(path) + 32;
    char *tmp = mem_alloc(n);
    if (!tmp)
        return TANDEM_ERR_NOMEM;
    snprintf(tmp, n, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(data, 1, len, f) == len;
    if (f && fclose(f) != 0)
        ok = false;
    if (ok && rename(tmp, path) != 0)
        ok = false;
    if (!ok) {
        int saved = errno;
        unlink(tmp);
        errno = saved;
    }
    mem_free(tmp);
    return ok ? TANDEM_OK : TANDEM_ERR_IO;
}

const char *host_base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

void host_remove_tree(const char *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }
