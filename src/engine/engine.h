/* engine.h: the llama-server engine that tandem runs its models on.
 *
 * engine/ is the only layer that knows how llama-server and its tools are
 * found, started and spoken to. This module finds the binary (flag,
 * environment, the engine installed beside tandem, the cache) and
 * establishes what it is (build, commit, whether it serves /v1/systemone);
 * engine_child.h supervises running children, engine_quantize.h and
 * engine_imatrix.h run the engine's tools. */
#ifndef TANDEM_ENGINE_H
#define TANDEM_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* The first llama.cpp build whose llama-server serves POST /v1/systemone. */
#define ENGINE_MIN_DECISION_BUILD 11361

/* Build numbers below this come from trees built without git history, which
 * stamp a meaningless number (e.g. "build 1"); they are treated as unknown. */
#define ENGINE_MIN_MEANINGFUL_BUILD 100

/* Where engine_locate() found the binary (it says in which order it looks). */
enum engine_source {
    ENGINE_SOURCE_FLAG,    /* --llama-server PATH */
    ENGINE_SOURCE_ENV,     /* $TANDEM_LLAMA_SERVER */
    ENGINE_SOURCE_CACHE,   /* the pinned build in tandem's cache */
    ENGINE_SOURCE_LIBEXEC, /* <prefix>/libexec/tandem/llama-server beside an installed
                            * <prefix>/bin/tandem (`make install`); looked at before the cache */
};

/* Returns a static name for src: "--llama-server", "TANDEM_LLAMA_SERVER", "cache",
 * "libexec". */
const char *engine_source_name(enum engine_source src);

/* Writes where `make install` puts the engine of a tandem binary at exe into
 * out[cap]: the parent of exe's folder joined with "libexec/tandem/llama-server"
 * (/usr/local/bin/tandem gives /usr/local/libexec/tandem/llama-server). exe must
 * be absolute and free of symlinks and "..", as /proc/self/exe names it; the
 * parent is taken textually. Nothing is checked on disk. Returns TANDEM_ERR_INVAL
 * when exe is not absolute, TANDEM_ERR_TOOBIG when the path does not fit in cap
 * (out is then ""). */
tandem_err engine_libexec_path(const char *exe, char *out, size_t cap);

/* Chooses the llama-server binary: flag_path if not NULL, else
 * $TANDEM_LLAMA_SERVER if set and not empty, else the installed engine beside
 * the running tandem (engine_libexec_path() of /proc/self/exe) if that is an
 * executable file, else <cache>/engine/b<pinned>/bin/llama-server.
 * Writes the path into out[cap] and where it came from into *src.
 * Returns TANDEM_ERR_NOTFOUND when the chosen path is not an executable file
 * (out still names it; with no flag and no variable that is the cache's path),
 * TANDEM_ERR_TOOBIG when it does not fit in cap. */
tandem_err engine_locate(const char *flag_path, int pinned_build, char *out, size_t cap,
                         enum engine_source *src);

struct engine_version {
    int64_t build;    /* llama.cpp build number; -1 when unknown or meaningless */
    char commit[64];  /* as the binary reports it; "" when absent */
    char version[64]; /* the version string before the parenthesis, e.g. "0.6.0-dev" */
};

/* Parses the output of `llama-server --version`, in either form:
 *   "version: 0.6.0-dev (build 11434, commit abc1234)"   (current)
 *   "version: 4500 (abc1234)"                            (older builds)
 * Build numbers below ENGINE_MIN_MEANINGFUL_BUILD become -1.
 * Returns TANDEM_ERR_FORMAT when no "version:" line is found. */
tandem_err engine_version_parse(const char *text, struct engine_version *out);

/* Runs `path --version` (argv array, no shell, stdin from /dev/null, at most
 * timeout_ms) and parses its output into *out. On failure, err[errlen] (if
 * not NULL) says why. Returns TANDEM_ERR_SPAWN, TANDEM_ERR_TIMEOUT,
 * TANDEM_ERR_CHILD (non-zero exit), or the parse error. */
