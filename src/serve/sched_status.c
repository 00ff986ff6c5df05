/* sched_status.c: what the scheduler shows of itself.
 *
 * The scheduler's state (sched_internal.h) rendered for the outside, without
 * changing it: the /v1/status JSON (sched_status_json) and the memory sample
 * (sched_memory_json), both declared in sched.h; the events it publishes
 * (docs/serve.md, Events: a model loads, is ready, is evicted or crashes;
 * the queue, coalesced to at most 10 a second; memory every 2 s while
 * someone subscribes); and its Prometheus metrics. sched.c calls
 * sched_status_publish_state after every change of a model's state or jobs,
 * which sets the gauges and schedules a queue event. */
#include "serve/sched_status.h"

#include "base/host.h"
#include "base/nvml.h"
#include "serve/events.h"
#include "serve/prom.h"

#define QUEUE_EVENT_MS 100     /* queue events, at most 10 a second */

/* --- metrics ------------------------------------------------------------------------------- */

void sched_status_metrics_register(struct sched *s) {
    if (!s->p.metrics)
        return;
    static const char *const model[] = {"model", NULL};
    static const char *const model_device[] = {"model", "device", NULL};
    static const char *const model_reason[] = {"model", "reason", NULL};
    static const double load_bounds[] = {0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120};
    const struct {
        struct prom_metric **out;
        enum prom_kind kind;
        const char *name, *help;
        const char *const *labels;
        const double *bounds; /* a histogram's; NULL = none */
    } defs[] = { /* in the exposition's order */
        {&s->m_loads, PROM_COUNTER, "tandem_model_loads_total", "Engine starts that became ready",
         model, NULL},
        {&s->m_evictions, PROM_COUNTER, "tandem_model_evictions_total",
         "Engines stopped, by reason: room, keep_alive, admin, shutdown", model_reason, NULL},
        {&s->m_crashes, PROM_COUNTER, "tandem_model_crashes_total", "Engines that exited unasked",
         model, NULL},
        {&s->m_load_seconds, PROM_HISTOGRAM, "tandem_model_load_seconds", "Spawn to healthy", model,
         load_bounds},
        {&s->m_resident, PROM_GAUGE, "tandem_model_resident_bytes",
         "Planned bytes of resident engines", model_device, NULL},
        {&s->m_queue, PROM_GAUGE, "tandem_queue_depth", "Jobs waiting", NULL, NULL},
        {&s->m_state, PROM_GAUGE, "tandem_model_resident", "1 while the model's engine is resident",
         model, NULL},
        {&s->m_device, PROM_GAUGE, "tandem_model_device",
         "1 for the device the model's layers run on (gpu:N or cpu)", model_device, NULL},
        {&s->m_prefetches, PROM_COUNTER, "tandem_model_prefetches_total",
         "Model files read ahead of a load", model, NULL},
        {&s->m_retries, PROM_COUNTER, "tandem_engine_retries_total",
         "Requests resent after an engine failure, by reason: crash, connection, server_error",
         model_reason, NULL},
        {&s->m_failed, PROM_GAUGE, "tandem_model_failed",
         "1 while the model is failed (crash loop) and backing off", model, NULL},
    };
    for (size_t i = 0; i < sizeof defs / sizeof *defs; i++)
        *defs[i].out = prom_register(s->p.metrics, defs[i].kind, defs[i].name, defs[i].help,
                                     defs[i].labels, defs[i].bounds,
                                     defs[i].bounds ? sizeof load_bounds / sizeof *load_bounds : 0);
}

void sched_status_count(struct prom_metric *metric, const struct sched_model *m, double v) {
    const char *labels[] = {m->name};
    if (metric)
        prom_add(metric, labels, v);
}

/* Schedules a queue event, unless one is scheduled already (coalescing). */
static void queue_changed(struct sched *s) {
    if (s->queue_ev && !evtimer_pending(s->queue_ev, NULL)) {
        struct timeval tv = {0, QUEUE_EVENT_MS * 1000};
        evtimer_add(s->queue_ev, &tv);
    }
}

