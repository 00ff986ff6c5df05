/* private_daemon.c: a private `tandem serve` child for decide and mcp.
 *
 * The child is this very binary (/proc/self/exe), so the daemon's code runs
 * the requests (one implementation, one behaviour) and starts only the
 * engines the requests need. Readiness comes over sd_notify on an abstract
 * datagram socket; the URL comes in the same message, since the child binds
 * port 0.
 *
 * Only the child can make us ready. An abstract socket has no permissions:
 * its name shows in /proc/net/unix and any local user may send to it, and a
 * forged "READY=1 / STATUS=serving on http://attacker" would receive the API
 * key and the request. So the socket has SO_PASSCRED, and the kernel stamps
 * every datagram with its sender's pid and uid (SCM_CREDENTIALS; only
 * CAP_SYS_ADMIN can claim another pid); a message counts only when that pid
 * is the child's and the uid ours. The child is ours and not yet reaped, so
 * its pid cannot be reused by anyone else while we wait. Anything else is
 * dropped (said with --verbose) and the wait goes on. We chose this over an
 * inherited socketpair because `tandem serve` keeps speaking plain sd_notify,
 * the same code path systemd's $NOTIFY_SOCKET uses. */
#include "flow/private_daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/host.h"
#include "base/mem.h"

#define READY_TIMEOUT_MS 120000
#define STOP_TIMEOUT_MS 60000

struct private_daemon {
    struct private_daemon_params p;
    pid_t pid;
    int sock;
    char log[64]; /* its stderr, unless verbose */
    char url[300];
};

/* A datagram socket in the abstract namespace for the child's sd_notify. */
static int notify_socket(char *name, size_t cap) {
    unsigned rnd = 0;
    (void)!getrandom(&rnd, sizeof rnd, 0);
    snprintf(name, cap, "@tandem-private-%ld-%08x", (long)getpid(), rnd);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t n = strlen(name);
    memcpy(a.sun_path, name, n);
    a.sun_path[0] = '\0';
    int on = 1;
    if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &on, sizeof on) ||
                    bind(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)))) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The child: dies with us, logs to log_fd, tells us on NOTIFY_SOCKET. */
static void exec_serve(const struct private_daemon_params *p, const char *self,
                       const char *notify, int log_fd) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (log_fd >= 0)
        dup2(log_fd, STDERR_FILENO);
    int null = open("/dev/null", O_RDWR);
    dup2(null, STDIN_FILENO);
    dup2(null, STDOUT_FILENO);
    setenv("NOTIFY_SOCKET", notify, 1);
    char *argv[12];
    int n = 0;
    argv[n++] = (char *)self;
    if (p->llama_server) {
        argv[n++] = "--llama-server";
        argv[n++] = (char *)p->llama_server;
    }
    argv[n++] = "serve";
    argv[n++] = "--config";
    argv[n++] = (char *)p->config;
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1:0";
    argv[n++] = "--drain-delay"; /* nothing but this process routes to a private daemon */
    argv[n++] = "0";
    argv[n] = NULL;
    execv(self, argv);
    _exit(127);
}

static void show_log_tail(const struct private_daemon *d) {
    FILE *f = d->log[0] ? fopen(d->log, "r") : NULL;
    if (!f)
        return;
    char line[1024];
    fprintf(stderr, "%s: the private daemon's log (%s):\n", d->p.command, d->log);
    while (fgets(line, sizeof line, f))
        fprintf(stderr, "  %s", line);
    fclose(f);
}

/* Receives one datagram into msg (NUL-terminated) and returns its length,
 * or -1 when none is queued. *from is the sender's pid by SCM_CREDENTIALS
 * when its uid is ours, else -1. */
static ssize_t recv_from_pid(int sock, char *msg, size_t cap, pid_t *from) {
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(struct ucred))];
    } ctl;
    struct iovec iov = {.iov_base = msg, .iov_len = cap - 1};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                        .msg_controllen = sizeof ctl.buf};
    ssize_t n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0)
        return -1;
    msg[n] = '\0';
    *from = -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_CREDENTIALS ||
            c->cmsg_len < CMSG_LEN(sizeof(struct ucred)))
            continue;
        struct ucred cred;
        memcpy(&cred, CMSG_DATA(c), sizeof cred);
        if (cred.uid == getuid())
            *from = cred.pid;
    }
    return n;
}

