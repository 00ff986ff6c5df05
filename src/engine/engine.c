/* engine.c: finding llama-server and establishing what it is.
 *
 * Identity comes from two independent sources: the binary's own `--version`
 * output (build number and commit) and a scan of the file for the
 * "/v1/systemone" route string. The first is authoritative when the build was
 * stamped; the second covers binaries built without git history, which report
 * a meaningless build number. Children are always started from an argv array
 * with posix_spawn, never through a shell. The engine's other tools (llama-quantize)
 * are taken from the same bin/ folder as the server, so both are one build.
 *
 * Lookup order: --llama-server, $TANDEM_LLAMA_SERVER, the engine `make install`
 * put beside this binary (<prefix>/libexec/tandem/, found from /proc/self/exe,
 * so an installed tandem runs with an empty cache and under any user), then the
 * pinned build in the cache. The installed engine is a static build (no RPATH,
 * only system libraries), so it runs from wherever it is copied. */
#include "engine/engine.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/cache.h"
#include "base/host.h"
#include "base/mem.h"

extern char **environ;

#define VERSION_OUTPUT_MAX (64 * 1024)

const char *engine_source_name(enum engine_source src) {
    switch (src) {
    case ENGINE_SOURCE_FLAG: return "--llama-server";
    case ENGINE_SOURCE_ENV: return "TANDEM_LLAMA_SERVER";
    case ENGINE_SOURCE_CACHE: return "cache";
    case ENGINE_SOURCE_LIBEXEC: return "libexec";
    }
    return "?";
}

static bool is_executable_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

static tandem_err copy_path(char *out, size_t cap, const char *path) {
    int n = snprintf(out, cap, "%s", path);
    return n < 0 || (size_t)n >= cap ? TANDEM_ERR_TOOBIG : TANDEM_OK;
}

tandem_err engine_libexec_path(const char *exe, char *out, size_t cap) {
    static const char tail[] = "libexec/tandem/llama-server";
    if (cap > 0)
        *out = '\0';
    if (!exe || exe[0] != '/')
        return TANDEM_ERR_INVAL;
    size_t n = (size_t)(strrchr(exe, '/') - exe); /* exe's folder, e.g. "/usr/local/bin" */
    while (n > 0 && exe[n - 1] != '/')
        n--; /* its parent with a trailing slash: "/usr/local/" */
    if (n == 0)
        n = 1; /* "/tandem": the root is its own parent */
    int len = snprintf(out, cap, "%.*s%s", (int)n, exe, tail);
    if (len < 0 || (size_t)len >= cap) {
        if (cap > 0)
            *out = '\0';
        return TANDEM_ERR_TOOBIG;
    }
    return TANDEM_OK;
}

/* Writes the engine installed beside the running binary into out[cap]; true
 * when it is an executable file. */
static bool installed_engine(char *out, size_t cap) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0 || (size_t)n >= sizeof exe - 1)
        return false; /* no /proc, or a path that may have been cut */
    exe[n] = '\0';
    return engine_libexec_path(exe, out, cap) == TANDEM_OK && is_executable_file(out);
}

tandem_err engine_locate(const char *flag_path, int pinned_build, char *out, size_t cap,
                         enum engine_source *src) {
    const char *env = getenv("TANDEM_LLAMA_SERVER");
    tandem_err e;
    if (flag_path) {
        *src = ENGINE_SOURCE_FLAG;
        e = copy_path(out, cap, flag_path);
    } else if (env && *env) {
        *src = ENGINE_SOURCE_ENV;
        e = copy_path(out, cap, env);
    } else if (installed_engine(out, cap)) {
        *src = ENGINE_SOURCE_LIBEXEC;
        return TANDEM_OK;
    } else {
        char sub[64];
        snprintf(sub, sizeof sub, "engine/b%d/bin/llama-server", pinned_build);
        *src = ENGINE_SOURCE_CACHE;
        e = cache_path(out, cap, sub);
    }
    if (e != TANDEM_OK)
        return e;
    return is_executable_file(out) ? TANDEM_OK : TANDEM_ERR_NOTFOUND;
}

