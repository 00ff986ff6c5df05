/* audit.c: the JSONL request audit log.
 *
 * A record is serialised compact (jansson, keys in insertion order) into one
 * buffer with its "\n" and goes out in a single write(2) on an O_APPEND
 * descriptor (the loop around it only continues a short write, as on a
 * nearly full disk). A crash therefore loses at most the line being written:
 * SIGKILL in the middle of a large write can leave a prefix of it on disk, a
 * torn tail without "\n". audit_open finishes such a tail with "\n" before
 * anything else is appended. A write that fails after a partial write (a
 * full disk, RLIMIT_FSIZE) truncates the file back to where the line began;
 * only if that fails too is the file closed, so that the next record reopens
 * it the same way. Either way later records are whole lines of their own.
 *
 * Nothing is lost while memory allows: a line that cannot be written waits
 * in a pending queue (at most AUDIT_PENDING_MAX bytes; a line past that is
 * dropped and counted), and every later audit_write or audit_flush writes
 * the queue first, in order and a line at a time (so a disk with a little
 * room takes what fits), so lines land in the order of their requests once
 * the disk takes them again. Every failed write attempt is counted.
 *
 * Serialisation uses json_dump_callback into a mem_buf capped at the record
 * limit, rather than json_dumps: the buffer comes from mem.c (so OOM is
 * testable), the newline needs no second copy, and an oversized record stops
 * serialising as soon as it passes the cap.
 *
 * Rotation happens before the write that would take the file past max_bytes
 * (never for an empty file, so one record bigger than max_bytes still lands):
 *   keep = 0: the file is truncated in place;
 *   keep = k: path.(k-1) -> path.k (replacing the oldest), ..., path -> path.1,
 *             then path is opened afresh.
 * Each rename is atomic, so a crash mid-rotation leaves every record in some
 * file. If the new file cannot be opened, the handle is left closed (fd -1)
 * and every later audit_write retries the open first, so a transient failure
 * (a full disk, a directory briefly missing) heals by itself.
 *
 * The size is tracked in memory from fstat at open; tandem is the only writer. */
#include "serve/audit.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/mem.h"

#define AUDIT_MAX_RECORD ((size_t)1 << 20) /* bytes of JSON, the "\n" not counted */
#define AUDIT_PENDING_MAX ((size_t)4 << 20) /* lines waiting for the disk, in bytes */

struct audit {
    char *path;
    char *from, *to;    /* scratch for rotated names, rot_len bytes each */
    size_t rot_len;     /* room for path + ".<u32>" */
    int fd;             /* -1 after a failed reopen */
    uint64_t size;      /* bytes in the current file */
    uint64_t max_bytes; /* 0 = never rotate */
    uint32_t keep;
    struct mem_buf pending; /* whole lines not yet written, oldest first */
    size_t pending_lines;
    uint64_t errors, dropped;
    char last_error[256];
};