/* Reads every queued datagram; true once the child's own says READY=1 and
 * the URL in STATUS=. Others are dropped. */
static bool read_ready(struct private_daemon *d) {
    char msg[1024];
    pid_t from;
    ssize_t n;
    while ((n = recv_from_pid(d->sock, msg, sizeof msg, &from)) >= 0) {
        if (from != d->pid) {
            if (d->p.verbose)
                fprintf(stderr, "%s: ignored a readiness message from pid %ld, not the private "
                                "daemon (%ld)\n", d->p.command, (long)from, (long)d->pid);
            continue;
        }
        const char *url = strstr(msg, "STATUS=serving on ");
        if (strstr(msg, "READY=1") && url) {
            snprintf(d->url, sizeof d->url, "%.*s", (int)strcspn(url + 18, "\n"), url + 18);
            return true;
        }
    }
    return false;
}

/* Waits for the child's READY=1. Returns false after a message. */
static bool wait_ready(struct private_daemon *d) {
    int64_t deadline = host_now_ms() + READY_TIMEOUT_MS;
    while (host_now_ms() < deadline) {
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            fprintf(stderr, "%s: the private daemon exited (status %d) before it was ready\n",
                    d->p.command, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
            d->pid = 0;
            return false;
        }
        struct pollfd p = {.fd = d->sock, .events = POLLIN};
        if (poll(&p, 1, 100) > 0 && read_ready(d)) {
            /* Nothing is read from it any more. Closed, it refuses the child's
             * later notifications (RELOADING=1, STOPPING=1) at once; open, a
             * queue filled by another user would block the child's send, and
             * its exit, until the stop timeout. */
            close(d->sock);
            d->sock = -1;
            return true;
        }
    }
    fprintf(stderr, "%s: the private daemon was not ready after %d s\n", d->p.command,
            READY_TIMEOUT_MS / 1000);
    return false;
}

static bool start(struct private_daemon *d) {
    char self[PATH_MAX], notify[96];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0 || (d->sock = notify_socket(notify, sizeof notify)) < 0) {
        fprintf(stderr, "%s: cannot start a private daemon: %s\n", d->p.command, strerror(errno));
        return false;
    }
    self[n] = '\0';
    int log_fd = -1;
    if (!d->p.verbose) {
        snprintf(d->log, sizeof d->log, "/tmp/tandem-private-XXXXXX");
        log_fd = mkstemp(d->log);
    }
    fflush(NULL);
    d->pid = fork();
    if (d->pid == 0)
        exec_serve(&d->p, self, notify, log_fd);
    if (log_fd >= 0)
        close(log_fd);
    if (d->pid < 0) {
        fprintf(stderr, "%s: fork: %s\n", d->p.command, strerror(errno));
        return false;
    }
    return wait_ready(d);
}

tandem_err private_daemon_start(const struct private_daemon_params *p, struct private_daemon **out) {
    struct private_daemon *d = *out = mem_calloc(1, sizeof *d);
    if (!d) {
        fprintf(stderr, "%s: out of memory\n", p->command);
        return TANDEM_ERR_NOMEM;
    }
    d->p = *p;
    d->sock = -1;
    if (!start(d)) {
        private_daemon_stop(d, true);
        *out = NULL;
        return TANDEM_ERR_SPAWN;
    }
    return TANDEM_OK;
}

const char *private_daemon_url(const struct private_daemon *d) { return d->url; }

void private_daemon_stop(struct private_daemon *d, bool show_log) {
    if (!d)
        return;
    if (d->pid > 0) {
        kill(d->pid, SIGTERM);
        int64_t deadline = host_now_ms() + STOP_TIMEOUT_MS;
        while (waitpid(d->pid, NULL, WNOHANG) == 0 && host_now_ms() < deadline)
            usleep(20000);
        if (kill(d->pid, 0) == 0) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, NULL, 0);
        }
    }
    if (show_log)
        show_log_tail(d);
    if (d->log[0])
        unlink(d->log);
    if (d->sock >= 0)
        close(d->sock);
    mem_free(d);
}
