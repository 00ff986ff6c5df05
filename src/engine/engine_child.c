/* engine_child.c: spawning, watching and stopping one llama-server.
 *
 * fork + execv rather than posix_spawn, because the child must set
 * PR_SET_PDEATHSIG (die when tandem dies) and its own process group before
 * exec, and posix_spawn can do neither. The child reports an exec failure
 * through a close-on-exec pipe: EOF means exec succeeded, an int means errno.
 * Exit detection uses a pidfd (Linux 5.3+), so a crash is seen at once by
 * poll or an event loop, without SIGCHLD handlers.
 *
 * States: running -> (poll/stop/free reaps) -> exited. Nothing is signalled
 * after the reap, so a recycled pid can never be hit. */
#include "engine/engine_child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gguf/ggml_types.h"
#include "base/host.h"
#include "base/mem.h"

struct engine_child {
    pid_t pid;
    int pidfd;
    char *socket_path;
    bool exited;
    int status;
    char *log_path;
};

/* --- argv from the plan -------------------------------------------------------- */

struct argv_builder {
    char **v;
    size_t n, cap;
    tandem_err err;
};

static void push(struct argv_builder *b, const char *s) {
    if (b->err == TANDEM_OK)
        b->err = mem_array_grow((void **)&b->v, &b->cap, b->n + 2, sizeof *b->v, 4096);
    if (b->err == TANDEM_OK && !(b->v[b->n] = mem_strdup(s)))
        b->err = TANDEM_ERR_NOMEM;
    if (b->err == TANDEM_OK)
        b->v[++b->n] = NULL;
}

static void push_u(struct argv_builder *b, const char *flag, unsigned long v) {
    char num[32];
    snprintf(num, sizeof num, "%lu", v);
    push(b, flag);
    push(b, num);
}

static const char *type_name(uint32_t id, char *buf, size_t cap) {
    const struct ggml_type_info *t = ggml_type_get(id);
    snprintf(buf, cap, "%s", t ? t->name : "f16");
    for (char *p = buf; *p; p++) /* the engine spells cache types in lower case */
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p - 'A' + 'a');
    return buf;
}

tandem_err engine_child_argv(const char *binary, const char *model_path, const char *alias,
                             const struct plan_settings *r, const char *socket_path,
                             const char *slot_dir, char *const *extra, char ***argv_out) {
    *argv_out = NULL;
    if (r->ngl == PLAN_NGL_AUTO)
        return TANDEM_ERR_INVAL;
    struct argv_builder b = {0};
    char t[16];
    push(&b, binary);
    push(&b, "-m");
    push(&b, model_path);
    push(&b, "--host"); /* a path ending in .sock: the engine listens on AF_UNIX only */
    push(&b, socket_path);
    push(&b, "--cors-origins"); /* not an origin: no browser origin matches it */
    push(&b, "none");
    push(&b, "--no-cors-credentials");
    push_u(&b, "-c", r->ctx);
    push_u(&b, "-ngl", (unsigned long)r->ngl);
    push(&b, "-fit");
    push(&b, "off");
    push_u(&b, "-np", r->parallel);
    if (r->kv_unified)
        push(&b, "--kv-unified");
    push(&b, "-ctk");
    push(&b, type_name(r->type_k, t, sizeof t));
    push(&b, "-ctv");
    push(&b, type_name(r->type_v, t, sizeof t));
    push(&b, "-fa");
    push(&b, r->flash_attn ? "on" : "off");
    push_u(&b, "-b", r->batch);
    push_u(&b, "-ub", r->ubatch);
    if (!r->gpu) {
        push(&b, "--no-repack"); /* keep weights mapped: planned RAM is the file, once */
        push(&b, "--device");    /* no GPU at all: no context, no offloaded big ops */
        push(&b, "none");
    }
    if (r->threads) {
        push_u(&b, "-t", r->threads);
        push_u(&b, "-tb", r->threads);
    }
    if (r->no_warmup)
        push(&b, "--no-warmup");
    if (!r->kv_offload)
        push(&b, "-nkvo");
    if (r->swa_full)
        push(&b, "--swa-full");
    if (alias) {
        push(&b, "--alias");
        push(&b, alias);
    }
    push(&b, "--cache-ram"); /* no prompt cache in host RAM: unplanned memory, and a prompt */
    push(&b, "0");           /* restored whole from it is answered from its last token alone */
    if (slot_dir) {
        push(&b, "--slot-save-path");
        push(&b, slot_dir);
    }
    push(&b, "-lv");
    push(&b, "4");
    push(&b, "--no-log-timestamps");
    push(&b, "--no-log-prefix");
    for (size_t i = 0; extra && extra[i]; i++)
        push(&b, extra[i]);
    if (b.err != TANDEM_OK) {
        engine_child_argv_free(b.v);
        return b.err;
    }
    *argv_out = b.v;
    return TANDEM_OK;
}

