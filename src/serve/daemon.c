/* daemon.c: the daemon behind `tandem serve --config tandem.yaml`.
 *
 * daemon_new does everything that can fail before a port is opened: the
 * config is validated, the engine located, every model's header read and
 * planned on the budget (a model that cannot fit even alone, or not beside
 * the pinned ones, is a configuration error), the pipelines compiled.
 * daemon_run hashes the models pipelines name, opens the log directory and
 * audit log, and wires the subsystems: the scheduler and its children
 * (sched), the remote upstreams (remote), the routes (api) behind the HTTP
 * server (http), the event stream (events), the metrics (prom). Then one
 * libevent loop runs them all until a signal.
 *
 * The drain (SIGTERM or SIGINT) is the state machine of drain.h; the
 * daemon carries out its actions:
 *
 *   SERVING --signal--> DELAYING --drain delay over--> STOPPING --engines stopped--> exit
 *          on_stop_signal          on_drain_delay               on_drained (the loop
 *                                  (stop_admitting)             exits EXIT_FLUSH_MS later)
 *   DELAYING: /health says 503 at once while requests are still admitted
 *             for limits.drain_delay (gateways take the node out first);
 *             a delay of 0 goes straight to STOPPING.
 *   STOPPING: no new connections; admitted requests finish up to
 *             shutdown.grace (queued ones that would need a load fail with
 *             503); on_grace then ends the rest; the engines stop.
 *   A second signal in DELAYING or STOPPING stops admitting at once and
 *   ends every request now (sched_shutdown_now).
 *
 * SIGHUP re-reads the config: when reload_models_same() says the models and
 * their placement inputs are unchanged, keys, limits, logging and pipelines
 * apply at once (apply_config); otherwise the change is reported as needing
 * a restart. A replaced config and pipeline set live on until exit, since
 * runs in flight may still point into them.
 *
 * Under systemd (Type=notify) READY=1 (with STATUS=serving on <url>, which
 * `tandem decide` reads to find a private daemon on port 0), RELOADING=1 and
 * STOPPING=1 are sent on $NOTIFY_SOCKET (the protocol is one datagram; no
 * libsystemd needed). Everything the daemon does is logged on stderr. */
#include "serve/daemon.h"

#include <errno.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>

#include "serve/api.h"
#include "serve/audit.h"
#include "base/cache.h"
#include "serve/config.h"
#include "serve/dcache.h"
#include "serve/drain.h"
#include "engine/engine.h"
#include "plan/fit.h"
#include "base/hash.h"
#include "base/host.h"
#include "serve/http.h"
#include "base/nvml.h"
#include "serve/pipeline.h"
#include "serve/placement.h"
#include "plan/plan_cli.h"
#include "serve/prom.h"
#include "serve/reload.h"
#include "serve/remote.h"
#include "serve/s1.h"
#include "serve/sched.h"
#include "serve/store.h"
#include "base/mem.h"
#include "base/units.h"
#include "version.h"

#define READY_POLL_MS 50
#define EXIT_FLUSH_MS 100 /* after the drain, for the last bytes of ended streams */

struct daemon {
    struct config *cfg;
    const char *config_path;
    const char *listen_flag;           /* daemon_params.listen */
    int64_t drain_delay_flag;          /* daemon_params.drain_delay_ms; < 0 = the config's */
    char engine[4096];
    struct fit_budget budget;
    struct place_budget place_budget;  /* per device, as placement and the scheduler see it */
    bool simulated;                    /* budget.vram on a machine without a GPU */
    uint64_t budget_total;
    const char *budget_source;
    struct plan_model **pm;            /* NULL for remote models */
    size_t local[PLACE_MAX_MODELS];    /* config indices of the local models */
    size_t n_local;                    /* = the scheduler's models, in this order */
    struct api_model *models;
    struct pipeline_model *pmodels;  /* the same models as pipelines see them */
    char (*file_sha256)[HASH_SHA256_HEX_LEN + 1];
    struct pipeline_set *pipelines;
    struct config **retired;         /* configs and pipeline sets replaced by SIGHUP: runs */
    struct pipeline_set **retired_sets; /* in flight may still use them, so they live on */
    size_t n_retired;
    size_t n;
    size_t default_model;
    struct event_base *base;
    struct prom *metrics;
    struct nvml *nvml; /* NULL without an NVIDIA driver */
    struct audit *audit;
    struct store *store;           /* the request store; NULL with store.path: off */
    struct sched *sched;
    struct dcache *cache;  /* the decision cache, by scheduler index */
    struct events *events; /* GET /v1/events */
    struct api *api;
    struct http_server *server;
    struct remote *remote;           /* remote models' upstreams (NULL without any) */
    struct event *sig_term, *sig_int, *sig_hup, *ready_ev, *grace_ev, *delay_ev;
    struct event *audit_ev; /* every second: retry the audit lines waiting for the disk */
    enum drain_state drain;
    struct sched_model_spec *specs; /* the local models' scheduler specs, for daemon_run */
};

