/* Unit tests for audit: lines round-trip as JSON in key order, rotation keeps
 * exactly `keep` files holding the newest records, keep = 0 truncates, size
 * limits and I/O errors, a full disk (RLIMIT_FSIZE stands for it): no torn
 * line, the waiting lines' order, bound, counters and recovery, allocation
 * failures, and crash safety: children
 * writing in a tight loop are SIGKILLed at random moments and every complete
 * line they left must be a whole record, in order. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "serve/audit.h"
#include "base/jstr.h"
#include "base/mem.h"

static char dir[64];

static void make_dir(void) {
    strcpy(dir, "/tmp/tandem-audit-test.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_dir(void) {
    mem_fail_after(-1);
    nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* Returns dir/name in a static buffer, one of a ring of 16: copy a name that
 * must outlive many more calls. */
static const char *in_dir(const char *name) {
    static char bufs[16][192];
    static unsigned next;
    char *b = bufs[next++ % 16];
    snprintf(b, sizeof bufs[0], "%s/%s", dir, name);
    return b;
}

/* Reads a whole file into a mem_alloc'd string (NULL if it does not exist). */
static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct mem_buf b;
    mem_buf_init(&b, (size_t)1 << 30);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        cr_assert_eq(mem_buf_append(&b, chunk, n), TANDEM_OK);
    fclose(f);
    cr_assert_eq(mem_buf_append(&b, "", 0), TANDEM_OK);
    if (len)
        *len = b.len;
    return b.data;
}

static json_t *record(int seq) {
    return json_pack("{s:s, s:i, s:s, s:f}", "time", "2025-01-01T00:00:00Z", "seq", seq, "route",
                     "/v1/systemone", "queue_wait_s", 0.25);
}

static tandem_err write_seq(struct audit *a, int seq) {
    json_t *r = record(seq);
    tandem_err e = audit_write(a, r);
    json_decref(r);
    return e;
}

/* Returns the "seq" of each line of path into seqs (up to max), and the count;
 * every line must be valid JSON ending in "\n". */
static int read_seqs(const char *path, int *seqs, int max) {
    char *text = slurp(path, NULL);
    cr_assert_not_null(text, "%s missing", path);
    int n = 0;
    for (char *line = text, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        cr_assert_not_null(nl, "%s: last line has no newline", path);
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)(nl - line), 0, &je);
        cr_assert_not_null(j, "%s: line %d: %s", path, n + 1, je.text);
        cr_assert_lt(n, max);
        seqs[n++] = (int)json_integer_value(json_object_get(j, "seq"));
        json_decref(j);
    }
    mem_free(text);
    return n;
}

/* Sets RLIMIT_FSIZE (up to its hard limit; RLIM_INFINITY lifts it): it
 * stands for a full disk, as writes past it fail with EFBIG, part way
 * through a line. Criterion runs each test in its own process. */
static void limit_file_size(rlim_t bytes) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit r;
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &r), 0);
    r.rlim_cur = bytes < r.rlim_max ? bytes : r.rlim_max;
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &r), 0);
}

/* Expects path to hold exactly the records 0 .. n-1, in order, whole lines. */
static void expect_seqs_upto(const char *path, int n) {
    int seqs[64];
    cr_assert_eq(read_seqs(path, seqs, 64), n);
    for (int i = 0; i < n; i++)
        cr_expect_eq(seqs[i], i);
}

TestSuite(audit, .init = make_dir, .fini = remove_dir);