/* Copies the text up to the first char in stops (or end) into out[cap]. */
static void copy_until(char *out, size_t cap, const char *s, const char *stops) {
    size_t n = strcspn(s, stops);
    if (n >= cap)
        n = cap - 1;
    memcpy(out, s, n);
    out[n] = '\0';
}

static int64_t meaningful(long long build) {
    return build >= ENGINE_MIN_MEANINGFUL_BUILD ? build : -1;
}

tandem_err engine_version_parse(const char *text, struct engine_version *out) {
    const char *line = strstr(text, "version: ");
    if (!line)
        return TANDEM_ERR_FORMAT;
    memset(out, 0, sizeof *out);
    out->build = -1;
    line += strlen("version: ");
    copy_until(out->version, sizeof out->version, line, " (\n");

    const char *paren = strchr(line, '(');
    const char *eol = strchr(line, '\n');
    if (!paren || (eol && paren > eol))
        return TANDEM_OK; /* a version with no build details */
    long long build;
    int used = 0;
    if (sscanf(paren, "(build %lld, commit %n", &build, &used) == 1 && used > 0) {
        out->build = meaningful(build);
        copy_until(out->commit, sizeof out->commit, paren + used, ")\n");
    } else {
        /* older form: "version: 4500 (abc1234)" */
        char *end;
        long long n = strtoll(out->version, &end, 10);
        if (*out->version && *end == '\0')
            out->build = meaningful(n);
        copy_until(out->commit, sizeof out->commit, paren + 1, ")\n");
    }
    return TANDEM_OK;
}

/* Starts argv[0] with stdin from /dev/null and stdout+stderr into a pipe
 * whose read end goes to *out_fd. */
static tandem_err spawn_captured(char *const argv[], pid_t *pid, int *out_fd) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return TANDEM_ERR_SPAWN;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    int rc = posix_spawn(pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        errno = rc;
        return TANDEM_ERR_SPAWN;
    }
    *out_fd = fds[0];
    return TANDEM_OK;
}

/* Reads fd to EOF into buf (excess beyond its max is drained and dropped),
 * until deadline. Returns TANDEM_ERR_TIMEOUT if the deadline passes first. */
static tandem_err drain(int fd, struct mem_buf *buf, long deadline) {
    char chunk[4096];
    for (;;) {
        long left = deadline - host_now_ms();
        if (left <= 0)
            return TANDEM_ERR_TIMEOUT;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r == 0 ? TANDEM_ERR_TIMEOUT : TANDEM_ERR_IO;
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n == 0 ? TANDEM_OK : TANDEM_ERR_IO;
        tandem_err e = mem_buf_append(buf, chunk, (size_t)n);
        if (e == TANDEM_ERR_NOMEM)
            return e;
    }
}

tandem_err engine_version_query(const char *path, int timeout_ms, struct engine_version *out,
                                char *err, size_t errlen) {
    char *argv[] = {(char *)path, "--version", NULL};
    pid_t pid;
    int fd;
    if (spawn_captured(argv, &pid, &fd) != TANDEM_OK) {
        tandem_errmsg(err, errlen, "%s: cannot run: %s", path, strerror(errno));
        return TANDEM_ERR_SPAWN;
    }
    struct mem_buf buf;
    mem_buf_init(&buf, VERSION_OUTPUT_MAX);
    tandem_err e = drain(fd, &buf, host_now_ms() + timeout_ms);
    close(fd);
    if (e != TANDEM_OK)
        kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (e == TANDEM_ERR_TIMEOUT)
        tandem_errmsg(err, errlen, "%s --version: no answer within %d ms", path, timeout_ms);
    else if (e != TANDEM_OK)
        tandem_errmsg(err, errlen, "%s --version: %s", path, tandem_strerror(e));
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        e = TANDEM_ERR_CHILD;
        if (WIFEXITED(status))
            tandem_errmsg(err, errlen, "%s --version: exited with status %d", path,
                          WEXITSTATUS(status));
        else
            tandem_errmsg(err, errlen, "%s --version: killed by signal %d", path,
                          WTERMSIG(status));
    } else if ((e = engine_version_parse(buf.data ? buf.data : "", out)) != TANDEM_OK)
        tandem_errmsg(err, errlen, "%s --version: no \"version:\" line in its output", path);
    mem_buf_deinit(&buf);
    return e;
}

