/* Unit tests for engine_child: spawning without a shell, exit detection
 * through the pidfd, SIGTERM then SIGKILL to the process group, death with
 * the parent, and the llama-server argv derived from the plan. Real programs
 * (/bin/sleep, /bin/false, /bin/sh as a stubborn child) stand in for the
 * engine here; tests/e2e/test_run.py drives the real llama-server. */
#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/engine_child.h"

#define LOG "/tmp/tandem-child-test.log"
#define SOCK "/tmp/tandem-child-test.sock"

static struct engine_child *spawn(char **argv) {
    struct engine_child *c = NULL;
    char err[256] = "";
    cr_assert_eq(engine_child_spawn(argv, NULL, LOG, SOCK, &c, err, sizeof err), TANDEM_OK, "%s", err);
    return c;
}

Test(engine_child, exit_is_seen_through_the_pidfd) {
    char *argv[] = {"/bin/false", NULL};
    struct engine_child *c = spawn(argv);
    struct pollfd p = {.fd = engine_child_exit_fd(c), .events = POLLIN};
    cr_assert_geq(p.fd, 0);
    cr_expect_eq(poll(&p, 1, 5000), 1);
    bool exited = false;
    int status = 0;
    cr_assert_eq(engine_child_poll(c, &exited, &status), TANDEM_OK);
    cr_expect(exited && WIFEXITED(status) && WEXITSTATUS(status) == 1);
    char why[64];
    cr_expect_str_eq(engine_child_describe_status(status, why, sizeof why), "exited with status 1");
    engine_child_free(c);
}

Test(engine_child, stop_sends_sigterm_and_reaps) {
    char *argv[] = {"/bin/sleep", "30", NULL};
    struct engine_child *c = spawn(argv);
    bool exited = true;
    engine_child_poll(c, &exited, NULL);
    cr_expect(!exited);
    cr_expect_eq(getpgid(engine_child_pid(c)), engine_child_pid(c)); /* its own group */
    int status = 0;
    cr_assert_eq(engine_child_stop(c, 5000, &status), TANDEM_OK);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
    cr_expect_eq(kill(engine_child_pid(c), 0), -1); /* reaped: no zombie left */
    engine_child_free(c);
}

Test(engine_child, stubborn_child_gets_sigkill_after_grace) {
    /* a shell is fine in a test: it plays an engine that ignores SIGTERM */
    char *argv[] = {"/bin/sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done", NULL};
    struct engine_child *c = spawn(argv);
    usleep(200000); /* let the trap be installed */
    int status = 0;
    cr_assert_eq(engine_child_stop(c, 300, &status), TANDEM_OK);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    engine_child_free(c);
}