void sched_status_publish_state(struct sched_model *m) {
    struct sched *s = m->s;
    bool holds = m->state == SCHED_RESIDENT;
    const char *gpu[] = {m->name, "gpu"}, *host[] = {m->name, "host"}, *one[] = {m->name};
    if (s->m_resident) {
        prom_set(s->m_resident, gpu, holds ? (double)m->gpu : 0);
        prom_set(s->m_resident, host, holds ? (double)m->host : 0);
    }
    if (s->m_state)
        prom_set(s->m_state, one, holds);
    if (s->m_failed)
        prom_set(s->m_failed, one, m->state == SCHED_FAILED);
    char dev[16];
    const char *device[] = {m->name, place_device_name(m->device, dev, sizeof dev)};
    if (s->m_device)
        prom_set(s->m_device, device, 1);
    if (s->m_queue)
        prom_set(s->m_queue, NULL, s->n_waiting);
    queue_changed(s);
}

/* --- events (GET /v1/events; docs/serve.md, Events) ---------------------------------------- */

/* Publishes event type about m: {"model": name, ...fields} (fields stolen). */
void sched_status_publish(struct sched_model *m, const char *type, json_t *fields) {
    json_t *e = m->s->p.events ? json_pack("{ss}", "model", m->name) : NULL;
    if (e && fields)
        json_object_update(e, fields);
    json_decref(fields);
    events_publish(m->s->p.events, type, e);
}

static json_t *progress_json(const struct engine_progress_sample *p) {
    return json_pack("{sssosI}", "phase", engine_phase_name(p->phase), "fraction",
                     p->fraction >= 0 ? json_real(p->fraction) : json_null(), "elapsed_ms",
                     (json_int_t)p->elapsed_ms);
}

void sched_status_publish_loading(struct sched_model *m) {
    sched_status_publish(m, "loading", progress_json(&m->load));
}

/* The queue now: every model's waiting and running jobs, and its oldest
 * job's wait (the queue is in arrival order). */
void sched_status_queue_event(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct sched *s = arg;
    int64_t now = host_now_ms();
    json_t *models = json_object();
    for (size_t i = 0; i < s->n_models; i++) {
        const struct sched_model *m = s->models[i];
        const struct sched_job *oldest = NULL, *j;
        TAILQ_FOREACH(j, &s->waiting, link)
            if (j->m == m) {
                oldest = j;
                break;
            }
        json_t *wait = oldest ? json_integer(now - oldest->submitted) : json_null();
        json_object_set_new(models, m->name, json_pack("{sisiso}", "waiting", m->n_waiting,
                                                       "running", m->n_running, "oldest_wait_ms",
                                                       wait));
    }
    events_publish(s->p.events, "queue", json_pack("{siso}", "waiting", s->n_waiting, "models",
                                                   models));
}

void sched_status_memory_event(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct sched *s = arg;
    if (events_subscribers(s->p.events))
        events_publish(s->p.events, "memory", sched_memory_json(s));
}

/* --- status and memory JSON ----------------------------------------------------------------- */

/* Adds m's planned footprint to *u. */
static void add_planned(struct sched_policy_usage *u, const struct sched_model *m) {
    struct sched_policy_model v;
    sched_model_view(m, &v);
    sched_policy_usage_add(u, &v);
}

/* m's crashes within the last CRASH_WINDOW_MS. */
static uint32_t recent_crashes(const struct sched_model *m, int64_t now) {
    uint32_t n = m->s->p.max_restarts, k = 0;
    for (uint32_t i = 0; i < n && i < m->crash_next; i++)
        k += now - m->crash_at[i] < CRASH_WINDOW_MS;
    return k;
}

static json_t *ms_or_null(int64_t ms) { return ms >= 0 ? json_integer(ms) : json_null(); }

