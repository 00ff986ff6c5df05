/* config.h: tandem.yaml, parsed with libfyaml and validated in full at load.
 *
 * Every error is one line naming the file, the line and the key path:
 *   tandem.yaml:14: models.kev.ctx: expected an integer, got "8k"
 * Paths expand a leading "~" and ${VAR} / $VAR references (XDG_CACHE_HOME,
 * HOME, TANDEM_CACHE, ... any environment variable; an unset one is an
 * error naming it). Relative model paths resolve against the config file's
 * directory. Unknown keys are errors (with a "did you mean" when one key is
 * close), so a typo never silently falls back to a default. */
#ifndef TANDEM_CONFIG_H
#define TANDEM_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "plan/place.h"
#include "plan/plan.h"
#include "proto/s1q.h"

#define CONFIG_KEEP_ALIVE_FOREVER (-1)

enum config_dialect { CONFIG_DIALECT_SYSTEMONE, CONFIG_DIALECT_OPENAI };

/* A model served elsewhere (docs/scale-out.md): instead of path, an ordered
 * list of base URLs. */
struct config_upstream {
    char **urls;                   /* checked: http(s)://host[:port][/prefix] */
    size_t n_urls;
    enum config_dialect dialect;   /* dialect: systemone (default; POST /v1/systemone)
                                    * or openai (the OpenAI routes only) */
    char *api_key_env;             /* api_key_env: the variable's name, or NULL */
    char *api_key;                 /* its value, read at load (set, or an error);
                                    * never logged */
    int64_t timeout_ms;            /* timeout: one attempt's cap; default 0 = the
                                    * request's deadline only */
    char *health;                  /* health: the path polled (default "/health"); NULL
                                    * for none */
};

/* The slots of a model with determinism: relaxed and no parallel key. */
#define CONFIG_RELAXED_SLOTS 4

struct config_model {
    char *name;                    /* the key under models: */
    char *path;                    /* expanded, absolute; NULL for a remote model */
    struct config_upstream *upstream; /* a remote model (upstream:), else NULL */
    char **aliases;                /* extra names clients may use */
    size_t n_aliases;
    struct plan_settings settings; /* ctx (0 = training context), ngl (PLAN_NGL_AUTO
                                    * unless set), parallel (default 1), cache types
                                    * (default f16), flash_attn (default false), batch,
                                    * ubatch (0 = engine default / encoder window),
                                    * threads (0 = the placement's split); gpu and
                                    * overhead are filled in by serve */
    int64_t keep_alive_ms;         /* idle time before unload; CONFIG_KEEP_ALIVE_FOREVER;
                                    * default 300000 (5 min). YAML: "5m", "30s", "1h",
                                    * "forever", or milliseconds as an integer */
    bool pin;                      /* preloaded at start, never evicted */
    bool relaxed;                  /* determinism: relaxed (several slots; answers may move
                                    * under concurrent load), else strict (one slot) */
    bool cache;                    /* cache: its decisions go in the decision cache;
                                    * default true (a relaxed model never does) */
    int32_t priority;              /* higher wins when models compete; default 0 */
    char **extra_args;             /* appended to the llama-server argv, verbatim */
    size_t n_extra_args;
    int64_t load_timeout_ms;       /* default 120000 */
    enum place_want device;        /* device: auto (default), gpu, gpu:N or cpu */
    int32_t gpu;                   /* N of gpu:N, else PLACE_ANY_GPU */
    uint32_t device_line;          /* line of device:, 0 when absent; for the GPU count
                                    * check, which needs the machine */
    uint32_t line;                 /* line of the model's key, for later messages */
};

/* --- pipelines (docs/pipelines.md) ----------------------------------------------------- */

/* The id of the decide stage's own choice question (built from the request's
 * candidates); extra decide questions may not use it. */
#define CONFIG_DECIDE_CHOICE_ID "choice"

/* A POST /v1/systemone whose model is "pipelines/<name>" runs pipeline
 * <name>, so no model name or alias may begin with this. */
#define CONFIG_PIPELINE_MODEL_PREFIX "pipelines/"

/* A string that may hold {{references}}, rendered per request by pipeline.c. */
struct config_text {
    char *text;                    /* NULL = absent */
    uint32_t line;
};

/* One question a pipeline stage asks. */
struct config_question {
    char *id;
    enum s1q_type type;
    struct config_text instructions;  /* required */
    char **keys;                      /* choice: option names; noul: "true"/"false";
                                       * score: NULL */
    struct config_text *criteria;     /* choice: per option; score: per level, lowest
                                       * first; noul: per key (none = no criteria) */
    size_t n_criteria;
    uint32_t line;
};