void engine_child_argv_free(char **argv) {
    for (size_t i = 0; argv && argv[i]; i++)
        mem_free(argv[i]);
    mem_free(argv);
}

/* --- spawning -------------------------------------------------------------------- */

/* In the child between fork and exec: async-signal-safe calls only. */
static void exec_child(char *const *argv, char *const *envp, int log_fd, int report_fd,
                       pid_t parent) {
    int devnull = open("/dev/null", O_RDONLY);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent || setpgid(0, 0) != 0 ||
        devnull < 0 || dup2(devnull, 0) < 0 || dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0)
        goto fail;
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(argv[0], argv, envp);
fail:;
    int e = errno;
    (void)!write(report_fd, &e, sizeof e);
    _exit(127);
}

/* The name part of "NAME=value" equals that of e? */
static bool same_name(const char *a, const char *e) {
    size_t n = strcspn(a, "=");
    return !strncmp(a, e, n) && e[n] == '=';
}

/* Whether the child inherits tandem's "NAME=value" entry e. An allowlist:
 * the engine reads LLAMA_ARG_* as its options (and LLAMA_SERVER_*, HF_TOKEN,
 * AIP_* besides), and tandem's environment may hold keys meant for remote
 * upstreams, so only what a process, a locale and a GPU or BLAS backend need
 * passes (docs/serve.md, "The engines' environment"). LLAMA_* reaches a
 * child only as an explicit env entry. */
static bool inherited(const char *e) {
    static const char *const names[] = {
        "PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "LD_LIBRARY_PATH",
        "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL", "ONEAPI_DEVICE_SELECTOR",
    };
    static const char *const prefixes[] = {
        "LC_",   "GGML_", "CUDA_",     "NVIDIA_", "__NV_", "OMP_", "GOMP_", "KMP_",
        "OPENBLAS_", "MKL_", "HSA_", "HIP_", "ROCM_", "VK_", "SYCL_", "ZE_",
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (same_name(names[i], e))
            return true;
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (!strncmp(e, prefixes[i], strlen(prefixes[i])))
            return true;
    return false;
}

/* The allowlisted part of environ with env's entries replacing or adding
 * theirs (shallow; free the array only), or NULL on OOM. */
static char **child_env(char *const *env) {
    size_t n = 0, k = 0;
    while (environ[n])
        n++;
    while (env && env[k])
        k++;
    char **out = mem_calloc(n + k + 1, sizeof *out);
    size_t o = 0;
    for (size_t i = 0; out && i < n; i++) {
        bool replaced = !inherited(environ[i]);
        for (size_t j = 0; j < k && !replaced; j++)
            replaced = same_name(env[j], environ[i]);
        if (!replaced)
            out[o++] = environ[i];
    }
    for (size_t j = 0; out && j < k; j++)
        out[o++] = env[j];
    return out;
}

tandem_err engine_child_spawn(char *const *argv, char *const *env, const char *log_path,
                              const char *socket_path, struct engine_child **out, char *err,
                              size_t errlen) {
    *out = NULL;
    struct engine_child *c = mem_calloc(1, sizeof *c);
    if (c)
        c->pidfd = -1;
    if (!c || !(c->log_path = mem_strdup(log_path)) ||
        !(c->socket_path = mem_strdup(socket_path))) {
        engine_child_free(c);
        return TANDEM_ERR_NOMEM;
    }
    int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (log_fd < 0) {
        tandem_errmsg(err, errlen, "%s: %s", log_path, strerror(errno));
        engine_child_free(c);
        return TANDEM_ERR_IO;
    }
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) {
        close(log_fd);
        engine_child_free(c);
        return TANDEM_ERR_SPAWN;
    }
    char **envp = child_env(env);
    if (!envp) {
        close(log_fd);
        close(report[0]);
        close(report[1]);
        engine_child_free(c);
        return TANDEM_ERR_NOMEM;
    }
    pid_t parent = getpid();
    c->pid = fork();
    if (c->pid == 0)
        exec_child(argv, envp, log_fd, report[1], parent);
    mem_free(envp);
    int fork_errno = errno;
    close(log_fd);
    close(report[1]);
    int child_errno = 0;
    ssize_t n = c->pid > 0 ? read(report[0], &child_errno, sizeof child_errno) : -1;
    close(report[0]);
    if (c->pid < 0 || n > 0) {
        tandem_errmsg(err, errlen, "cannot start %s: %s", argv[0],
                      strerror(c->pid < 0 ? fork_errno : child_errno));
        if (c->pid > 0)
            waitpid(c->pid, NULL, 0);
        c->exited = true;
        engine_child_free(c);
        return TANDEM_ERR_SPAWN;
    }
    c->pidfd = (int)syscall(SYS_pidfd_open, c->pid, 0);
    if (c->pidfd >= 0)
        fcntl(c->pidfd, F_SETFD, FD_CLOEXEC);
    *out = c;
    return TANDEM_OK;
}