Test(audit, lines_round_trip_in_key_order) {
    struct audit *a = NULL;
    char err[256] = "";
    const char *path = in_dir("sub/deeper/audit.jsonl");
    cr_assert_eq(audit_open(path, 0, 3, &a, err, sizeof err), TANDEM_OK, "%s", err);
    json_t *r = json_pack("{s:s, s:s, s:i, s:n, s:s, s:b}", "zeta", "first", "alpha",
                          "tab\there \"q\" \xc3\xa9\nline", "status", 200, "model", "body",
                          "{\"x\":[1,2]}", "ok", 1);
    cr_assert_eq(audit_write(a, r), TANDEM_OK);
    cr_assert_eq(write_seq(a, 7), TANDEM_OK);
    cr_expect_eq(audit_write(a, NULL), TANDEM_ERR_INVAL);
    json_t *arr = json_array();
    cr_expect_eq(audit_write(a, arr), TANDEM_ERR_INVAL, "a record is an object");
    json_decref(arr);
    audit_free(a);
    audit_free(NULL);

    char *text = slurp(path, NULL);
    cr_assert_not_null(text);
    const char *want_first =
        "{\"zeta\":\"first\",\"alpha\":\"tab\\there \\\"q\\\" \xc3\xa9\\nline\",\"status\":200,"
        "\"model\":null,\"body\":\"{\\\"x\\\":[1,2]}\",\"ok\":true}\n";
    cr_expect_eq(strncmp(text, want_first, strlen(want_first)), 0, "%s", text);
    json_t *back = json_loadb(text, strlen(want_first), 0, NULL);
    cr_expect(json_equal(back, r));
    json_decref(back);
    json_decref(r);
    mem_free(text);
    int seqs[4];
    cr_expect_eq(read_seqs(path, seqs, 4), 2);
    cr_expect_eq(seqs[1], 7);

    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0600);
}

Test(audit, reopening_appends_and_ends_a_torn_line) {
    const char *path = in_dir("audit.jsonl");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"seq\":1}\n{\"seq\":2,\"torn", f);
    fclose(f);
    struct audit *a = NULL;
    cr_assert_eq(audit_open(path, 0, 0, &a, NULL, 0), TANDEM_OK);
    cr_assert_eq(write_seq(a, 3), TANDEM_OK);
    audit_free(a);
    cr_assert_eq(audit_open(path, 0, 0, &a, NULL, 0), TANDEM_OK);
    cr_assert_eq(write_seq(a, 4), TANDEM_OK);
    audit_free(a);
    char *text = slurp(path, NULL);
    const char *rest = strstr(text, "\n{\"seq\":2,\"torn\n{");
    cr_expect_not_null(rest, "%s", text);
    cr_expect_not_null(strstr(text, "\"seq\":3"));
    cr_expect_eq(text[strlen(text) - 1], '\n');
    int lines = 0;
    for (char *c = text; *c; c++)
        lines += *c == '\n';
    cr_expect_eq(lines, 4, "%s", text);
    mem_free(text);
}