tandem_err engine_route_scan(const char *path, bool *found) {
    static const char route[] = "/v1/systemone";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return TANDEM_ERR_IO;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return TANDEM_ERR_IO;
    }
    *found = false;
    if (st.st_size == 0) {
        close(fd);
        return TANDEM_OK;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return TANDEM_ERR_IO;
    *found = memmem(map, (size_t)st.st_size, route, sizeof route - 1) != NULL;
    munmap(map, (size_t)st.st_size);
    return TANDEM_OK;
}

enum engine_verdict engine_verdict_of(const struct engine_version *v, bool has_route) {
    if (v->build >= 0)
        return v->build >= ENGINE_MIN_DECISION_BUILD ? ENGINE_VERDICT_OK : ENGINE_VERDICT_TOO_OLD;
    return has_route ? ENGINE_VERDICT_UNVERIFIED : ENGINE_VERDICT_NO_ROUTE;
}

tandem_err engine_identify(const char *flag_path, int pinned_build, struct engine_identity *out) {
    memset(out, 0, sizeof *out);
    out->located = engine_locate(flag_path, pinned_build, out->path, sizeof out->path, &out->source);
    if (out->located != TANDEM_OK) {
        tandem_errmsg(out->error, sizeof out->error, "%s: %s (from %s)", out->path,
                      out->located == TANDEM_ERR_NOTFOUND ? "no executable llama-server here"
                                                          : tandem_strerror(out->located),
                      engine_source_name(out->source));
        return out->located;
    }
    out->queried = engine_version_query(out->path, ENGINE_VERSION_TIMEOUT_MS, &out->version,
                                        out->error, sizeof out->error);
    if (out->queried != TANDEM_OK)
        return out->queried;
    if (engine_route_scan(out->path, &out->has_route) != TANDEM_OK)
        out->has_route = false;
    out->verdict = engine_verdict_of(&out->version, out->has_route);
    switch (out->verdict) {
    case ENGINE_VERDICT_OK:
    case ENGINE_VERDICT_UNVERIFIED:
        return TANDEM_OK;
    case ENGINE_VERDICT_TOO_OLD:
        tandem_errmsg(out->error, sizeof out->error,
                      "%s is llama.cpp build %lld, older than b%d, the first that serves "
                      "/v1/systemone; use build b%d or newer",
                      out->path, (long long)out->version.build, ENGINE_MIN_DECISION_BUILD,
                      ENGINE_MIN_DECISION_BUILD);
        break;
    case ENGINE_VERDICT_NO_ROUTE:
        tandem_errmsg(out->error, sizeof out->error,
                      "%s reports no build number and contains no /v1/systemone route; "
                      "decision models need llama.cpp b%d or newer",
                      out->path, ENGINE_MIN_DECISION_BUILD);
        break;
    }
    return TANDEM_ERR_ENGINE;
}

tandem_err engine_locate_tool(const char *flag_path, int pinned_build, const char *name,
                              char *out, size_t cap) {
    enum engine_source src;
    tandem_err e = engine_locate(flag_path, pinned_build, out, cap, &src);
    if (e != TANDEM_OK && e != TANDEM_ERR_NOTFOUND)
        return e;
    char *slash = strrchr(out, '/');
    size_t dir = slash ? (size_t)(slash - out) + 1 : 0;
    int n = snprintf(out + dir, cap - dir, "%s", name);
    if (n < 0 || (size_t)n >= cap - dir)
        return TANDEM_ERR_TOOBIG;
    return is_executable_file(out) ? TANDEM_OK : TANDEM_ERR_NOTFOUND;
}

tandem_err engine_run_tool(char *const argv[], int *exit_code, char *err, size_t errlen) {
    return engine_run_tool_logged(argv, NULL, exit_code, err, errlen);
}