/* A stage: which model answers which questions. */
struct config_stage {
    char *model;                      /* a model name or alias */
    uint32_t model_line;
    struct config_text instructions;  /* decide only: the choice question's default
                                       * instructions (a request may override them) */
    struct config_question *questions; /* decide: extra questions; verify: required */
    size_t n_questions;
    uint32_t line;
};

enum config_on_reject { CONFIG_ON_REJECT_NEXT_BEST, CONFIG_ON_REJECT_REJECT,
                        CONFIG_ON_REJECT_ESCALATE };

/* verdict.thresholds.<question>: "OP VALUE". */
struct config_threshold {
    char *question;                   /* a verify question id */
    char op[3];                       /* ">=", ">", "<=", "<" (noul, score) or "==" (choice) */
    double value;                     /* numeric ops */
    char *option;                     /* "==": the option the verifier must choose */
    uint32_t line;
};

/* The most bytes a pipeline's description may have. */
#define CONFIG_DESCRIPTION_MAX 1024

struct config_pipeline {
    char *name;                       /* POST /v1/pipelines/<name> */
    char *description;                /* description: what the pipeline decides, for people
                                       * and agents (GET /v1/pipelines, the MCP tool
                                       * decide_<name>); NULL = none. Checked: UTF-8 without
                                       * NUL bytes, not blank, at most
                                       * CONFIG_DESCRIPTION_MAX bytes */
    uint32_t line;
    struct config_stage decide;
    struct config_stage *verify;      /* at least one, run in order */
    size_t n_verify;
    struct config_threshold *thresholds;
    size_t n_thresholds;
    double min_confidence;            /* decide confidence below this rejects; 0 = none */
    enum config_on_reject on_reject;  /* default next_best */
    uint32_t max_attempts;            /* candidates verified at most (next_best); default 3 */
    char *escalate_pipeline;          /* escalate.pipeline, or NULL */
    char *escalate_model;             /* escalate.model, or NULL */
    uint32_t verdict_line;
};