Test(audit, rotation_keeps_exactly_keep_files_with_the_newest_records) {
    char path[192];
    snprintf(path, sizeof path, "%s", in_dir("audit.jsonl"));
    json_t *probe = record(100);
    char *line = json_dumps(probe, JSON_COMPACT | JSON_PRESERVE_ORDER);
    size_t line_len = strlen(line) + 1; /* every seq 100..199 has the same width */
    free(line);
    json_decref(probe);

    struct audit *a = NULL;
    char err[256] = "";
    /* room for exactly 3 lines per file */
    cr_assert_eq(audit_open(path, 3 * line_len + line_len / 2, 2, &a, err, sizeof err),
                 TANDEM_OK, "%s", err);
    for (int seq = 100; seq < 111; seq++)
        cr_assert_eq(write_seq(a, seq), TANDEM_OK);
    audit_free(a);

    int seqs[8], n;
    n = read_seqs(path, seqs, 8);
    cr_expect_eq(n, 2);
    cr_expect(seqs[0] == 109 && seqs[1] == 110);
    n = read_seqs(in_dir("audit.jsonl.1"), seqs, 8);
    cr_expect_eq(n, 3);
    cr_expect(seqs[0] == 106 && seqs[2] == 108);
    n = read_seqs(in_dir("audit.jsonl.2"), seqs, 8);
    cr_expect_eq(n, 3);
    cr_expect(seqs[0] == 103 && seqs[2] == 105);
    cr_expect_neq(access(in_dir("audit.jsonl.3"), F_OK), 0, "the oldest file was dropped");
    struct stat st;
    cr_assert_eq(stat(in_dir("audit.jsonl.2"), &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0600);

    /* the size is picked up from an existing file on open */
    cr_assert_eq(audit_open(path, 3 * line_len + line_len / 2, 2, &a, NULL, 0), TANDEM_OK);
    cr_assert_eq(write_seq(a, 111), TANDEM_OK);
    cr_assert_eq(write_seq(a, 112), TANDEM_OK);
    audit_free(a);
    cr_expect_eq(read_seqs(path, seqs, 8), 1);
    cr_expect_eq(seqs[0], 112);
    cr_expect_eq(read_seqs(in_dir("audit.jsonl.1"), seqs, 8), 3);
    cr_expect_eq(seqs[0], 109);
}

Test(audit, keep_zero_truncates_and_a_huge_record_still_lands) {
    const char *path = in_dir("audit.jsonl");
    struct audit *a = NULL;
    cr_assert_eq(audit_open(path, 100, 0, &a, NULL, 0), TANDEM_OK);
    for (int seq = 0; seq < 5; seq++)
        cr_assert_eq(write_seq(a, seq), TANDEM_OK);
    int seqs[8];
    cr_expect_eq(read_seqs(path, seqs, 8), 1, "each record alone exceeds half of 100 bytes");
    cr_expect_eq(seqs[0], 4);
    cr_expect_neq(access(in_dir("audit.jsonl.1"), F_OK), 0);

    json_t *big = json_pack("{s:i, s:s}", "seq", 5, "pad",
                            "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                            "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    cr_assert_eq(audit_write(a, big), TANDEM_OK, "a record over max_bytes goes to an empty file");
    json_decref(big);
    audit_free(a);
    cr_expect_eq(read_seqs(path, seqs, 8), 1);
    cr_expect_eq(seqs[0], 5);
}

Test(audit, records_over_one_mib_are_too_big) {
    const char *path = in_dir("audit.jsonl");
    struct audit *a = NULL;
    cr_assert_eq(audit_open(path, 0, 1, &a, NULL, 0), TANDEM_OK);
    size_t n = (size_t)1 << 20;
    char *pad = mem_alloc(n + 1);
    cr_assert_not_null(pad);
    memset(pad, 'x', n);
    pad[n] = '\0';
    json_t *r = json_pack("{s:s}", "body", pad);
    cr_expect_eq(audit_write(a, r), TANDEM_ERR_TOOBIG);
    json_decref(r);
    /* exactly 1 MiB of JSON is allowed: {"b":"..."} is 8 bytes of frame */
    pad[n - 8] = '\0';
    r = json_pack("{s:s}", "b", pad);
    cr_expect_eq(audit_write(a, r), TANDEM_OK);
    json_decref(r);
    pad[n - 8] = 'x';
    pad[n - 7] = '\0';
    r = json_pack("{s:s}", "b", pad);
    cr_expect_eq(audit_write(a, r), TANDEM_ERR_TOOBIG);
    json_decref(r);
    mem_free(pad);
    struct audit_stats st;
    audit_stats(a, &st);
    cr_expect_eq(st.dropped, 2, "the records that could not be written are counted");
    audit_free(a);
    size_t len = 0;
    char *text = slurp(path, &len);
    cr_expect_eq(len, n + 1, "only the 1 MiB record, with its newline");
    mem_free(text);
}

/* A body in the log is a client's bytes, cut at a limit: jstr_lossy makes any
 * of them a member that serialises, where jansson would refuse the line. */
Test(audit, text_that_is_not_utf8_still_makes_a_line) {
    const char *path = in_dir("audit.jsonl");
    struct audit *a = NULL;
    cr_assert_eq(audit_open(path, 0, 1, &a, NULL, 0), TANDEM_OK);
    const char body[] = "{\"state\": \"\xff\xfe\", \"cut\": \"caf\xc3";
    json_t *r = json_pack("{s:s}", "request_id", "r1");
    json_object_set_new(r, "request_body", jstr_lossy(body, sizeof body - 1));
    cr_assert_eq(audit_write(a, r), TANDEM_OK);
    json_decref(r);
    audit_free(a);
    char *text = slurp(path, NULL);
    cr_assert_not_null(text);
    json_t *back = json_loads(text, 0, NULL);
    cr_assert_not_null(back, "%s", text);
    cr_expect_str_eq(json_string_value(json_object_get(back, "request_body")),
                     "{\"state\": \"\xef\xbf\xbd\xef\xbf\xbd\", \"cut\": \"caf\xef\xbf\xbd");
    json_decref(back);
    mem_free(text);
}

Test(audit, unwritable_paths_are_io_errors_naming_the_path) {
    const char *file = in_dir("plain");
    FILE *f = fopen(file, "w");
    cr_assert_not_null(f);
    fclose(f);
    const char *paths[] = {in_dir("plain/audit.jsonl"), in_dir("plain/sub/audit.jsonl"), dir};
    for (size_t i = 0; i < 3; i++) {
        struct audit *a = (struct audit *)1;
        char err[256] = "";
        cr_expect_eq(audit_open(paths[i], 0, 0, &a, err, sizeof err), TANDEM_ERR_IO, "%s",
                     paths[i]);
        cr_expect_null(a);
        cr_expect_eq(strncmp(err, paths[i], strlen(paths[i])), 0, "%s", err);
        cr_expect_not_null(strstr(err, ": "), "%s", err);
    }
    struct audit *a = NULL;
    cr_expect_eq(audit_open("", 0, 0, &a, NULL, 0), TANDEM_ERR_INVAL);
}

Test(audit, a_failed_rotation_keeps_the_log_and_is_retried) {
    const char *sub = in_dir("logs");
    const char *path = in_dir("logs/audit.jsonl");
    struct audit *a = NULL;
    cr_assert_eq(audit_open(path, 10, 1, &a, NULL, 0), TANDEM_OK);
    cr_assert_eq(write_seq(a, 0), TANDEM_OK);
    /* a plain file where the directory was: the rotation's rename fails */
    cr_assert_eq(rename(sub, in_dir("moved")), 0);
    FILE *f = fopen(sub, "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_expect_eq(write_seq(a, 1), TANDEM_ERR_IO);
    struct audit_stats st;
    audit_stats(a, &st); /* a failed rotation is a failed write: the line waits */
    cr_expect_eq(st.errors, 1);
    cr_expect_eq(st.pending_lines, 1);
    cr_expect(strstr(st.last_error, "Not a directory"), "%s", st.last_error);
    cr_assert_eq(remove(sub), 0);
    cr_assert_eq(rename(in_dir("moved"), sub), 0);
    cr_expect_eq(write_seq(a, 2), TANDEM_OK); /* the waiting line 1 goes first */
    audit_free(a);
    int seqs[4];
    cr_expect_eq(read_seqs(path, seqs, 4), 1);
    cr_expect_eq(seqs[0], 2);
    cr_expect_eq(read_seqs(in_dir("logs/audit.jsonl.1"), seqs, 4), 1);
    cr_expect_eq(seqs[0], 1);
}

Test(audit, a_full_disk_tears_no_line_and_loses_none_once_space_returns) {
    const char *path = in_dir("full.jsonl");
    struct audit *a = NULL;
    cr_assert_eq(audit_open(path, 0, 0, &a, NULL, 0), TANDEM_OK);
    limit_file_size(300);
    int failed = 0;
    for (int i = 0; i < 10; i++)
        failed += write_seq(a, i) == TANDEM_ERR_IO;
    struct audit_stats st;
    audit_stats(a, &st);
    cr_expect_gt(failed, 5);
    cr_expect_eq(st.pending_lines, (size_t)failed);
    cr_expect_eq(st.errors, (uint64_t)failed); /* the first failed write, then each retry */
    cr_expect(strstr(st.last_error, "File too large") && strstr(st.last_error, path),
              "%s", st.last_error);
    int seqs[16];
    int n = read_seqs(path, seqs, 16); /* whole lines only, even mid-failure */
    cr_expect_eq(n, 10 - failed);
    cr_expect_eq(audit_flush(a), TANDEM_ERR_IO);
    limit_file_size(RLIM_INFINITY);
    cr_expect_eq(write_seq(a, 10), TANDEM_OK); /* the waiting lines first, in order */
    audit_stats(a, &st);
    cr_expect_eq(st.pending_lines, 0);
    cr_expect_eq(st.errors, (uint64_t)failed + 1);
    cr_expect_eq(st.dropped, 0);
    expect_seqs_upto(path, 11);
    audit_free(a);
}

/* A disk with a little room again takes the oldest waiting lines that fit,
 * a line at a time; each failed attempt counts once. */
Test(audit, a_little_room_takes_the_oldest_waiting_lines_first) {
    const char *path = in_dir("some.jsonl");
    struct audit *a = NULL;
    cr_assert_eq(audit_open(path, 0, 0, &a, NULL, 0), TANDEM_OK);
    limit_file_size(0);
    for (int i = 0; i < 8; i++)
        cr_expect_eq(write_seq(a, i), TANDEM_ERR_IO);
    struct audit_stats st;
    audit_stats(a, &st);
    cr_expect_eq(st.errors, 8); /* the first write, then each later one's flush */
    cr_expect_eq(st.pending_lines, 8);
    size_t line = st.pending_bytes / 8; /* the records are the same length */
    limit_file_size(3 * line + line / 2); /* room for three and a half lines */
    cr_expect_eq(audit_flush(a), TANDEM_ERR_IO);
    audit_stats(a, &st);
    cr_expect_eq(st.errors, 9);
    cr_expect_eq(st.pending_lines, 5);
    cr_expect_eq(st.pending_bytes, 5 * line);
    expect_seqs_upto(path, 3); /* no half of the fourth */
    limit_file_size(RLIM_INFINITY);
    cr_expect_eq(write_seq(a, 8), TANDEM_OK);
    audit_stats(a, &st);
    cr_expect_eq(st.pending_lines + st.pending_bytes, 0);
    cr_expect_eq(st.errors, 9);
    expect_seqs_upto(path, 9);
    audit_free(a);
}

Test(audit, a_full_queue_drops_and_counts_lines) {
    const char *path = in_dir("drop.jsonl");
    struct audit *a = NULL;
    cr_assert_eq(audit_open(path, 0, 0, &a, NULL, 0), TANDEM_OK);
    limit_file_size(0);
    struct audit_stats st = {0};
    for (int i = 0; i < 200000 && !st.dropped; i++) {
        write_seq(a, i);
        audit_stats(a, &st);
    }
    cr_expect_eq(st.dropped, 1);
    cr_expect_leq(st.pending_bytes, (size_t)4 << 20);
    cr_expect_gt(st.pending_bytes, ((size_t)4 << 20) - 200); /* full: the next line missed */
    cr_expect_gt(st.pending_lines, 10000);
    limit_file_size(RLIM_INFINITY);
    cr_expect_eq(audit_flush(a), TANDEM_OK); /* every queued line, nothing else */
    struct stat fs;
    cr_assert_eq(stat(path, &fs), 0);
    cr_expect_eq((size_t)fs.st_size, st.pending_bytes);
    audit_stats(a, &st);
    cr_expect_eq(st.pending_lines + st.pending_bytes, 0);
    cr_expect_eq(st.dropped, 1);
    audit_free(a);
}

Test(audit, allocation_failures_are_reported_without_leaks) {
    const char *path = in_dir("audit.jsonl");
    int failures = 0;
    for (long n = 0; n < 100; n++) {
        struct mem_stats s0, s1;
        mem_stats_get(&s0);
        json_t *r = record(1); /* jansson's own allocations are not mem.c's */
        struct audit *a = NULL;
        mem_fail_after(n);
        tandem_err e = audit_open(path, 50, 1, &a, NULL, 0);
        if (e == TANDEM_OK)
            e = audit_write(a, r);
        mem_fail_after(-1);
        audit_free(a);
        json_decref(r);
        mem_stats_get(&s1);
        cr_expect_eq(s1.allocs - s0.allocs, s1.frees - s0.frees, "allocation %ld leaks", n);
        if (e == TANDEM_OK)
            break;
        cr_expect_eq(e, TANDEM_ERR_NOMEM, "allocation %ld: %s", n, tandem_errname(e));
        failures++;
    }
    cr_expect_gt(failures, 3);
}

/* --- crash safety ---------------------------------------------------------- */

/* The child: writes records with seq 0, 1, ... and pads of varying length
 * (up to 8 KiB, so a write may span pages) until it is killed. */
static void crash_child(const char *path) {
    struct audit *a = NULL;
    if (audit_open(path, 0, 0, &a, NULL, 0) != TANDEM_OK)
        _exit(2);
    static char pad[8193];
    memset(pad, 'p', sizeof pad - 1);
    unsigned r = (unsigned)getpid();
    for (int seq = 0; seq < 1000000; seq++) {
        r = r * 1103515245u + 12345u;
        size_t len = (r >> 8) % (sizeof pad);
        char keep = pad[len];
        pad[len] = '\0';
        json_t *j = json_pack("{s:i, s:s}", "seq", seq, "pad", pad);
        pad[len] = keep;
        if (!j || audit_write(a, j) != TANDEM_OK)
            _exit(3);
        json_decref(j);
    }
    _exit(0);
}

Test(audit, sigkill_never_corrupts_earlier_lines, .timeout = 20) {
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    int torn = 0, total = 0;
    for (int round = 0; round < 20; round++) {
        char name[32];
        snprintf(name, sizeof name, "crash%d.jsonl", round);
        const char *path = in_dir(name);
        fflush(NULL);
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0)
            crash_child(path);
        /* the kill lands while the child writes, not before it has opened the log
         * (a cold start on a loaded machine can take longer than the shortest wait) */
        struct stat st;
        for (int waited = 0; stat(path, &st) != 0 && waited < 5000; waited++)
            nanosleep(&(struct timespec){0, 1000000L}, NULL);
        struct timespec ts = {0, (long)(3 + rand() % 40) * 1000000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                  "the child ended by itself: status %d", status);

        size_t len = 0;
        char *text = slurp(path, &len);
        cr_assert_not_null(text, "round %d: no file", round);
        int expect = 0;
        char *line = text;
        for (char *nl; (nl = strchr(line, '\n')) != NULL; line = nl + 1) {
            json_error_t je;
            json_t *j = json_loadb(line, (size_t)(nl - line), 0, &je);
            cr_assert_not_null(j, "round %d line %d: %s", round, expect + 1, je.text);
            cr_expect_eq(json_integer_value(json_object_get(j, "seq")), expect,
                         "round %d: records out of order", round);
            json_decref(j);
            expect++;
        }
        /* what follows the last newline is a torn record: a strict prefix */
        if (*line) {
            torn++;
            cr_expect_eq(strncmp(line, "{\"seq\":", 7), 0, "round %d: tail %.40s", round, line);
            cr_expect_null(json_loads(line, 0, NULL), "round %d: a whole record lacks its newline",
                           round);
        }
        total += expect;
        mem_free(text);
        remove(path);
    }
    cr_log_info("audit crash test: %d records in 20 rounds, %d torn tails", total, torn);
    cr_expect_gt(total, 20, "the children wrote something");
}