tandem_err engine_run_tool_logged(char *const argv[], const char *log_path, int *exit_code,
                                  char *err, size_t errlen) {
    int log_fd = -1;
    if (log_path && (log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
        tandem_errmsg(err, errlen, "%s: cannot create: %s", log_path, strerror(errno));
        return TANDEM_ERR_IO;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (log_fd >= 0) {
        posix_spawn_file_actions_adddup2(&fa, log_fd, 1);
        posix_spawn_file_actions_adddup2(&fa, log_fd, 2);
    }
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (log_fd >= 0)
        close(log_fd);
    if (rc != 0) {
        tandem_errmsg(err, errlen, "%s: cannot run: %s", argv[0], strerror(rc));
        return TANDEM_ERR_SPAWN;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return TANDEM_OK;
}

/* How much of a log's end is searched for the reason. */
#define REASON_TAIL (64 * 1024)

/* Whether line[0..n) comes from the crash handler's debugger, not the tool. */
static bool debugger_line(const char *s, size_t n) {
    static const char *const prefixes[] = {"#", "[Inferior", "[New LWP", "[Thread", "Using host",
                                           "0x", "warning: process", "ptrace:", "No stack."};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        size_t k = strlen(prefixes[i]);
        if (n >= k && !memcmp(s, prefixes[i], k))
            return true;
    }
    /* gdb echoes source lines as "30\t../sysdeps/..." */
    size_t d = 0;
    while (d < n && isdigit((unsigned char)s[d]))
        d++;
    return d > 0 && d < n && s[d] == '\t';
}

/* Whether line[0..n) says what went wrong. */
static bool error_line(const char *s, size_t n) {
    static const char *const marks[] = {"GGML_ASSERT", "error", "failed", " E "};
    for (size_t i = 0; i < sizeof marks / sizeof *marks; i++)
        if (memmem(s, n, marks[i], strlen(marks[i])))
            return true;
    return false;
}

/* Copies line[0..n) into out[cap] without the timestamp and level prefix
 * ("0.00.335.245 E ") and with a leading source path cut to its file name. */
static void clean_line(const char *s, size_t n, char *out, size_t cap) {
    size_t i = 0;
    while (i < n && (isdigit((unsigned char)s[i]) || s[i] == '.'))
        i++;
    if (i > 0 && i + 2 < n && s[i] == ' ' && isupper((unsigned char)s[i + 1]) && s[i + 2] == ' ')
        s += i + 3, n -= i + 3;
    const char *colon = memchr(s, ':', n);
    if (n && s[0] == '/' && colon) {
        const char *base = s;
        for (const char *q = s; q < colon; q++)
            if (*q == '/')
                base = q + 1;
        n -= (size_t)(base - s);
        s = base;
    }
    while (n && (s[n - 1] == '\r' || s[n - 1] == ' '))
        n--;
    snprintf(out, cap, "%.*s", (int)(n < 4096 ? n : 4096), s);
}

void engine_log_reason(const char *text, size_t len, char *out, size_t cap) {
    const char *best = NULL, *last = NULL;
    size_t best_n = 0, last_n = 0;
    for (size_t at = 0; at < len;) {
        const char *s = text + at, *nl = memchr(s, '\n', len - at);
        size_t n = nl ? (size_t)(nl - s) : len - at;
        at += n + 1;
        size_t lead = 0;
        while (lead < n && isspace((unsigned char)s[lead]))
            lead++;
        if (lead == n || debugger_line(s + lead, n - lead))
            continue;
        last = s + lead, last_n = n - lead;
        if (error_line(last, last_n))
            best = last, best_n = last_n;
    }
    if (!best)
        best = last, best_n = last_n;
    if (cap)
        out[0] = '\0';
    if (best && cap)
        clean_line(best, best_n, out, cap);
}

void engine_log_file_reason(const char *log_path, char *out, size_t cap) {
    if (cap)
        out[0] = '\0';
    FILE *f = fopen(log_path, "rb");
    if (!f)
        return;
    char *tail = mem_alloc(REASON_TAIL);
    size_t n = 0;
    if (tail && fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        fseek(f, size > REASON_TAIL ? size - REASON_TAIL : 0, SEEK_SET);
        n = fread(tail, 1, REASON_TAIL, f);
    }
    fclose(f);
    engine_log_reason(tail ? tail : "", n, out, cap);
    mem_free(tail);
}
