/* private_daemon.c: a private `tandem serve` child for decide and mcp.
 *
 * The child is this very binary (/proc/self/exe), so the daemon's code runs
 * the requests (one implementation, one behaviour) and starts only the
 * engines the requests need. Readiness comes over sd_notify on an abstract
 * datagram socket; the URL comes in the same message, since the child binds
 * port 0. */
#include "cli/private_daemon.h"

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
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t n = strlen(name);
    memcpy(a.sun_path, name, n);
    a.sun_path[0] = '\0';
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n))) {
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

/* Waits for READY=1 and the URL in STATUS=. Returns false after a message. */
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
        if (poll(&p, 1, 100) <= 0)
            continue;
        char msg[1024];
        ssize_t n = recv(d->sock, msg, sizeof msg - 1, 0);
        if (n <= 0)
            continue;
        msg[n] = '\0';
        const char *url = strstr(msg, "STATUS=serving on ");
        if (strstr(msg, "READY=1") && url) {
            snprintf(d->url, sizeof d->url, "%.*s", (int)strcspn(url + 18, "\n"), url + 18);
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

struct private_daemon *private_daemon_start(const struct private_daemon_params *p) {
    struct private_daemon *d = mem_calloc(1, sizeof *d);
    if (!d) {
        fprintf(stderr, "%s: out of memory\n", p->command);
        return NULL;
    }
    d->p = *p;
    d->sock = -1;
    if (!start(d)) {
        private_daemon_stop(d, true);
        return NULL;
    }
    return d;
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