/* --- systemd notification ---------------------------------------------------------------- */

static void notify(const char *state) {
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || (path[0] != '/' && path[0] != '@') || strlen(path) >= sizeof(struct sockaddr_un){0}.sun_path)
        return;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, path, strlen(path));
    if (a.sun_path[0] == '@')
        a.sun_path[0] = '\0'; /* abstract namespace */
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
    (void)!sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&a, len);
    close(fd);
}

/* --- planning ------------------------------------------------------------------------------ */

static void config_budget(const struct config *cfg, struct daemon *sv) {
    struct plan_cli o = {.settings = plan_default_settings()};
    if (cfg->vram)
        o.vram = cfg->vram, o.have_vram = true;
    o.reserve = cfg->reserve, o.have_reserve = true;
    if (cfg->ram)
        o.ram = cfg->ram, o.have_ram = true;
    sv->budget_source = plan_cli_budget(&o, &sv->budget, &sv->budget_total);
    sv->simulated = plan_cli_place_budget(&o, &sv->budget, &sv->place_budget);
    placement_reserve_cache(cfg, &sv->place_budget);
}

/* The modification time of path in Unix seconds, 0 when it cannot be read:
 * a model's date on /v1/models (GGUF defines no date key). */
static int64_t file_mtime(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && st.st_mtime > 0 ? (int64_t)st.st_mtime : 0;
}

/* Opens every local model's header. Returns 0 or 2. */
static int open_models(struct daemon *sv) {
    for (size_t i = 0; i < sv->n; i++) {
        const struct config_model *cm = &sv->cfg->models[i];
        char err[512];
        if (!cm->upstream && plan_model_open(cm->path, &sv->pm[i], err, sizeof err) != TANDEM_OK) {
            fprintf(stderr, "tandem serve: %s:%u: models.%s: %s\n", sv->config_path, cm->line,
                    cm->name, err);
            return 2;
        }
    }
    return 0;
}

/* Fills model i's scheduler spec (the scheduler's model sched_index) and
 * API entries from its slot in the chosen arrangement, with threads CPU
 * threads. */
static void apply_slot(struct daemon *sv, size_t i, size_t sched_index,
                       const struct place_slot *slot, uint32_t threads,
                       struct sched_model_spec *spec) {
    const struct config_model *cm = &sv->cfg->models[i];
    struct plan_model *m = sv->pm[i];
    struct plan_settings want = cm->settings, resolved;
    want.gpu = slot->device != PLACE_CPU;
    want.ngl = slot->ngl;
    want.threads = cm->settings.threads ? cm->settings.threads : threads;
    want.no_warmup = slot->device == PLACE_CPU || sv->simulated; /* computes on the CPU */
    plan_model_resolve(m, &want, &resolved);
    *spec = (struct sched_model_spec){
        .name = cm->name, .path = cm->path, .model = m, .settings = resolved,
        .device = slot->device,
        .gpu_bytes = plan_footprint_device_total(&slot->footprint, PLAN_DEVICE_GPU),
        .host_bytes = plan_footprint_device_total(&slot->footprint, PLAN_DEVICE_HOST),
        .keep_alive_ms = cm->keep_alive_ms, .load_timeout_ms = cm->load_timeout_ms,
        .load_estimate_ms = (int64_t)(slot->load_s * 1000.0), .pin = cm->pin, .priority = cm->priority, .extra_args = cm->extra_args};
    sv->models[i] = (struct api_model){.cm = cm, .sched_index = sched_index,
                                       .remote_index = SIZE_MAX,
                                       .decision_type = plan_model_decision_type(m),
                                       .arch = plan_model_arch(m), .n_ctx = resolved.ctx,
                                       .sha256 = plan_model_header_sha256(m),
                                       .file_sha256 = sv->file_sha256[i],
                                       .created = file_mtime(cm->path)};
    sv->pmodels[i] = (struct pipeline_model){.sched_index = sched_index,
                                             .remote_index = SIZE_MAX,
                                             .decision_type = plan_model_decision_type(m),
                                             .max_options = s1_max_options(plan_model_decision_type(m)),
                                             .file_sha256 = sv->file_sha256[i]};
    char gpu[32], host[32], dev[16];
    fprintf(stderr, "tandem serve: %s: %s%s on %s, ctx %u, ngl %d, %u thread(s), %u slot(s) "
                    "(%s): %s GPU + %s host%s\n",
            cm->name, plan_model_arch(m), plan_model_decision_type(m)[0] ? " (decision)" : "",
            place_device_name(slot->device, dev, sizeof dev), resolved.ctx, resolved.ngl,
            resolved.threads, resolved.parallel, resolved.parallel == 1 ? "strict" : "relaxed",
            units_format_bytes(spec->gpu_bytes, gpu, sizeof gpu),
            units_format_bytes(spec->host_bytes, host, sizeof host),
            slot->rotates ? ", rotates" : "");
}