pid_t engine_child_pid(const struct engine_child *c) { return c->pid; }
const char *engine_child_socket(const struct engine_child *c) { return c->socket_path; }
int engine_child_exit_fd(const struct engine_child *c) { return c->pidfd; }

tandem_err engine_child_poll(struct engine_child *c, bool *exited, int *status) {
    if (!c->exited) {
        int st;
        pid_t r = waitpid(c->pid, &st, WNOHANG);
        if (r < 0 && errno != EINTR)
            return TANDEM_ERR_CHILD;
        if (r == c->pid) {
            c->exited = true;
            c->status = st;
        }
    }
    *exited = c->exited;
    if (c->exited && status)
        *status = c->status;
    return TANDEM_OK;
}

/* --- readiness ----------------------------------------------------------------------- */

/* One GET /health over a fresh connection to the unix socket at path;
 * returns the HTTP status or -1. */
static int health_status(const char *path, int timeout_ms) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path)
        return -1;
    memcpy(a.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int status = -1;
    static const char req[] = "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    char buf[64] = "";
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1) &&
        read(fd, buf, sizeof buf - 1) > 12)
        sscanf(buf, "HTTP/1.%*d %d", &status);
    close(fd);
    return status;
}

void engine_child_log_tail(const struct engine_child *c, char *out, size_t cap) {
    const char *path = c->log_path;
    out[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (line[0] != '\n') {
            line[strcspn(line, "\n")] = '\0';
            size_t n = strlen(line) < cap - 1 ? strlen(line) : cap - 1;
            memcpy(out, line, n);
            out[n] = '\0';
        }
    fclose(f);
}

tandem_err engine_child_wait_ready(struct engine_child *c, int timeout_ms, char *err,
                                   size_t errlen) {
    long deadline = host_now_ms() + timeout_ms;
    for (;;) {
        bool exited;
        int status;
        engine_child_poll(c, &exited, &status);
        if (exited) {
            char why[96], last[256];
            engine_child_log_tail(c, last, sizeof last);
            tandem_errmsg(err, errlen, "llama-server %s while loading (log %s: %s)",
                          engine_child_describe_status(status, why, sizeof why), c->log_path,
                          last);
            return TANDEM_ERR_CHILD;
        }
        if (health_status(c->socket_path, 1000) == 200)
            return TANDEM_OK;
        if (host_now_ms() >= deadline) {
            tandem_errmsg(err, errlen, "llama-server not ready after %d ms (log %s)", timeout_ms,
                          c->log_path);
            return TANDEM_ERR_TIMEOUT;
        }
        struct pollfd p = {.fd = c->pidfd, .events = POLLIN};
        poll(&p, c->pidfd >= 0 ? 1 : 0, 50);
    }
}

/* --- stopping ----------------------------------------------------------------------- */

void engine_child_signal(struct engine_child *c, int sig) {
    bool exited = false;
    engine_child_poll(c, &exited, NULL);
    if (!exited && c->pid > 0)
        kill(-c->pid, sig);
}

static bool wait_exit(struct engine_child *c, int ms) {
    long deadline = host_now_ms() + ms;
    bool exited = false;
    while (engine_child_poll(c, &exited, NULL) == TANDEM_OK && !exited) {
        long left = deadline - host_now_ms();
        if (left <= 0)
            return false;
        struct pollfd p = {.fd = c->pidfd, .events = POLLIN};
        poll(&p, c->pidfd >= 0 ? 1 : 0, c->pidfd >= 0 ? (int)left : (left < 20 ? (int)left : 20));
    }
    return exited;
}

tandem_err engine_child_stop(struct engine_child *c, int grace_ms, int *status) {
    bool exited = false;
    engine_child_poll(c, &exited, NULL);
    if (!exited) {
        kill(-c->pid, SIGTERM);
        if (!wait_exit(c, grace_ms)) {
            kill(-c->pid, SIGKILL);
            wait_exit(c, 60000);
        }
    }
    if (status)
        *status = c->status;
    return c->exited ? TANDEM_OK : TANDEM_ERR_CHILD;
}

void engine_child_free(struct engine_child *c) {
    if (!c)
        return;
    bool exited = c->exited;
    if (!exited && c->pid > 0) {
        kill(-c->pid, SIGKILL);
        wait_exit(c, 60000);
    }
    if (c->pidfd >= 0)
        close(c->pidfd);
    mem_free(c->log_path);
    mem_free(c->socket_path);
    mem_free(c);
}

char *engine_child_describe_status(int status, char *out, size_t cap) {
    if (WIFEXITED(status))
        snprintf(out, cap, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(out, cap, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(out, cap, "ended with wait status %d", status);
    return out;
}
