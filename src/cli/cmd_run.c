/* cmd_run.c: `tandem run MODEL.gguf [plan options]`: one supervised engine.
 *
 * Plans the model on the budget (as `tandem plan` would; a model that does
 * not fit is refused before anything starts, one that fits only partially
 * gets the GPU layers the plan chose), starts llama-server with the flags the
 * plan implies on a unix socket in a private 0700 run folder (no TCP port:
 * only this user can reach it), waits until it is healthy, records its
 * footprint, prints the socket's path, and then supervises it in the foreground: SIGINT/SIGTERM
 * stop it gracefully (exit 0); if it dies, tandem says how (exit 1). The
 * daemon (`tandem serve`) runs the same engine_child code from its loop. */
#include "cli/cmd_run.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>

#include "base/cache.h"
#include "engine/engine.h"
#include "base/host.h"
#include "engine/engine_child.h"
#include "engine/engine_rundir.h"
#include "plan/cost.h"
#include "plan/footprint.h"
#include "plan/plan_cli.h"
#include "version.h"

#define MAX_OPTIONS 40

struct run_options {
    struct plan_cli plan;
    const char *log_path;
    int timeout_ms;
    int grace_ms;
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem run MODEL.gguf [options]\n"
            "\n"
            "Starts one llama-server for MODEL with the settings the planner chose\n"
            "(explicit -c/-ngl with -fit off, -np, cache types, -fa, batches, --no-repack on\n"
            "a CPU, -lv 4), waits until it is healthy, records what it allocated in the\n"
            "footprint cache, prints where it listens, and supervises it until SIGINT/SIGTERM.\n"
            "A model that does not fit the budget is refused before it starts.\n"
            "The engine listens only on a unix socket in a private folder (mode 0700) under\n"
            "$XDG_RUNTIME_DIR, else $TMPDIR, else /tmp, removed when it stops; the ready line\n"
            "reads `ready: unix:SOCKET pid PID log LOG`, and\n"
            "`curl --unix-socket SOCKET http://localhost/health` talks to it.\n"
            "\n"
            "  all of `tandem plan`'s budget and launch options (--vram, --cpu, --ctx,\n"
            "  --parallel, --ngl, --cache-type-k/-v, --flash-attn, --batch, --ubatch, ...)\n"
            "  --log FILE        engine log (default $TANDEM_CACHE/logs/<model>.log)\n"
            "  --timeout SECS    how long loading may take (default 300)\n"
            "  --grace SECS      SIGTERM to SIGKILL on stop (default 10)\n"
            "  -h, --help\n"
            "\n"
            "exit codes: 0 stopped on request, 1 could not start or the engine died,\n"
            "2 usage error\n");
}

static int parse_seconds(const char *flag, const char *v, int *out_ms) {
    char *end;
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < 1 || n > 86400) {
        fprintf(stderr, "tandem run: %s: expected seconds (1 to 86400), got '%s'\n", flag, v);
        return 2;
    }
    *out_ms = (int)n * 1000;
    return 0;
}

static int parse_args(int argc, char **argv, struct run_options *o) {
    struct option opts[MAX_OPTIONS];
    size_t n = 0;
    while (plan_cli_options[n].name && n < MAX_OPTIONS - 4) {
        opts[n] = plan_cli_options[n];
        n++;
    }
    opts[n++] = (struct option){"log", required_argument, NULL, 1};
    opts[n++] = (struct option){"timeout", required_argument, NULL, 2};
    opts[n++] = (struct option){"grace", required_argument, NULL, 3};
    opts[n] = (struct option){0};
    int c, rc = 0;
    optind = 0;
    while (!rc && (c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'h': usage(stdout); return -1;
        case 1: o->log_path = optarg; break;
        case 2: rc = parse_seconds("--timeout", optarg, &o->timeout_ms); break;
        case 3: rc = parse_seconds("--grace", optarg, &o->grace_ms); break;
        case '?': rc = 2; break;
        default: rc = plan_cli_option(c, optarg, &o->plan);
        }
    }
    if (!rc && o->plan.config) {
        fprintf(stderr, "tandem run: --config is for tandem plan (and serve); run takes a model\n");
        rc = 2;
    }
    if (!rc && optind + 1 != argc) {
        usage(stderr);
        rc = 2;
    }
    return rc;
}

/* Plans m alone on the budget; fills *settings with the resolved launch settings. */
static int plan_one(const char *name, struct plan_model *m, const struct run_options *o,
                    struct plan_settings *settings) {
    struct fit_budget budget;
    uint64_t total;
    plan_cli_budget(&o->plan, &budget, &total);
    struct plan_settings want = o->plan.settings;
    if (plan_model_is_encoder(m))
        want.ctx = 0;
    struct fit_model_result r;
    struct fit_result res;
    tandem_err e = plan_cli_fit_one(name, m, &want, &budget, !o->plan.no_measured, settings, &r,
                                    &res);
    if (e != TANDEM_OK) {
        fprintf(stderr, "tandem run: %s: %s\n", name, tandem_strerror(e));
        return 1;
    }
    if (res.verdict == FIT_NO_FIT) {
        fprintf(stderr, "tandem run: %s\n", res.reason);
        return 1;
    }
    fprintf(stderr, "tandem run: plan: %s: %s\n",
            res.verdict == FIT_CO_RESIDENT ? "fits" : fit_verdict_name(res.verdict), res.reason);
    return 0;
}