/* The child's environment, as /usr/bin/env prints it into a log of its own. */
static char *child_environment(char *const *env, char *buf, size_t cap) {
    char log[] = "/tmp/tandem-child-env-XXXXXX";
    int fd = mkstemp(log);
    cr_assert_geq(fd, 0);
    close(fd);
    char *argv[] = {"/usr/bin/env", NULL};
    struct engine_child *c = NULL;
    char err[256] = "";
    cr_assert_eq(engine_child_spawn(argv, env, log, SOCK, &c, err, sizeof err), TANDEM_OK, "%s", err);
    struct pollfd p = {.fd = engine_child_exit_fd(c), .events = POLLIN};
    cr_assert_eq(poll(&p, 1, 5000), 1, "env did not exit");
    bool exited = false;
    int status = 0;
    cr_assert_eq(engine_child_poll(c, &exited, &status), TANDEM_OK);
    cr_assert(exited && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    engine_child_free(c);
    FILE *f = fopen(log, "r");
    cr_assert(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    unlink(log);
    return buf;
}

Test(engine_child, environment_is_an_allowlist_plus_explicit_entries) {
    setenv("PATH", "/usr/bin:/bin", 1);
    setenv("LANG", "C.UTF-8", 1);
    setenv("LC_ALL", "C", 1);
    setenv("CUDA_VISIBLE_DEVICES", "1", 1);
    setenv("GGML_CUDA_NO_PINNED", "1", 1);
    setenv("OMP_NUM_THREADS", "2", 1);
    setenv("LLAMA_ARG_PORT", "9", 1);         /* would reconfigure the engine */
    setenv("LLAMA_ARG_API_KEY_FILE", "/x", 1);
    setenv("LLAMA_SERVER_SLOTS_DEBUG", "1", 1);
    setenv("HF_TOKEN", "hf-secret", 1);
    setenv("OPENAI_API_KEY", "sk-secret", 1); /* meant for a remote upstream */
    setenv("TANDEM_API_KEY", "k-secret", 1);
    setenv("PATHOLOGICAL", "1", 1);           /* a name that starts like PATH */
    char *env[] = {"LLAMA_SERVER_SLOTS_DEBUG=2", "CUDA_VISIBLE_DEVICES=0", NULL};
    static char out[65536];
    child_environment(env, out, sizeof out);
    cr_expect(strstr(out, "PATH=/usr/bin:/bin\n"), "%s", out);
    cr_expect(strstr(out, "LANG=C.UTF-8\n") && strstr(out, "LC_ALL=C\n"), "%s", out);
    cr_expect(strstr(out, "GGML_CUDA_NO_PINNED=1\n") && strstr(out, "OMP_NUM_THREADS=2\n"),
              "%s", out);
    /* explicit entries win over, and are the only way to, LLAMA_* */
    cr_expect(strstr(out, "LLAMA_SERVER_SLOTS_DEBUG=2\n") && strstr(out, "CUDA_VISIBLE_DEVICES=0\n"),
              "%s", out);
    cr_expect(!strstr(out, "CUDA_VISIBLE_DEVICES=1"), "%s", out);
    cr_expect(!strstr(out, "LLAMA_ARG_"), "%s", out);
    cr_expect(!strstr(out, "secret"), "%s", out);
    cr_expect(!strstr(out, "PATHOLOGICAL"), "%s", out);
}

Test(engine_child, missing_binary_is_a_spawn_error) {
    char *argv[] = {"/nonexistent/llama-server", NULL};
    struct engine_child *c = (struct engine_child *)1;
    char err[256] = "";
    cr_expect_eq(engine_child_spawn(argv, NULL, LOG, SOCK, &c, err, sizeof err), TANDEM_ERR_SPAWN);
    cr_expect_null(c);
    cr_expect(strstr(err, "No such file"), "%s", err);
    cr_expect_eq(engine_child_spawn(argv, NULL, "/nonexistent-dir/x.log", SOCK, &c, err, sizeof err),
                 TANDEM_ERR_IO);
}

Test(engine_child, child_dies_with_its_parent) {
    int pids[2];
    cr_assert_eq(pipe(pids), 0);
    pid_t mid = fork();
    if (mid == 0) { /* plays tandem: start an engine, report its pid, die */
        char *argv[] = {"/bin/sleep", "30", NULL};
        struct engine_child *c = NULL;
        if (engine_child_spawn(argv, NULL, LOG, SOCK, &c, NULL, 0) != TANDEM_OK)
            _exit(1);
        pid_t pid = engine_child_pid(c);
        (void)!write(pids[1], &pid, sizeof pid);
        _exit(0); /* without stopping it */
    }
    pid_t engine = 0;
    cr_assert_eq(read(pids[0], &engine, sizeof engine), (ssize_t)sizeof engine);
    waitpid(mid, NULL, 0);
    /* the orphan is reparented; PR_SET_PDEATHSIG has killed it within moments */
    int alive = 1;
    for (int i = 0; i < 100 && alive; i++) {
        char path[64], state = '?';
        snprintf(path, sizeof path, "/proc/%d/stat", (int)engine);
        FILE *f = fopen(path, "r");
        alive = f && fscanf(f, "%*d %*s %c", &state) == 1 && state != 'Z';
        if (f)
            fclose(f);
        if (alive)
            usleep(20000);
    }
    cr_expect(!alive, "engine %d outlived its parent", (int)engine);
}

Test(engine_child, wait_ready_reports_a_child_that_exits) {
    char *argv[] = {"/bin/sh", "-c", "echo 'failed to load model: bad magic'; exit 3", NULL};
    unlink(LOG);
    struct engine_child *c = spawn(argv);
    char err[512] = "";
    cr_expect_eq(engine_child_wait_ready(c, 10000, err, sizeof err), TANDEM_ERR_CHILD);
    cr_expect(strstr(err, "exited with status 3") && strstr(err, "bad magic"), "%s", err);
    engine_child_free(c);
}

Test(engine_child, argv_carries_the_plan) {
    struct plan_settings r = plan_default_settings();
    r.ctx = 8192;
    r.ngl = 0;
    r.parallel = 2;
    r.batch = 512;
    r.ubatch = 512;
    r.gpu = false;
    r.threads = 3;
    r.no_warmup = true;
    char *extra[] = {"--verbose-prompt", NULL};
    char **argv = NULL;
    cr_assert_eq(engine_child_argv("/e/llama-server", "/m.gguf", "kev", &r, "/run/t/e0.sock",
                                   "/run/t/e0.slots", extra, &argv),
                 TANDEM_OK);
    char line[1024] = "";
    for (size_t i = 0; argv[i]; i++)
        snprintf(line + strlen(line), sizeof line - strlen(line), "%s%s", i ? " " : "", argv[i]);
    cr_expect_str_eq(line, "/e/llama-server -m /m.gguf --host /run/t/e0.sock --cors-origins none "
                           "--no-cors-credentials -c 8192 "
                           "-ngl 0 -fit off -np 2 -ctk f16 -ctv f16 -fa off -b 512 -ub 512 "
                           "--no-repack --device none -t 3 -tb 3 --no-warmup --alias kev --cache-ram 0 "
                           "--slot-save-path /run/t/e0.slots -lv 4 "
                           "--no-log-timestamps --no-log-prefix --verbose-prompt");
    engine_child_argv_free(argv);
    r.gpu = true; /* on a GPU: no --device none; threads 0 = the engine's default */
    r.ngl = 33;
    r.threads = 0;
    r.no_warmup = false;
    cr_assert_eq(engine_child_argv("/e/llama-server", "/m.gguf", NULL, &r, "/s.sock", NULL, NULL, &argv),
                 TANDEM_OK);
    for (size_t i = 0; argv[i]; i++)
        cr_expect(strcmp(argv[i], "--device") && strcmp(argv[i], "-t") &&
                      strcmp(argv[i], "--no-repack") && strcmp(argv[i], "--no-warmup"),
                  "%s", argv[i]);
    engine_child_argv_free(argv);
    r.ngl = PLAN_NGL_AUTO;
    cr_expect_eq(engine_child_argv("/e", "/m", NULL, &r, "/s.sock", NULL, NULL, &argv),
                 TANDEM_ERR_INVAL);
}

/* Answers one GET /health with 200 on the listening unix socket fd. */
static void *answer_health(void *arg) {
    int fd = accept(*(int *)arg, NULL, NULL);
    char buf[512];
    if (fd >= 0 && read(fd, buf, sizeof buf) > 0) {
        static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        (void)!write(fd, ok, sizeof ok - 1);
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

Test(engine_child, wait_ready_polls_health_on_the_unix_socket) {
    unlink(SOCK);
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX, .sun_path = SOCK};
    cr_assert(bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 4) == 0);
    pthread_t t;
    pthread_create(&t, NULL, answer_health, &l);
    char *argv[] = {"/bin/sleep", "30", NULL};
    struct engine_child *c = spawn(argv);
    cr_expect_str_eq(engine_child_socket(c), SOCK);
    char err[512] = "";
    cr_expect_eq(engine_child_wait_ready(c, 5000, err, sizeof err), TANDEM_OK, "%s", err);
    pthread_join(t, NULL);
    engine_child_free(c);
    close(l);
    unlink(SOCK);
}

Test(engine_child, wait_ready_times_out_without_a_listener) {
    unlink(SOCK);
    char *argv[] = {"/bin/sleep", "30", NULL};
    struct engine_child *c = spawn(argv);
    char err[512] = "";
    cr_expect_eq(engine_child_wait_ready(c, 300, err, sizeof err), TANDEM_ERR_TIMEOUT, "%s", err);
    engine_child_free(c);
}