/* Fills the API and pipeline entries of the remote models, which the
 * remote set knows by their order among the remote models. */
static void describe_remote_models(struct daemon *sv) {
    size_t r = 0;
    for (size_t i = 0; i < sv->n; i++) {
        const struct config_model *cm = &sv->cfg->models[i];
        if (!cm->upstream)
            continue;
        const char *type = cm->upstream->dialect == CONFIG_DIALECT_SYSTEMONE ? "remote" : "";
        sv->models[i] = (struct api_model){.cm = cm, .sched_index = SIZE_MAX, .remote_index = r,
                                           .decision_type = type, .arch = "remote", .sha256 = "",
                                           .file_sha256 = "",
                                           .created = file_mtime(sv->config_path)};
        sv->pmodels[i] = (struct pipeline_model){.sched_index = SIZE_MAX, .remote_index = r++,
                                                 .decision_type = type,
                                                 .max_options = s1_max_options(type),
                                                 .file_sha256 = ""};
        fprintf(stderr, "tandem serve: %s: remote (%s, %zu upstream(s), first %s)\n", cm->name,
                cm->upstream->dialect == CONFIG_DIALECT_SYSTEMONE ? "systemone" : "openai",
                cm->upstream->n_urls, cm->upstream->urls[0]);
    }
}

