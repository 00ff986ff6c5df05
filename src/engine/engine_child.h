/* engine_child.h: one supervised llama-server process.
 *
 * Part of the engine module (only engine*.c know how llama-server is started
 * and spoken to). A child is started from an argv array, never a shell,
 * listening only on a unix socket in tandem's private run folder
 * (engine_rundir), in its own process group, with stdin
 * from /dev/null and stdout+stderr appended to a log file. It dies with
 * tandem (PR_SET_PDEATHSIG), so no child outlives a killed tandem. Its exit
 * is visible at once through a pidfd that pollers (or an event loop) watch. */
#ifndef TANDEM_ENGINE_CHILD_H
#define TANDEM_ENGINE_CHILD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"
#include "plan/plan.h"

struct engine_child; /* opaque */

/* The llama-server flags for model_path under resolved settings r (from
 * plan_model_resolve; ngl must be explicit): -m, --host socket_path (a path
 * ending in ".sock": the engine then listens on that unix socket and on no
 * port), --cors-origins none --no-cors-credentials (no browser origin is
 * allowed: "none" matches none), explicit -c/-ngl with -fit off, -np (--kv-unified when set), -ctk/-ctv,
 * -fa on|off, -b/-ub (equal to the window for whole-batch encoders, as the
 * resolved settings already say), --no-repack --device none on a CPU engine
 * (no GPU context at all), -t/-tb when threads is set, --no-warmup when
 * asked, -nkvo,
 * --swa-full, --alias, --cache-ram 0 (no prompt cache in host RAM: its memory
 * is not planned, and a prompt restored whole from it is answered from its
 * last token alone, with other bytes), --slot-save-path slot_dir when
 * slot_dir is not NULL (an existing directory: the engine then allows POST
 * /slots/0?action=erase), and -lv 4 --no-log-timestamps --no-log-prefix so the
 * buffer sizes are logged; never --embeddings or --pooling. extra (NULL or
 * NULL-terminated, borrowed) is appended verbatim. Writes a NULL-terminated
 * array into *argv_out (output; free with engine_child_argv_free) whose
 * element 0 is binary. Returns TANDEM_ERR_NOMEM or TANDEM_ERR_INVAL (ngl
 * auto). */
tandem_err engine_child_argv(const char *binary, const char *model_path, const char *alias,
                             const struct plan_settings *r, const char *socket_path,
                             const char *slot_dir, char *const *extra, char ***argv_out);

/* Frees an array from engine_child_argv. NULL is a no-op. */
void engine_child_argv_free(char **argv);

/* Starts argv[0] with argv (borrowed for the call) and an allowlisted part
 * of tandem's environment (PATH, HOME, the locale, TZ, TMPDIR, the GPU and
 * BLAS backends' variables; never LLAMA_*: docs/serve.md) plus env (NULL, or
 * NULL-terminated "NAME=value" entries that replace or add to the inherited
 * ones; borrowed), appending its output to log_path (created 0600).
 * socket_path (copied) is the unix socket argv listens on (for
 * engine_child_socket and engine_child_wait_ready).
 * On success *out is a new handle (caller frees with engine_child_free).
 * Returns TANDEM_ERR_IO (log file), TANDEM_ERR_SPAWN (fork/exec; err says
 * why, an exec failure included), TANDEM_ERR_NOMEM. */
tandem_err engine_child_spawn(char *const *argv, char *const *env, const char *log_path,
                              const char *socket_path, struct engine_child **out, char *err,
                              size_t errlen);

/* The engine's process id (its process group's too). */
pid_t engine_child_pid(const struct engine_child *c);
/* The unix socket the engine listens on; valid until engine_child_free. */
const char *engine_child_socket(const struct engine_child *c);

/* A descriptor that becomes readable when the child exits (a pidfd), for
 * poll(2) or an event loop; owned by the child handle. */
int engine_child_exit_fd(const struct engine_child *c);

/* Reaps the child if it has exited (never blocks). *exited (output) says
 * whether it has; *status then holds the waitpid status. Safe to call again:
 * a reaped child stays exited with the same status. */
tandem_err engine_child_poll(struct engine_child *c, bool *exited, int *status);

/* Polls GET /health on the engine's unix socket every 50 ms until it answers 200 (TANDEM_OK), the child
 * exits (TANDEM_ERR_CHILD; err gives the exit status and the log's last
 * line), or timeout_ms passes (TANDEM_ERR_TIMEOUT). Blocks: for one-shot
 * commands; the daemon polls from its event loop. */
tandem_err engine_child_wait_ready(struct engine_child *c, int timeout_ms, char *err,
                                   size_t errlen);

/* Sends sig to the child's process group unless it has exited (never
 * blocks): the daemon's stop is engine_child_signal(SIGTERM), a timer, then
 * SIGKILL, with the exit seen on engine_child_exit_fd. */
void engine_child_signal(struct engine_child *c, int sig);

/* Writes the last non-empty line of the child's log (at most cap-1 bytes)
 * into out; "" when the log cannot be read. For error messages. */
void engine_child_log_tail(const struct engine_child *c, char *out, size_t cap);

/* Stops the child: SIGTERM to its process group, SIGKILL after grace_ms, then
 * reaps it. *status (optional output) gets the waitpid status. Returns
 * TANDEM_OK once reaped (also when it had exited already). */
tandem_err engine_child_stop(struct engine_child *c, int grace_ms, int *status);

/* Kills (SIGKILL to the group) a child still running, reaps it, and frees the
 * handle. engine_child_free(NULL) is a no-op. */
void engine_child_free(struct engine_child *c);

/* Describes a waitpid status: "exited with status 1", "killed by signal 9
 * (Killed)". Writes into out[cap] and returns out. */
char *engine_child_describe_status(int status, char *out, size_t cap);

#endif
