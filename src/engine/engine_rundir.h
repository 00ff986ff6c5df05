/* engine_rundir.h: the engines' private run folder.
 *
 * Every engine listens on a unix socket and keeps its slot files in a
 * folder that only tandem's user can open: one per daemon or command, made
 * with mkdtemp (mode 0700, a name no one can take first) under
 * ${XDG_RUNTIME_DIR:-${TMPDIR:-/tmp}}, and removed with everything in it
 * when freed. Engines are named by a short index (e3.sock, e3.slots) so that
 * socket paths stay inside sun_path's 108 bytes. */
#ifndef TANDEM_ENGINE_RUNDIR_H
#define TANDEM_ENGINE_RUNDIR_H

#include <stddef.h>

#include "base/err.h"

struct engine_rundir; /* opaque */

/* Creates a new private folder "tandem-XXXXXX" under $XDG_RUNTIME_DIR, else
 * $TMPDIR, else /tmp (an empty variable counts as unset), and checks that it
 * is a directory owned by this user with no access for anyone else. On
 * success *out is the new handle (free with engine_rundir_free). Returns
 * TANDEM_ERR_IO (err says which folder and why), TANDEM_ERR_TOOBIG (the
 * parent's path leaves no room for a socket name; err says so),
 * TANDEM_ERR_INVAL (the parent has a comma, quote or space, which the
 * engine's --host would split or trim),
 * TANDEM_ERR_NOMEM. */
tandem_err engine_rundir_new(struct engine_rundir **out, char *err, size_t errlen);

/* The folder's absolute path; valid until engine_rundir_free. */
const char *engine_rundir_path(const struct engine_rundir *d);

/* Writes "<folder>/e<index>.sock", the unix socket of engine index, into
 * out[cap] and removes a file left at that path by an earlier engine (the
 * engine cannot bind over it). Returns TANDEM_ERR_TOOBIG when the path does
 * not fit sun_path (108 bytes with its NUL) or out (err names the path),
 * TANDEM_ERR_IO when the old socket cannot be removed. */
tandem_err engine_rundir_socket(const struct engine_rundir *d, unsigned index, char *out,
                                size_t cap, char *err, size_t errlen);

/* Creates (or keeps) "<folder>/e<index>.slots", the engine's
 * --slot-save-path, mode 0700, and writes its path into out[cap]. Returns
 * TANDEM_ERR_TOOBIG (out too small), TANDEM_ERR_IO (err says why). */
tandem_err engine_rundir_slots(const struct engine_rundir *d, unsigned index, char *out,
                               size_t cap, char *err, size_t errlen);

/* Removes the folder and everything in it (sockets, slot files), then frees
 * the handle. engine_rundir_free(NULL) is a no-op. */
void engine_rundir_free(struct engine_rundir *d);

#endif