static json_t *model_json(const struct sched_model *m, int64_t now) {
    struct sched_policy_model v;
    sched_model_view(m, &v);
    json_t *j = json_object();
    char dev[16];
    json_object_set_new(j, "name", json_string(m->name));
    json_object_set_new(j, "state", json_string(sched_state_name(m->state)));
    json_object_set_new(j, "device", json_string(place_device_name(m->device, dev, sizeof dev)));
    json_object_set_new(j, "ngl", json_integer(m->settings.ngl));
    json_object_set_new(j, "threads", json_integer(m->settings.threads));
    json_object_set_new(j, "swap", json_pack("{s:o, s:o, s:o}", "stop_ms", ms_or_null(m->stop_ms),
                                             "ready_ms", ms_or_null(m->ready_ms), "first_answer_ms",
                                             ms_or_null(m->first_ms)));
    json_object_set_new(j, "prefetches", json_integer((json_int_t)m->prefetches));
    json_object_set_new(j, "lookaheads", json_integer((json_int_t)m->lookaheads));
    json_object_set_new(j, "planned", json_pack("{sIsI}", "gpu_bytes", (json_int_t)m->gpu,
                                                "host_bytes", (json_int_t)m->host));
    json_object_set_new(j, "measured",
                        m->measured_gpu || m->measured_host
                            ? json_pack("{sIsI}", "gpu_bytes", (json_int_t)m->measured_gpu,
                                        "host_bytes", (json_int_t)m->measured_host)
                            : json_null());
    json_object_set_new(j, "pid", m->child ? json_integer(engine_child_pid(m->child)) : json_null());
    json_object_set_new(j, "socket",
                        m->child ? json_string(engine_child_socket(m->child)) : json_null());
    json_object_set_new(j, "slots", json_integer(m->settings.parallel));
    json_object_set_new(j, "determinism",
                        json_string(m->settings.parallel == 1 ? "strict" : "relaxed"));
    json_object_set_new(j, "running", json_integer(m->n_running));
    json_object_set_new(j, "queued", json_integer(m->n_waiting));
    json_object_set_new(j, "pinned", json_boolean(m->pin));
    json_object_set_new(j, "idle_ms", m->last_used ? json_integer(now - m->last_used) : json_null());
    json_object_set_new(j, "keep_alive_ms", m->keep_alive_ms >= 0 ? json_integer(m->keep_alive_ms)
                                                                  : json_null());
    json_object_set_new(j, "until_ms", ms_or_null(sched_policy_until_unload(&v, now)));
    json_object_set_new(j, "answered", json_integer((json_int_t)m->answered));
    json_object_set_new(j, "loads", json_integer((json_int_t)m->loads));
    json_object_set_new(j, "evictions", json_integer((json_int_t)m->evictions));
    json_object_set_new(j, "crashes", json_integer((json_int_t)m->crash_total));
    json_object_set_new(j, "crashes_last_60s", json_integer(recent_crashes(m, now)));
    json_object_set_new(j, "retries", json_integer((json_int_t)m->retries));
    json_object_set_new(j, "retry_in_ms", m->state == SCHED_FAILED && m->retry_at > now
                                              ? json_integer(m->retry_at - now)
                                              : json_null());
    json_object_set_new(j, "progress", m->state == SCHED_LOADING || m->state == SCHED_RESIDENT
                                           ? progress_json(&m->load)
                                           : json_null());
    json_object_set_new(j, "last_error", m->last_error[0] ? json_string(m->last_error) : json_null());
    json_object_set_new(j, "log", json_string(m->log_path));
    return j;
}

/* Per device: its budget and what holders use, GPUs first, then the host. */
static json_t *devices_json(const struct sched *s, const struct sched_policy_usage *used) {
    json_t *a = json_array();
    for (uint32_t g = 0; g < s->p.n_gpus && g < PLACE_MAX_GPUS; g++) {
        char dev[16];
        json_array_append_new(a, json_pack("{s:s, s:I, s:I, s:b}", "device",
                                           place_device_name((int32_t)g, dev, sizeof dev),
                                           "budget_bytes", (json_int_t)s->p.gpu_budget[g],
                                           "used_bytes", (json_int_t)used->gpu[g], "simulated",
                                           s->p.simulated));
    }
    json_array_append_new(a, json_pack("{s:s, s:I, s:I, s:b}", "device", "host", "budget_bytes",
                                       (json_int_t)s->p.host_budget, "used_bytes",
                                       (json_int_t)used->host, "simulated", false));
    return a;
}

/* What m's engine holds now: its resident set (host memory) and, on a real
 * GPU with NVML, its memory there; each -1 when unknown. */
static void measure(const struct sched_model *m, int64_t *rss, int64_t *gpu) {
    uint64_t kb, bytes;
    long pid = m->child ? (long)engine_child_pid(m->child) : 0;
    *rss = pid && host_proc_field(pid, "status", "VmRSS:", &kb) == TANDEM_OK ? (int64_t)kb * 1024
                                                                             : -1;
    *gpu = pid && m->device >= 0 && m->s->p.nvml && !m->s->p.simulated &&
                   nvml_process_used_bytes(m->s->p.nvml, (unsigned)m->device, pid, &bytes) ==
                       TANDEM_OK
               ? (int64_t)bytes
               : -1;
}