static int default_log(const char *name, char *out, size_t cap) {
    char dir[4096];
    if (cache_make_dir(dir, sizeof dir, "logs") != TANDEM_OK)
        return 1;
    int n = snprintf(out, cap, "%s/%s.log", dir, name);
    return n < 0 || (size_t)n >= cap;
}

/* Waits for a stop signal or the child's death. Returns the exit code. */
static int supervise(struct engine_child *child, int sigfd, const struct run_options *o,
                     const char *log_path) {
    struct pollfd p[2] = {{.fd = sigfd, .events = POLLIN},
                          {.fd = engine_child_exit_fd(child), .events = POLLIN}};
    char why[96];
    for (;;) {
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            return 1;
        bool exited = false;
        int status = 0;
        engine_child_poll(child, &exited, &status);
        if (exited) {
            fprintf(stderr, "tandem run: llama-server %s (log %s)\n",
                    engine_child_describe_status(status, why, sizeof why), log_path);
            return 1;
        }
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            (void)!read(sigfd, &si, sizeof si);
            fprintf(stderr, "tandem run: %s: stopping llama-server\n", strsignal((int)si.ssi_signo));
            engine_child_stop(child, o->grace_ms, &status);
            fprintf(stderr, "tandem run: llama-server %s\n",
                    engine_child_describe_status(status, why, sizeof why));
            return 0;
        }
    }
}

static int start_and_supervise(const char *model_path, const char *name, struct plan_model *m,
                               const struct plan_settings *s, const struct run_options *o,
                               const char *llama_server) {
    char engine[4096], log_path[4200], err[768] = "";
    enum engine_source src;
    if (engine_locate(llama_server, TANDEM_ENGINE_BUILD, engine, sizeof engine, &src) !=
        TANDEM_OK) {
        fprintf(stderr, "tandem run: no llama-server at %s (run `make deps`, or see doctor)\n",
                engine);
        return 1;
    }
    if (o->log_path)
        snprintf(log_path, sizeof log_path, "%s", o->log_path);
    else if (default_log(name, log_path, sizeof log_path)) {
        fprintf(stderr, "tandem run: cannot place the log; use --log FILE\n");
        return 1;
    }
    struct engine_rundir *run = NULL;
    char sock[256];
    if (engine_rundir_new(&run, err, sizeof err) != TANDEM_OK ||
        engine_rundir_socket(run, 0, sock, sizeof sock, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem run: %s\n", err);
        engine_rundir_free(run);
        return 1;
    }
    char **argv = NULL;
    if (engine_child_argv(engine, model_path, name, s, sock, NULL, NULL, &argv) != TANDEM_OK) {
        fprintf(stderr, "tandem run: cannot prepare the engine's arguments\n");
        engine_rundir_free(run);
        return 1;
    }
    /* block the stop signals first: they are read from a signalfd */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigprocmask(SIG_BLOCK, &stop, NULL);
    int sigfd = signalfd(-1, &stop, SFD_CLOEXEC);
    struct engine_child *child = NULL;
    int64_t t0 = host_now_ms();
    tandem_err e = engine_child_spawn(argv, NULL, log_path, sock, &child, err, sizeof err);
    engine_child_argv_free(argv);
    if (e == TANDEM_OK)
        e = engine_child_wait_ready(child, o->timeout_ms, err, sizeof err);
    struct cost_record load = {.loads = 1, .load_ms = (double)(host_now_ms() - t0)};
    int rc = 1;
    if (e != TANDEM_OK) {
        fprintf(stderr, "tandem run: %s\n", err);
    } else {
        char key[HASH_SHA256_HEX_LEN + 1];
        struct footprint_measure meas;
        if (footprint_record_log(m, s, log_path, engine_child_pid(child), key, NULL, 0, err,
                                 sizeof err) != TANDEM_OK ||
            footprint_load(key, &meas, err, sizeof err) != TANDEM_OK)
            fprintf(stderr, "tandem run: footprint not recorded: %s\n", err);
        else if (cost_record_add(m, TANDEM_ENGINE_BUILD,
                                 footprint_measure_has_gpu(&meas) ? COST_GPU : COST_CPU, &load,
                                 err, sizeof err) != TANDEM_OK)
            fprintf(stderr, "tandem run: load time not recorded: %s\n", err);
        printf("ready: unix:%s pid %ld log %s\n", sock, (long)engine_child_pid(child), log_path);
        fflush(stdout);
        rc = supervise(child, sigfd, o, log_path);
    }
    engine_child_free(child);
    engine_rundir_free(run); /* after the engine: its socket goes with the folder */
    if (sigfd >= 0)
        close(sigfd);
    return rc;
}

int cmd_run_main(int argc, char **argv, const char *llama_server) {
    struct run_options o = {.plan = {.settings = plan_default_settings()},
                            .timeout_ms = 300000,
                            .grace_ms = 10000};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    const char *path = argv[optind];
    const char *slash = strrchr(path, '/');
    char name[256];
    snprintf(name, sizeof name, "%s", slash ? slash + 1 : path);
    char *dot = strstr(name, ".gguf");
    if (dot)
        *dot = '\0';
    struct plan_model *m = NULL;
    char err[512];
    if (plan_model_open(path, &m, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem run: %s\n", err);
        return 1;
    }
    struct plan_settings s;
    rc = plan_one(name, m, &o, &s);
    if (!rc)
        rc = start_and_supervise(path, name, m, &s, &o, llama_server);
    plan_model_free(m);
    return rc;
}