/* Creates every missing directory above the file path (mode 0700). */
static int make_parents(char *path) {
    for (char *s = strchr(path + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        int r = mkdir(path, 0700);
        int saved = errno;
        *s = '/';
        if (r != 0 && saved != EEXIST) {
            errno = saved;
            return -1;
        }
    }
    return 0;
}

/* Opens a->path for appending and sets a->size; ends a torn last line. */
static int open_log(struct audit *a) {
    int fd = open(a->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 && errno == ENOENT && make_parents(a->path) == 0)
        fd = open(a->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0)
        goto fail;
    a->size = (uint64_t)st.st_size;
    if (a->size > 0) {
        /* the descriptor is write-only, so peek at the last byte through a second one */
        char last = '\n';
        int rd = open(a->path, O_RDONLY | O_CLOEXEC);
        if (rd >= 0) {
            if (pread(rd, &last, 1, st.st_size - 1) != 1)
                last = '\n';
            close(rd);
        }
        if (last != '\n') {
            ssize_t w;
            while ((w = write(fd, "\n", 1)) < 0 && errno == EINTR)
                ;
            if (w != 1)
                goto fail;
            a->size++;
        }
    }
    a->fd = fd;
    return 0;
fail:;
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
}

tandem_err audit_open(const char *path, uint64_t max_bytes, uint32_t keep, struct audit **out,
                      char *err, size_t errlen) {
    *out = NULL;
    if (!path || !*path) {
        tandem_errmsg(err, errlen, "audit log: empty path");
        return TANDEM_ERR_INVAL;
    }
    struct audit *a = mem_calloc(1, sizeof *a);
    size_t n = strlen(path);
    if (a) {
        a->fd = -1;
        mem_buf_init(&a->pending, AUDIT_PENDING_MAX);
        a->max_bytes = max_bytes;
        a->keep = keep;
        a->rot_len = n + sizeof ".4294967295";
        a->path = mem_strdup(path);
        a->from = mem_alloc(a->rot_len);
        a->to = mem_alloc(a->rot_len);
    }
    if (!a || !a->path || !a->from || !a->to) {
        audit_free(a);
        tandem_errmsg(err, errlen, "%s: %s", path, tandem_strerror(TANDEM_ERR_NOMEM));
        return TANDEM_ERR_NOMEM;
    }
    if (open_log(a) != 0) {
        tandem_errmsg(err, errlen, "%s: %s", path, strerror(errno));
        audit_free(a);
        return TANDEM_ERR_IO;
    }
    *out = a;
    return TANDEM_OK;
}

void audit_free(struct audit *a) {
    if (!a)
        return;
    audit_flush(a);
    if (a->fd >= 0)
        close(a->fd);
    mem_buf_deinit(&a->pending);
    mem_free(a->to);
    mem_free(a->from);
    mem_free(a->path);
    mem_free(a);
}

/* Fills buf with "path.i" (i > 0) or path itself (i = 0); returns buf. */
static const char *rotated_name(const struct audit *a, char *buf, uint32_t i) {
    if (i == 0)
        snprintf(buf, a->rot_len, "%s", a->path);
    else
        snprintf(buf, a->rot_len, "%s.%u", a->path, (unsigned)i);
    return buf;
}

static tandem_err rotate(struct audit *a) {
    if (a->keep == 0) {
        if (ftruncate(a->fd, 0) != 0)
            return TANDEM_ERR_IO;
        a->size = 0; /* O_APPEND: the next write lands at the new end, offset 0 */
        return TANDEM_OK;
    }
    /* oldest first, so each rename's target is already free (or the one to drop) */
    for (uint32_t i = a->keep; i > 0; i--)
        if (rename(rotated_name(a, a->from, i - 1), rotated_name(a, a->to, i)) != 0 &&
            errno != ENOENT)
            return TANDEM_ERR_IO; /* the current file stays open: records keep landing */
    close(a->fd);
    a->fd = -1;
    return open_log(a) == 0 ? TANDEM_OK : TANDEM_ERR_IO;
}

struct sink {
    struct mem_buf b;
    tandem_err e; /* why the callback stopped serialisation */
};

static int collect(const char *chunk, size_t n, void *data) {
    struct sink *k = data;
    k->e = mem_buf_append(&k->b, chunk, n);
    return k->e == TANDEM_OK ? 0 : -1;
}

/* Writes p[n]; *done is how many bytes reached the file, even on failure. */
static tandem_err write_all(int fd, const char *p, size_t n, size_t *done) {
    *done = 0;
    while (*done < n) {
        ssize_t w = write(fd, p + *done, n - *done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return TANDEM_ERR_IO;
        *done += (size_t)w;
    }
    return TANDEM_OK;
}

/* Writes one whole line (rotating first when needed); a failure leaves the
 * file as it was before (or, when even that fails, closed so the next open
 * ends the torn line). */
static tandem_err write_line(struct audit *a, const char *p, size_t n) {
    if (a->fd < 0 && open_log(a) != 0)
        return TANDEM_ERR_IO;
    if (a->max_bytes && a->size > 0 && a->size + n > a->max_bytes && rotate(a) != TANDEM_OK)
        return TANDEM_ERR_IO;
    size_t done;
    tandem_err e = write_all(a->fd, p, n, &done);
    if (e == TANDEM_OK) {
        a->size += done;
    } else if (done) {
        int saved = errno;
        if (ftruncate(a->fd, (off_t)a->size) != 0) { /* a torn line is on disk: reopen */
            a->size += done;
            close(a->fd);
            a->fd = -1;
        }
        errno = saved;
    }
    return e;
}

static void note_error(struct audit *a) {
    a->errors++;
    tandem_errmsg(a->last_error, sizeof a->last_error, "%s: %s", a->path,
                  errno ? strerror(errno) : "write failed");
}

/* One line at a time, so that a disk with a little room takes what fits and
 * each line is rotated like any other; the written ones leave the queue in
 * one move at the end. */
tandem_err audit_flush(struct audit *a) {
    if (!a || !a->pending.len)
        return TANDEM_OK;
    tandem_err e = TANDEM_OK;
    size_t done = 0;
    while (done < a->pending.len) {
        const char *line = a->pending.data + done;
        const char *nl = memchr(line, '\n', a->pending.len - done); /* every queued line has one */
        size_t n = (size_t)(nl - line) + 1;
        errno = 0;
        if ((e = write_line(a, line, n)) != TANDEM_OK) {
            note_error(a);
            break;
        }
        done += n;
        a->pending_lines--;
    }
    if (done == a->pending.len) { /* recovered: give the queue's memory back */
        mem_buf_deinit(&a->pending);
        mem_buf_init(&a->pending, AUDIT_PENDING_MAX);
    } else {
        memmove(a->pending.data, a->pending.data + done, a->pending.len - done + 1); /* + NUL */
        a->pending.len -= done;
    }
    return e;
}

/* Queues line[n] behind the pending ones; past the bound it is dropped. */
static void queue_line(struct audit *a, const char *line, size_t n) {
    if (mem_buf_append(&a->pending, line, n) == TANDEM_OK)
        a->pending_lines++;
    else
        a->dropped++;
}

tandem_err audit_write(struct audit *a, const json_t *record) {
    if (!a || !json_is_object(record))
        return TANDEM_ERR_INVAL;
    struct sink k = {.e = TANDEM_OK};
    mem_buf_init(&k.b, AUDIT_MAX_RECORD);
    tandem_err e = TANDEM_OK;
    if (json_dump_callback(record, collect, &k, JSON_COMPACT | JSON_PRESERVE_ORDER) != 0) {
        e = k.e ? k.e : TANDEM_ERR_NOMEM; /* otherwise it is jansson's own allocation */
        a->dropped++;
    }
    if (e == TANDEM_OK) {
        k.b.max = AUDIT_MAX_RECORD + 1; /* the cap is on the JSON; the newline always fits */
        e = mem_buf_append(&k.b, "\n", 1);
    }
    if (e == TANDEM_OK) {
        errno = 0;
        if (audit_flush(a) != TANDEM_OK) { /* still failing: wait behind the others */
            queue_line(a, k.b.data, k.b.len);
            e = TANDEM_ERR_IO;
        } else if (write_line(a, k.b.data, k.b.len) != TANDEM_OK) {
            note_error(a);
            queue_line(a, k.b.data, k.b.len);
            e = TANDEM_ERR_IO;
        }
    }
    mem_buf_deinit(&k.b);
    return e;
}

void audit_stats(const struct audit *a, struct audit_stats *out) {
    *out = (struct audit_stats){.pending_lines = a->pending_lines,
                                .pending_bytes = a->pending.len,
                                .errors = a->errors,
                                .dropped = a->dropped};
    snprintf(out->last_error, sizeof out->last_error, "%s", a->last_error);
}