static json_t *bytes_or_null(int64_t b) { return b >= 0 ? json_integer(b) : json_null(); }

/* Adds b (when known) to *sum, which is -1 until something is known. */
static void add_known(int64_t *sum, int64_t b) {
    if (b >= 0)
        *sum = (*sum < 0 ? 0 : *sum) + b;
}

/* Measured use per device: what its engines hold, -1 when nothing is known. */
struct measured {
    int64_t gpu[PLACE_MAX_GPUS], host;
};

/* The engines holding memory, planned against measured; adds to *planned and *meas. */
static json_t *memory_models_json(const struct sched *s, struct sched_policy_usage *planned,
                                  struct measured *meas) {
    json_t *models = json_array();
    for (size_t i = 0; i < s->n_models; i++) {
        const struct sched_model *m = s->models[i];
        if (!sched_policy_holds_memory(m->state))
            continue;
        add_planned(planned, m);
        int64_t rss, gpu;
        measure(m, &rss, &gpu);
        add_known(&meas->host, rss);
        if (m->device >= 0 && m->device < PLACE_MAX_GPUS)
            add_known(&meas->gpu[m->device], gpu);
        char dev[16];
        json_array_append_new(models, json_pack("{sssssIsIsoso}", "model", m->name, "device",
                                                place_device_name(m->device, dev, sizeof dev),
                                                "planned_gpu_bytes", (json_int_t)m->gpu,
                                                "planned_host_bytes", (json_int_t)m->host,
                                                "measured_gpu_bytes", bytes_or_null(gpu),
                                                "rss_bytes", bytes_or_null(rss)));
    }
    return models;
}

static json_t *memory_device_json(const char *device, uint64_t budget, uint64_t planned,
                                  int64_t measured) {
    return json_pack("{sssIsIso}", "device", device, "budget_bytes", (json_int_t)budget,
                     "planned_bytes", (json_int_t)planned, "measured_bytes",
                     bytes_or_null(measured));
}

json_t *sched_memory_json(const struct sched *s) {
    struct sched_policy_usage planned = {0};
    struct measured meas = {.host = -1};
    for (size_t g = 0; g < PLACE_MAX_GPUS; g++)
        meas.gpu[g] = -1;
    json_t *models = memory_models_json(s, &planned, &meas), *devices = json_array();
    for (uint32_t g = 0; g < s->p.n_gpus && g < PLACE_MAX_GPUS; g++) {
        char dev[16];
        json_array_append_new(devices, memory_device_json(place_device_name((int32_t)g, dev,
                                                                            sizeof dev),
                                                          s->p.gpu_budget[g], planned.gpu[g],
                                                          meas.gpu[g]));
    }
    json_array_append_new(devices, memory_device_json("host", s->p.host_budget, planned.host,
                                                      meas.host));
    return json_pack("{soso}", "devices", devices, "models", models);
}

json_t *sched_status_json(const struct sched *s) {
    int64_t now = host_now_ms();
    struct sched_policy_usage used = {0};
    uint64_t gpu = 0, gpu_budget = 0;
    json_t *models = json_array();
    for (size_t i = 0; i < s->n_models; i++) {
        const struct sched_model *m = s->models[i];
        if (sched_policy_holds_memory(m->state))
            add_planned(&used, m);
        json_array_append_new(models, model_json(m, now));
    }
    for (uint32_t g = 0; g < s->p.n_gpus && g < PLACE_MAX_GPUS; g++)
        gpu += used.gpu[g], gpu_budget += s->p.gpu_budget[g];
    return json_pack("{s{sIsIsIsIsbso}s{sIsI}so}", "budget", "gpu_bytes", (json_int_t)gpu_budget,
                     "host_bytes", (json_int_t)s->p.host_budget, "gpu_used_bytes",
                     (json_int_t)gpu, "host_used_bytes", (json_int_t)used.host, "simulated",
                     s->p.simulated, "devices", devices_json(s, &used), "queue", "waiting",
                     (json_int_t)s->n_waiting, "depth", (json_int_t)s->p.queue_depth, "models",
                     models);
}