tandem_err engine_version_query(const char *path, int timeout_ms, struct engine_version *out,
                                char *err, size_t errlen);

/* Sets *found to whether the file at path contains the "/v1/systemone" route
 * string: a static check that the binary (a static build) registers the route.
 * Returns TANDEM_ERR_IO when the file cannot be read. */
tandem_err engine_route_scan(const char *path, bool *found);

/* Whether an engine can serve decision models, from its version and route scan. */
enum engine_verdict {
    ENGINE_VERDICT_OK,         /* build known and >= ENGINE_MIN_DECISION_BUILD */
    ENGINE_VERDICT_UNVERIFIED, /* build unknown, but the route string is present */
    ENGINE_VERDICT_TOO_OLD,    /* build known and older than the minimum */
    ENGINE_VERDICT_NO_ROUTE,   /* build unknown and no route string */
};

/* Decides the verdict from a parsed version and the route scan result. */
enum engine_verdict engine_verdict_of(const struct engine_version *v, bool has_route);

/* Everything tandem establishes about an engine binary before using it. */
struct engine_identity {
    char path[4096];
    enum engine_source source;
    tandem_err located;            /* engine_locate()'s result */
    tandem_err queried;            /* engine_version_query()'s result */
    struct engine_version version; /* valid when queried == TANDEM_OK */
    bool has_route;                /* engine_route_scan() found the route string */
    enum engine_verdict verdict;   /* valid when queried == TANDEM_OK */
    char error[512];               /* why located or queried failed; "" otherwise */
};

#define ENGINE_VERSION_TIMEOUT_MS 10000

/* Locates the engine (as engine_locate()), asks it for its version and scans
 * it for the route, filling *out. Returns TANDEM_OK when the engine can serve
 * decision models (verdict OK or UNVERIFIED); otherwise the first failure:
 * TANDEM_ERR_NOTFOUND, a query error, or TANDEM_ERR_ENGINE for a too-old or
 * route-less build. out->error then explains it in one line. */
tandem_err engine_identify(const char *flag_path, int pinned_build, struct engine_identity *out);

/* Chooses the engine's tool `name` (e.g. "llama-quantize"): the file of that
 * name in the directory of the llama-server that engine_locate(flag_path, ...)
 * chooses (the installed libexec/tandem/ or the cache's bin/ by default), so
 * tool and server always come from the same build. Writes the path into
 * out[cap]. Returns TANDEM_ERR_NOTFOUND when that file is not executable (out
 * still names it), TANDEM_ERR_TOOBIG when it does not fit in cap. */
tandem_err engine_locate_tool(const char *flag_path, int pinned_build, const char *name,
                              char *out, size_t cap);

/* Runs argv[0] (a path) with argv (no shell), stdin from /dev/null and
 * stdout/stderr inherited, and waits for it. *exit_code receives its exit
 * status (128 + signal when killed). Returns TANDEM_ERR_SPAWN when it cannot
 * start, with err[errlen] (optional) saying why. */
tandem_err engine_run_tool(char *const argv[], int *exit_code, char *err, size_t errlen);

/* As engine_run_tool, with stdout and stderr written to the file log_path
 * (created or truncated, mode 0600) instead; NULL = inherited. Returns
 * TANDEM_ERR_IO when the log cannot be created. */
tandem_err engine_run_tool_logged(char *const argv[], const char *log_path, int *exit_code,
                                  char *err, size_t errlen);

/* Writes into out[cap] the line of a tool's or engine's log text[0..len) that best says
 * why the tool stopped: the last "GGML_ASSERT"/"error"/"failed" line, else
 * the last non-empty line that is not from the crash handler's debugger
 * backtrace; its timestamp and level prefix ("0.00.335.245 E ") removed and
 * a source path cut to its file name. "" when there is none. */
void engine_log_reason(const char *text, size_t len, char *out, size_t cap);

/* engine_log_reason() of the file at log_path ("" when unreadable). */
void engine_log_file_reason(const char *log_path, char *out, size_t cap);

#endif