/* Chooses the placement of every model and fills the specs. Returns 0 or 2. */
static int plan_placement(struct daemon *sv, struct sched_model_spec *specs) {
    char err[1024], total[32];
    if (!sv->n_local) {
        fprintf(stderr, "tandem serve: every model is remote: no engine, no memory planned\n");
        return 0;
    }
    if (placement_check_devices(sv->cfg, &sv->place_budget, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem serve: %s\n", err);
        return 2;
    }
    struct place_result *r = mem_alloc(sizeof *r);
    if (!r || placement_run(sv->cfg, sv->pm, &sv->place_budget, true, r, err, sizeof err) !=
                  TANDEM_OK) {
        fprintf(stderr, "tandem serve: %s\n", r ? err : "out of memory");
        if (r && sv->cfg->cache_max_bytes)
            fprintf(stderr, "tandem serve: (models get the host budget less cache.max_bytes, "
                    "%s, the decision cache's cap; docs/config.md)\n",
                    units_format_bytes(sv->cfg->cache_max_bytes, total, sizeof total));
        mem_free(r);
        return 2;
    }
    uint32_t threads[PLACE_MAX_MODELS];
    struct plan_model *local_pm[PLACE_MAX_MODELS];
    for (size_t k = 0; k < sv->n_local; k++)
        local_pm[k] = sv->pm[sv->local[k]];
    placement_threads(&r->best, local_pm, sv->n_local, host_cpus(),
                      sv->simulated, sv->cfg->clients, threads);
    for (size_t k = 0; k < sv->n_local; k++)
        apply_slot(sv, sv->local[k], k, &r->best.slot[k], threads[k], &specs[k]);
    units_format_bytes(sv->budget_total, total, sizeof total);
    char cache[96], cap[32];
    if (sv->cfg->cache_max_bytes)
        snprintf(cache, sizeof cache, "less %s of host RAM for the decision cache "
                 "(cache.max_bytes)", units_format_bytes(sv->cfg->cache_max_bytes, cap, sizeof cap));
    else
        snprintf(cache, sizeof cache, "the decision cache off (cache.max_bytes: 0)");
    fprintf(stderr, "tandem serve: budget %s (%s), %s%s\n", total, sv->budget_source, cache,
            sv->simulated ? "; GPU simulated: no GPU found, engines run on the CPU as though "
                            "it existed"
                          : "");
    fprintf(stderr, "tandem serve: placement: %s: %s\n", r->best.label, r->best.reason);
    mem_free(r);
    return 0;
}

/* Whether a pipeline of cfg names model i in a stage or an escalation. */
static bool used_by_pipelines(const struct config *cfg, size_t i) {
    const struct config_model *m = &cfg->models[i];
    for (size_t p = 0; p < cfg->n_pipelines; p++) {
        const struct config_pipeline *pl = &cfg->pipelines[p];
        bool used = config_find_model(cfg, pl->decide.model) == m ||
                    (pl->escalate_model && config_find_model(cfg, pl->escalate_model) == m);
        for (size_t v = 0; v < pl->n_verify; v++)
            used |= config_find_model(cfg, pl->verify[v].model) == m;
        if (used)
            return true;
    }
    return false;
}

/* The whole-file SHA-256 of every model a pipeline uses (pipeline answers
 * name them), through the digest cache: a model is read in full once. */
static int hash_models(struct daemon *sv) {
    for (size_t i = 0; i < sv->n; i++) {
        const struct config_model *cm = &sv->cfg->models[i];
        char err[512];
        bool cached;
        if (cm->upstream || !used_by_pipelines(sv->cfg, i))
            continue;
        int64_t t0 = host_now_ms();
        if (hash_file_sha256_cached(cm->path, sv->file_sha256[i], &cached, err, sizeof err) !=
            TANDEM_OK) {
            fprintf(stderr, "tandem serve: models.%s: %s\n", cm->name, err);
            return 1;
        }
        if (!cached)
            fprintf(stderr, "tandem serve: %s: sha256 %.12s… (hashed in %.1f s, cached)\n",
                    cm->name, sv->file_sha256[i], (double)(host_now_ms() - t0) / 1000.0);
    }
    return 0;
}

/* Compiles cfg's pipelines against the planned models. Returns 0 or 2. */
static int compile_pipelines(struct daemon *sv, const struct config *cfg,
                             struct pipeline_set **out) {
    char err[1024];
    if (pipeline_set_new(cfg, sv->pmodels, out, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem serve: %s\n", err);
        return 2;
    }
    return 0;
}

static size_t default_model_index(const struct daemon *sv) {
    const struct config_model *want =
        sv->cfg->default_model ? config_find_model(sv->cfg, sv->cfg->default_model) : NULL;
    for (size_t i = 0; i < sv->n; i++)
        if (want ? &sv->cfg->models[i] == want : sv->models[i].decision_type[0] != '\0')
            return i;
    return SIZE_MAX;
}

/* The config's warnings (a deprecated key), one stderr line each. */
static void print_warnings(const struct config *cfg, const char *when) {
    for (size_t i = 0; i < cfg->n_warnings; i++)
        fprintf(stderr, "tandem serve: %s%s\n", when, cfg->warnings[i]);
}

/* Reads and plans everything. Returns 0, 1 (runtime) or 2 (configuration). */
static int prepare(struct daemon *sv, const char *llama_server, struct sched_model_spec **specs) {
    char err[1024];
    if (config_load(sv->config_path, &sv->cfg, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem serve: %s\n", err);
        return 2;
    }
    print_warnings(sv->cfg, "");
    enum engine_source src;
    const char *want = sv->cfg->llama_server ? sv->cfg->llama_server : llama_server;
    if (engine_locate(want, TANDEM_ENGINE_BUILD, sv->engine, sizeof sv->engine, &src) !=
        TANDEM_OK) {
        fprintf(stderr, "tandem serve: no llama-server at %s (run `make deps`, or see doctor)\n",
                sv->engine);
        return 1;
    }
    sv->n = sv->cfg->n_models;
    sv->pm = mem_calloc(sv->n, sizeof *sv->pm);
    sv->models = mem_calloc(sv->n, sizeof *sv->models);
    sv->pmodels = mem_calloc(sv->n, sizeof *sv->pmodels);
    sv->file_sha256 = mem_calloc(sv->n, sizeof *sv->file_sha256);
    *specs = mem_calloc(sv->n, sizeof **specs);
    if (!sv->pm || !sv->models || !sv->pmodels || !sv->file_sha256 || !*specs)
        return 1;
    if (sv->n > PLACE_MAX_MODELS) {
        fprintf(stderr, "tandem serve: %s: at most %d models\n", sv->config_path,
                PLACE_MAX_MODELS);
        return 2;
    }
    sv->n_local = placement_locals(sv->cfg, sv->local);
    describe_remote_models(sv);
    config_budget(sv->cfg, sv);
    if (open_models(sv) || plan_placement(sv, *specs) ||
        compile_pipelines(sv, sv->cfg, &sv->pipelines))
        return 2;
    sv->default_model = default_model_index(sv);
    return 0;
}

/* --- running ------------------------------------------------------------------------------- */

static struct api_params api_params(struct daemon *sv) {
    return (struct api_params){.cfg = sv->cfg, .models = sv->models, .n_models = sv->n,
                               .default_model = sv->default_model, .sched = sv->sched,
                               .engines = sched_engine_client(sv->sched), .remote = sv->remote,
                               .metrics = sv->metrics, .audit = sv->audit,
                               .nvml = sv->nvml, .pipelines = sv->pipelines,
                               .events = sv->events, .base = sv->base,
                               .cache = sv->cache, .store = sv->store};
}

/* The server's head hook: the api's check, before a body is read. */
static int check_head(void *api, const char *method, const char *target,
                      const struct evkeyvalq *headers, bool over_limit, char *body, size_t cap,
                      char *id) {
    return api_check_head(api, method, target, headers, over_limit, body, cap, id);
}

static struct http_server_params server_params(const struct daemon *sv, const struct config *cfg) {
    return (struct http_server_params){.host = cfg->listen_host, .port = cfg->listen_port,
                                       .max_body_bytes = cfg->max_body_bytes,
                                       .header_timeout_ms = cfg->header_timeout_ms,
                                       .idle_timeout_ms = cfg->idle_timeout_ms,
                                       .max_connections = cfg->max_connections,
                                       .head = check_head, .head_user = sv->api};
}

/* Raises the soft descriptor limit to the hard one (each connection, engine
 * and log holds descriptors; at the limit accepting pauses) and logs it. */
static void raise_descriptor_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t want = rl.rlim_max;
    if (rl.rlim_cur < want) {
        struct rlimit up = {want, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &up) == 0)
            rl.rlim_cur = want;
        else
            fprintf(stderr, "tandem serve: cannot raise the descriptor limit to %llu: %s\n",
                    (unsigned long long)want, strerror(errno));
    }
    fprintf(stderr, "tandem serve: descriptor limit %llu (RLIMIT_NOFILE)\n",
            (unsigned long long)rl.rlim_cur);
}

static void on_drained(void *user) {
    struct daemon *sv = user;
    fprintf(stderr, "tandem serve: every engine has stopped; exiting\n");
    /* a little later: the streams ended just now (events, MCP subscriptions)
     * still have their last bytes to write */
    struct timeval flush = {0, EXIT_FLUSH_MS * 1000};
    event_base_loopexit(sv->base, &flush);
}

static void on_grace(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct daemon *sv = arg;
    fprintf(stderr, "tandem serve: shutdown grace over: ending the requests still running\n");
    sched_shutdown_now(sv->sched);
}

/* The drain's second step: new requests are refused (503) and the queue
 * fails, running requests finish within shutdown.grace. */
static void stop_admitting(struct daemon *sv) {
    fprintf(stderr, "tandem serve: refusing new requests; finishing the running ones (grace %lld "
            "ms)\n", (long long)sv->cfg->drain_grace_ms);
    http_server_stop_accepting(sv->server);
    api_set_phase(sv->api, API_STOPPING);
    events_close_all(sv->events); /* subscribers would hold their connections open */
    struct timeval tv = {(time_t)(sv->cfg->drain_grace_ms / 1000),
                         (suseconds_t)(sv->cfg->drain_grace_ms % 1000) * 1000};
    evtimer_add(sv->grace_ev, &tv);
    sched_shutdown(sv->sched, on_drained, sv);
}

static void on_drain_delay(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct daemon *sv = arg;
    if (drain_next(&sv->drain, DRAIN_EVENT_DELAY_OVER, 0) & DRAIN_ACTION_STOP_ADMITTING)
        stop_admitting(sv);
}

/* SIGTERM/SIGINT: the drain's next step (drain.h), carried out. */
static void on_stop_signal(evutil_socket_t sig, short what, void *arg) {
    (void)what;
    struct daemon *sv = arg;
    int64_t delay = sv->drain_delay_flag >= 0 ? sv->drain_delay_flag : sv->cfg->drain_delay_ms;
    unsigned act = drain_next(&sv->drain, DRAIN_EVENT_SIGNAL, delay);
    if (act & DRAIN_ACTION_ANNOUNCE) {
        notify("STOPPING=1");
        fprintf(stderr, "tandem serve: %s: draining: /health answers 503; still admitting for "
                "%lld ms (limits.drain_delay)\n", strsignal((int)sig), (long long)delay);
        api_set_phase(sv->api, API_DRAINING);
    } else {
        fprintf(stderr, "tandem serve: %s again: stopping now\n", strsignal((int)sig));
    }
    if (act & DRAIN_ACTION_CANCEL_DELAY)
        evtimer_del(sv->delay_ev);
    if (act & DRAIN_ACTION_ARM_DELAY) {
        struct timeval tv = {(time_t)(delay / 1000), (suseconds_t)(delay % 1000) * 1000};
        evtimer_add(sv->delay_ev, &tv);
    }
    if (act & DRAIN_ACTION_STOP_ADMITTING)
        stop_admitting(sv);
    if (act & DRAIN_ACTION_END_NOW)
        sched_shutdown_now(sv->sched);
}

/* What of spec changes the numbers its engine computes, as text: the
 * decision cache's part of a model's identity besides its file and engine. */
static void cache_settings(const struct sched_model_spec *spec, char *out, size_t cap) {
    const struct plan_settings *s = &spec->settings;
    int n = snprintf(out, cap, "ctx=%u ngl=%d parallel=%u kv_unified=%d type_k=%u type_v=%u "
                     "flash_attn=%d batch=%u ubatch=%u kv_offload=%d swa_full=%d gpu=%d "
                     "threads=%u device=%d args:", s->ctx, s->ngl, s->parallel, s->kv_unified,
                     s->type_k, s->type_v, s->flash_attn, s->batch, s->ubatch, s->kv_offload,
                     s->swa_full, s->gpu, s->threads, spec->device);
    for (char *const *a = spec->extra_args; a && *a && n >= 0 && (size_t)n < cap; a++)
        n += snprintf(out + n, cap - (size_t)n, " %s", *a);
}

/* Tells the decision cache what each local model is, and whether cfg caches it. */
static int describe_cache_models(struct daemon *sv, const struct config *cfg) {
    char settings[4096];
    for (size_t k = 0; k < sv->n_local; k++) {
        const struct config_model *cm = &cfg->models[sv->local[k]];
        cache_settings(&sv->specs[k], settings, sizeof settings);
        struct dcache_model_spec spec = {.path = cm->path, .engine = sv->engine,
                                         .settings = settings,
                                         .enabled = cm->cache && !cm->relaxed};
        if (dcache_model_set(sv->cache, k, &spec) == TANDEM_ERR_NOMEM)
            return 1;
    }
    return 0;
}

/* Keeps a replaced config and pipeline set until exit: pipeline runs in
 * flight may still point into them. */
static bool retire(struct daemon *sv, struct config *cfg, struct pipeline_set *set) {
    struct config **c = mem_realloc(sv->retired, (sv->n_retired + 1) * sizeof *c);
    if (c)
        sv->retired = c;
    struct pipeline_set **p =
        c ? mem_realloc(sv->retired_sets, (sv->n_retired + 1) * sizeof *p) : NULL;
    if (!p)
        return false;
    sv->retired_sets = p;
    sv->retired[sv->n_retired] = cfg;
    sv->retired_sets[sv->n_retired++] = set;
    return true;
}

/* Applies next (a validated config with the same models) in place of the
 * running one. Returns false, changing nothing, when its pipelines do not
 * compile or memory runs out. */
static bool apply_config(struct daemon *sv, struct config *next) {
    struct pipeline_set *set = NULL;
    if (compile_pipelines(sv, next, &set) || !retire(sv, sv->cfg, sv->pipelines)) {
        pipeline_set_free(set);
        return false;
    }
    for (size_t i = 0; i < sv->n; i++)
        sv->models[i].cm = &next->models[i];
    sv->cfg = next;
    sv->pipelines = set;
    (void)describe_cache_models(sv, next); /* cache: may change in place */
    sv->default_model = default_model_index(sv);
    struct api_params p = api_params(sv);
    api_set_params(sv->api, &p);
    struct http_server_params hp = server_params(sv, next);
    http_server_set_limits(sv->server, &hp);
    events_set_max_clients(sv->events, next->max_event_clients);
    return true;
}

/* A SIGHUP that changes a model's settings drops that model's cached
 * decisions (docs/serve.md, Decision cache); the settings themselves apply
 * at the next start. */
static void forget_changed_models(struct daemon *sv, const struct config *next) {
    for (size_t k = 0; k < sv->n_local && sv->cfg->n_models == next->n_models; k++) {
        size_t i = sv->local[k];
        if (!reload_model_same(&sv->cfg->models[i], &next->models[i]) &&
            dcache_clear(sv->cache, k))
            fprintf(stderr, "tandem serve: SIGHUP: %s changed: its cached decisions were "
                    "dropped\n", sv->cfg->models[i].name);
    }
}

static void on_hup(evutil_socket_t sig, short what, void *arg) {
    (void)sig, (void)what;
    struct daemon *sv = arg;
    notify("RELOADING=1");
    char err[1024];
    struct config *next = NULL;
    if (config_load(sv->config_path, &next, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem serve: SIGHUP: keeping the running config: %s\n", err);
    } else if (!reload_models_same(sv->cfg, next)) {
        fprintf(stderr, "tandem serve: SIGHUP: the models or their placement changed; restart "
                        "tandem to apply (nothing else was changed)\n");
        forget_changed_models(sv, next);
        config_free(next);
    } else if (!reload_store_same(sv->cfg, next)) {
        fprintf(stderr, "tandem serve: SIGHUP: store.path, store.bodies, store.retention or "
                        "store.max_bytes changed; restart tandem to apply (nothing else was "
                        "changed)\n");
        config_free(next);
    } else if (!apply_config(sv, next)) {
        fprintf(stderr, "tandem serve: SIGHUP: keeping the running config\n");
        config_free(next);
    } else {
        print_warnings(sv->cfg, "SIGHUP: ");
        fprintf(stderr, "tandem serve: SIGHUP: reloaded %s (API keys, allowed hosts and origins, "
                        "limits, default model, logs.bodies, logs.audit_on_error, pipelines)\n",
                sv->config_path);
        events_publish(sv->events, "reload", json_pack("{ss}", "config", sv->config_path));
    }
    notify("READY=1");
}

/* /health turns 200 once every pinned model is resident (or has failed). */
static void on_ready_poll(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct daemon *sv = arg;
    for (size_t k = 0; k < sv->n_local; k++) {
        enum sched_state st = sched_model_state(sv->sched, k);
        if (sv->cfg->models[sv->local[k]].pin && (st == SCHED_LOADING || st == SCHED_UNLOADED)) {
            struct timeval tv = {0, READY_POLL_MS * 1000};
            evtimer_add(sv->ready_ev, &tv);
            return;
        }
    }
    if (sv->drain != DRAIN_STATE_SERVING)
        return;
    api_set_phase(sv->api, API_SERVING);
    bool v6 = strchr(sv->cfg->listen_host, ':') != NULL;
    char url[400], ready[450];
    snprintf(url, sizeof url, "http://%s%s%s:%u", v6 ? "[" : "", sv->cfg->listen_host,
             v6 ? "]" : "", (unsigned)http_server_port(sv->server));
    snprintf(ready, sizeof ready, "READY=1\nSTATUS=serving on %s", url);
    notify(ready);
    fprintf(stderr, "tandem serve: serving on %s\n", url);
}

static void on_audit_retry(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    api_audit_retry(((struct daemon *)arg)->api);
}

static int open_outputs(struct daemon *sv) {
    char err[1024];
    const char *log_dir = sv->cfg->log_dir;
    if (cache_mkdir_p(log_dir) != TANDEM_OK) {
        fprintf(stderr, "tandem serve: cannot create logs.dir %s: %s\n", log_dir, strerror(errno));
        return 1;
    }
    if (sv->cfg->audit_path &&
        audit_open(sv->cfg->audit_path, sv->cfg->audit_max_bytes, sv->cfg->audit_keep,
                   &sv->audit, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem serve: %s\n", err);
        return 1;
    }
    struct store_params stp = {.path = sv->cfg->store_path, .node = sv->cfg->node_id,
                               .bodies = sv->cfg->store_bodies,
                               .retention_ms = sv->cfg->store_retention_ms,
                               .max_bytes = sv->cfg->store_max_bytes, .base = sv->base};
    if (sv->cfg->store_path && store_new(&stp, &sv->store, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem serve: %s\n", err);
        return 1;
    }
    struct sched_params sp = {.engine = sv->engine, .log_dir = log_dir,
                              .n_gpus = sv->place_budget.n_gpus,
                              .host_budget = sv->place_budget.host_bytes,
                              .simulated = sv->simulated, .prefetch = true,
                              .queue_depth = sv->cfg->queue_depth,
                              .group_limit = sv->cfg->group_limit,
                              .max_wait_ms = sv->cfg->starvation_ms,
                              .stop_grace_ms = sv->cfg->stop_grace_ms,
                              .max_restarts = sv->cfg->max_restarts, .metrics = sv->metrics,
                              .events = sv->events, .nvml = sv->nvml};
    memcpy(sp.gpu_budget, sv->place_budget.gpu_bytes, sizeof sp.gpu_budget);
    sv->sched = sched_new(sv->base, &sp);
    return sv->sched ? 0 : 1;
}

/* The remote models' upstreams, polled from now on. Returns 0 or 1. */
static int open_remote(struct daemon *sv) {
    if (sv->n_local == sv->n)
        return 0;
    struct remote_params rp = {.health_interval_ms = sv->cfg->health_interval_ms,
                               .metrics = sv->metrics}; /* answers up to 64 MiB */
    if (!(sv->remote = remote_new(sv->base, &rp)))
        return 1;
    for (size_t i = 0; i < sv->n; i++) {
        const struct config_upstream *u = sv->cfg->models[i].upstream;
        size_t idx;
        if (!u)
            continue;
        struct remote_model_spec spec = {.name = sv->cfg->models[i].name,
                                         .urls = (const char *const *)u->urls,
                                         .n_urls = u->n_urls, .api_key = u->api_key,
                                         .timeout_ms = u->timeout_ms, .health_path = u->health};
        if (remote_add_model(sv->remote, &spec, &idx) != TANDEM_OK)
            return 1;
    }
    remote_start(sv->remote);
    return 0;
}

static int run(struct daemon *sv, const struct sched_model_spec *specs) {
    char err[512];
    struct events_params evp = events_default_params();
    evp.max_clients = sv->cfg->max_event_clients;
    raise_descriptor_limit();
    nvml_new(NULL, &sv->nvml, NULL, 0); /* no driver: no GPU gauges */
    if (!(sv->base = event_base_new()) || !(sv->metrics = prom_new()) ||
        !(sv->events = events_new(sv->base, &evp)) || open_outputs(sv))
        return 1;
    for (size_t k = 0; k < sv->n_local; k++) {
        size_t idx;
        if (sched_add_model(sv->sched, &specs[k], &idx) != TANDEM_OK)
            return 1;
    }
    if (open_remote(sv) ||
        !(sv->cache = dcache_new(sv->cfg->cache_max_bytes, sv->n_local, sv->sched)) ||
        describe_cache_models(sv, sv->cfg))
        return 1;
    struct api_params ap = api_params(sv);
    if (!(sv->api = api_new(&ap)))
        return 1;
    struct http_server_params hp = server_params(sv, sv->cfg);
    if (sv->listen_flag && units_parse_listen(sv->listen_flag, sv->cfg->listen_host,
                                              sizeof sv->cfg->listen_host, &hp.port) != TANDEM_OK) {
        fprintf(stderr, "tandem serve: --listen: expected ADDR:PORT, got '%s'\n", sv->listen_flag);
        return 2;
    }
    if (http_server_new(sv->base, &hp, api_handle, sv->api, &sv->server, err, sizeof err) !=
        TANDEM_OK) {
        fprintf(stderr, "tandem serve: %s\n", err);
        return 1;
    }
    sv->sig_term = evsignal_new(sv->base, SIGTERM, on_stop_signal, sv);
    sv->sig_int = evsignal_new(sv->base, SIGINT, on_stop_signal, sv);
    sv->sig_hup = evsignal_new(sv->base, SIGHUP, on_hup, sv);
    sv->ready_ev = evtimer_new(sv->base, on_ready_poll, sv);
    sv->grace_ev = evtimer_new(sv->base, on_grace, sv);
    sv->delay_ev = evtimer_new(sv->base, on_drain_delay, sv);
    sv->audit_ev = event_new(sv->base, -1, EV_PERSIST, on_audit_retry, sv);
    if (!sv->sig_term || !sv->sig_int || !sv->sig_hup || !sv->ready_ev || !sv->grace_ev ||
        !sv->delay_ev || !sv->audit_ev)
        return 1;
    event_add(sv->audit_ev, &(struct timeval){1, 0});
    event_add(sv->sig_term, NULL);
    event_add(sv->sig_int, NULL);
    event_add(sv->sig_hup, NULL);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN); /* past RLIMIT_FSIZE an audit write fails with EFBIG instead */
    sched_preload(sv->sched);
    on_ready_poll(-1, 0, sv);
    event_base_dispatch(sv->base);
    return 0;
}

/* At exit, the audit lines that still cannot be written are lost: say so. */
static void report_lost_audit_lines(struct audit *audit) {
    if (!audit || audit_flush(audit) == TANDEM_OK)
        return;
    struct audit_stats st;
    audit_stats(audit, &st);
    fprintf(stderr, "tandem serve: %zu audit line(s) lost at exit: %s\n", st.pending_lines,
            st.last_error);
}

void daemon_free(struct daemon *sv) {
    if (!sv)
        return;
    events_free(sv->events); /* ends the streams while their server is up */
    http_server_free(sv->server);
    api_free(sv->api);
    store_free(sv->store); /* writes what its queue holds */
    dcache_free(sv->cache);
    remote_free(sv->remote);
    sched_free(sv->sched);
    struct event *evs[] = {sv->sig_term, sv->sig_int, sv->sig_hup, sv->ready_ev, sv->grace_ev,
                           sv->delay_ev, sv->audit_ev};
    for (size_t i = 0; i < sizeof evs / sizeof *evs; i++)
        if (evs[i])
            event_free(evs[i]);
    report_lost_audit_lines(sv->audit);
    audit_free(sv->audit);
    prom_free(sv->metrics);
    nvml_free(sv->nvml);
    if (sv->base)
        event_base_free(sv->base);
    for (size_t i = 0; sv->pm && i < sv->n; i++)
        plan_model_free(sv->pm[i]);
    mem_free(sv->pm);
    mem_free(sv->models);
    mem_free(sv->pmodels);
    mem_free(sv->file_sha256);
    mem_free(sv->specs);
    pipeline_set_free(sv->pipelines);
    config_free(sv->cfg);
    for (size_t i = 0; i < sv->n_retired; i++) {
        pipeline_set_free(sv->retired_sets[i]);
        config_free(sv->retired[i]);
    }
    mem_free(sv->retired);
    mem_free(sv->retired_sets);
    mem_free(sv);
}

/* --- the handle ------------------------------------------------------------------------------ */

/* The steps above return 0, 1 (a runtime failure) or 2 (the configuration's
 * fault), the exit codes of `tandem serve`; the handle speaks tandem_err. */
static tandem_err status_of(int rc) {
    return rc == 0 ? TANDEM_OK : rc == 2 ? TANDEM_ERR_INVAL : TANDEM_ERR_IO;
}

struct daemon_params daemon_default_params(void) {
    return (struct daemon_params){.drain_delay_ms = -1};
}

tandem_err daemon_new(const struct daemon_params *p, struct daemon **out) {
    *out = NULL;
    struct daemon *sv = mem_calloc(1, sizeof *sv);
    if (!sv)
        return TANDEM_ERR_NOMEM;
    sv->config_path = p->config_path;
    sv->listen_flag = p->listen;
    sv->drain_delay_flag = p->drain_delay_ms;
    int rc = prepare(sv, p->llama_server, &sv->specs);
    if (rc) {
        daemon_free(sv);
        return status_of(rc);
    }
    *out = sv;
    return TANDEM_OK;
}

size_t daemon_n_models(const struct daemon *d) { return d->n; }

tandem_err daemon_run(struct daemon *d) {
    return status_of(hash_models(d) ? 1 : run(d, d->specs));
}
