/* engine_progress.c: a llama-server child's load phase and weight fraction.
 *
 * Each poll reads what the log gained since the last one (a bounded read
 * from a kept offset; a marker split across two reads is still found, since
 * the previous read's tail is kept) and the child's RssFile and rchar. The
 * baselines are the last values seen before the weights phase, so that the
 * engine's own shared libraries and the metadata reads do not count. */
#include "engine/engine_progress.h"

#include <stdio.h>
#include <string.h>

#include "base/host.h"
#include "base/mem.h"

#define LOG_READ_MAX 65536
#define TAIL_KEEP 64 /* longer than any marker */

static const char MARK_WEIGHTS[] = "load_tensors:";
static const char MARK_WARMUP[] = "llama_context: constructing";

struct engine_progress {
    pid_t pid;
    char *log_path;
    uint64_t file_bytes;
    long log_offset;
    char tail[TAIL_KEEP + 1];
    enum engine_phase phase;
    uint64_t rss_base, rchar_base;
    double fraction, reported_fraction;
    enum engine_phase reported_phase;
    int64_t t0;
};

const char *engine_phase_name(enum engine_phase phase) {
    static const char *const names[] = {"spawn", "reading weights", "warmup", "ready"};
    return names[phase];
}

struct engine_progress *engine_progress_new(pid_t pid, const char *log_path, uint64_t file_bytes) {
    struct engine_progress *p = mem_calloc(1, sizeof *p);
    if (!p || !(p->log_path = mem_strdup(log_path))) {
        mem_free(p);
        return NULL;
    }
    p->pid = pid;
    p->file_bytes = file_bytes;
    p->fraction = p->reported_fraction = -1;
    p->t0 = host_now_ms();
    return p;
}

void engine_progress_free(struct engine_progress *p) {
    if (!p)
        return;
    mem_free(p->log_path);
    mem_free(p);
}

/* The child's mapped file pages and read(2) bytes; false when it is gone. */
static bool read_proc(pid_t pid, uint64_t *rss_file, uint64_t *rchar) {
    if (host_proc_field((long)pid, "status", "RssFile:", rss_file) != TANDEM_OK)
        return false;
    *rss_file *= 1024;
    if (host_proc_field((long)pid, "io", "rchar:", rchar) != TANDEM_OK)
        *rchar = 0;
    return true;
}

/* Advances the phase on the markers the log gained since the last read. */
static void read_log(struct engine_progress *p) {
    FILE *f = fopen(p->log_path, "r");
    if (!f)
        return;
    char buf[TAIL_KEEP + LOG_READ_MAX + 1];
    size_t kept = strlen(p->tail);
    memcpy(buf, p->tail, kept);
    size_t got = fseek(f, p->log_offset, SEEK_SET) == 0 ? fread(buf + kept, 1, LOG_READ_MAX, f) : 0;
    fclose(f);
    p->log_offset += (long)got;
    buf[kept + got] = '\0';
    for (size_t i = 0; i < kept + got; i++) /* the log may hold NULs: scan past them */
        if (!buf[i])
            buf[i] = ' ';
    if (p->phase == ENGINE_PHASE_SPAWN && strstr(buf, MARK_WEIGHTS))
        p->phase = ENGINE_PHASE_WEIGHTS;
    if (p->phase == ENGINE_PHASE_WEIGHTS && strstr(buf, MARK_WARMUP))
        p->phase = ENGINE_PHASE_WARMUP;
    size_t n = kept + got, keep = n < TAIL_KEEP ? n : TAIL_KEEP;
    memcpy(p->tail, buf + n - keep, keep);
    p->tail[keep] = '\0';
}

static double weights_fraction(const struct engine_progress *p, uint64_t rss, uint64_t rchar) {
    uint64_t rss_grew = rss > p->rss_base ? rss - p->rss_base : 0;
    uint64_t read_grew = rchar > p->rchar_base ? rchar - p->rchar_base : 0;
    uint64_t grew = rss_grew > read_grew ? rss_grew : read_grew;
    double f = p->file_bytes ? (double)grew / (double)p->file_bytes : 0;
    return f > 1 ? 1 : f;
}

static void fill(const struct engine_progress *p, struct engine_progress_sample *out) {
    *out = (struct engine_progress_sample){p->phase, p->fraction, host_now_ms() - p->t0};
}

/* Whether the sample differs enough from the last one reported; records it. */
static bool report(struct engine_progress *p, double step) {
    bool moved = p->phase != p->reported_phase ||
                 (p->fraction >= 0 && (p->fraction - p->reported_fraction >= step ||
                                       (p->fraction >= 1 && p->reported_fraction < 1)));
    if (moved) {
        p->reported_phase = p->phase;
        p->reported_fraction = p->fraction;
    }
    return moved;
}

bool engine_progress_poll(struct engine_progress *p, double step,
                          struct engine_progress_sample *out) {
    uint64_t rss = 0, rchar = 0;
    bool alive = p->phase < ENGINE_PHASE_READY && read_proc(p->pid, &rss, &rchar);
    if (alive && p->phase == ENGINE_PHASE_SPAWN)
        p->rss_base = rss, p->rchar_base = rchar;
    read_log(p);
    if (alive && p->phase == ENGINE_PHASE_WEIGHTS) {
        double f = weights_fraction(p, rss, rchar);
        p->fraction = f > p->fraction ? f : p->fraction;
    }
    if (p->phase >= ENGINE_PHASE_WARMUP) /* the engine has read every tensor */
        p->fraction = 1;
    fill(p, out);
    return report(p, step);
}

void engine_progress_ready(struct engine_progress *p, struct engine_progress_sample *out) {
    p->phase = ENGINE_PHASE_READY;
    p->fraction = 1;
    report(p, 0);
    fill(p, out);
}