struct config {
    char *path;                    /* the file as given */
    char listen_host[256];         /* default "127.0.0.1" */
    uint16_t listen_port;          /* default 8090 */
    char **api_keys;               /* none = any bearer token accepted */
    size_t n_api_keys;
    /* device budget: unset = auto (NVML total on a GPU, else MemAvailable) */
    uint64_t vram;                 /* bytes; 0 = auto */
    uint64_t reserve;              /* bytes kept free on the GPU; default 512 MiB */
    uint64_t ram;                  /* host budget for a CPU engine; 0 = auto */
    struct config_model *models;   /* in file order */
    size_t n_models;
    char *default_model;           /* defaults.model: answers "jev-latest" and requests
                                    * without a model; NULL = the first decision model */
    /* limits */
    uint64_t max_body_bytes;       /* limits.max_body: default 1 MiB */
    uint32_t queue_depth;          /* limits.queue_depth: admission queue; default 64 */
    int64_t request_timeout_ms;    /* limits.request_timeout: default deadline, 60000 */
    int64_t header_timeout_ms;     /* limits.header_timeout: default 10000 */
    int64_t idle_timeout_ms;       /* limits.idle_timeout: keep-alive idle, default 60000 */
    uint32_t max_connections;      /* limits.max_connections: default 256 */
    int64_t drain_delay_ms;        /* limits.drain_delay: after SIGTERM, new requests are
                                    * still admitted this long while /health says 503, so
                                    * gateways take the node out first; default 5000 */
    int64_t health_interval_ms;    /* limits.health_interval: remote upstreams' health
                                    * polls; default 1000 */
    uint32_t max_restarts;         /* limits.max_restarts: crashes of one model within 60 s
                                    * that mark it failed (503, back-off); default 5 */
    uint32_t max_event_clients;    /* limits.max_event_clients: GET /v1/events subscribers
                                    * at once (the next gets 429; 0 = no event stream);
                                    * default 16 */
    uint32_t group_limit;          /* scheduling.group_limit: requests one resident model
                                    * may serve while another model waits; default 16 */
    int64_t starvation_ms;         /* scheduling.max_wait: how long a resident model may
                                    * keep the device (from its readiness) while another
                                    * waits; then it drains; default 30000 */
    uint32_t request_tokens;       /* scheduling.request_tokens: prompt tokens of a typical
                                    * request, for placement; default 256 */
    uint32_t clients;              /* scheduling.clients: requests in flight at once, for
                                    * placement; default 1 */
    /* lifecycle */
    int64_t drain_grace_ms;        /* shutdown.grace: default 30000 */
    int64_t stop_grace_ms;         /* shutdown.engine_grace: SIGTERM -> SIGKILL, 10000 */
    /* logs */
    char *log_dir;                 /* logs.dir: engine logs and the audit log; default
                                    * $TANDEM_CACHE/logs (expanded) */
    char *audit_path;              /* logs.audit: default <log_dir>/audit.jsonl;
                                    * "off" disables (NULL) */
    bool log_bodies;               /* logs.bodies: default false */
    uint64_t cache_max_bytes;      /* cache.max_bytes: the decision cache's cap, counted
                                    * as host RAM by the planner; 0 = off; default 64 MiB */
    char *store_path;              /* store.path: the request store (SQLite); default
                                    * <log_dir>/store.db; "off" disables (NULL) */
    bool store_bodies;             /* store.bodies: keep each request's JSON; default false */
    int64_t store_retention_ms;    /* store.retention: requests older are deleted; 30d */
    uint64_t store_max_bytes;      /* store.max_bytes: the oldest go past it; 1GiB */
    int64_t store_window_ms;       /* store.quality_window: the window of the quality
                                    * series on /metrics; default 7d */
    uint64_t audit_max_bytes;      /* logs.audit_max: rotate past this; default 64 MiB */
    uint32_t audit_keep;           /* logs.audit_keep: rotated files kept; default 5 */
    bool audit_fail;               /* logs.audit_on_error: fail (true) refuses requests
                                    * while audit lines wait for the disk; continue
                                    * (false, the default) serves on */
    char *llama_server;            /* engine.path: default NULL (the usual lookup) */
    char node_id[128];             /* node.id: x-tandem-node on every answer; default
                                    * the hostname */
    bool metrics_vllm;             /* metrics.compat: vllm also emits vllm:* node gauges;
                                    * default none */
    bool metrics_require_key;      /* metrics.require_key: /metrics needs an API key;
                                    * default false */
    struct config_pipeline *pipelines; /* in file order; checked against the models,
                                    * thresholds and escalations here, templates by
                                    * pipeline.c */
    size_t n_pipelines;
    /* mcp (docs/mcp.md) */
    bool mcp_http;                 /* mcp.http: the daemon serves POST /mcp; default false */
    /* browsers (docs/serve.md, "Hosts and origins") */
    char **allowed_hosts;          /* allowed_hosts: Host names served besides the listen
                                    * address, the loopback names and IP literals; each a
                                    * DNS name, or "*" (any Host: behind a gateway that
                                    * checks it). Lowercased at load; checked: no scheme,
                                    * port or path. NULL when absent */
    size_t n_allowed_hosts;
    char **allowed_origins;        /* allowed_origins: browser Origins allowed on every route
                                    * besides the daemon's own, each "http://host[:port]" or
                                    * "https://host[:port]" (checked: nothing after the
                                    * authority; lowercased at load, as browsers send
                                    * them); mcp.allowed_origins, deprecated, is merged in.
                                    * NULL when neither key is present */
    size_t n_allowed_origins;
    char **warnings;               /* lines the daemon logs at load: a deprecated key, each
                                    * "<file>:<line>: <path>: <what>"; NULL when none */
    size_t n_warnings;
};

/* Reads and validates path. On success *out is a new config (caller frees
 * with config_free). Returns TANDEM_ERR_IO (unreadable; err names the file
 * and errno text), TANDEM_ERR_FORMAT (YAML syntax, wrong type, bad value,
 * unknown key, duplicate model name or alias, missing required key; err is
 * "<file>:<line>: <key.path>: <what>"), TANDEM_ERR_NOTFOUND (a model path does
 * not exist; same format), TANDEM_ERR_NOMEM. *out is NULL on failure. */
tandem_err config_load(const char *path, struct config **out, char *err, size_t errlen);

/* Like config_load, but parses the borrowed buffer data[len]; name is the
 * file name used in messages and for resolving relative paths. */
tandem_err config_load_buffer(const char *name, const char *data, size_t len, struct config **out,
                              char *err, size_t errlen);

/* Releases c and everything it owns. config_free(NULL) is a no-op. */
void config_free(struct config *c);

/* The config's listen address as a URL a client on this host can reach
 * ("http://127.0.0.1:8090"; a wildcard address becomes loopback) into
 * out[cap]; "" when the port is 0 (any free port). */
void config_listen_url(const struct config *cfg, char *out, size_t cap);

/* Returns the model whose name or alias equals name (borrowed), or NULL.
 * The pointer is owned by c. */
const struct config_model *config_find_model(const struct config *c, const char *name);

/* Returns the pipeline named name (borrowed, owned by c), or NULL. */
const struct config_pipeline *config_find_pipeline(const struct config *c, const char *name);

/* Returns the verify question id of pipeline pl, from any of its stages
 * (borrowed, owned by the config), or NULL. */
const struct config_question *config_find_verify_question(const struct config_pipeline *pl,
                                                         const char *id);

#endif
