/* engine_rundir.c: the engines' private run folder.
 *
 * mkdtemp creates the folder with mode 0700 and a random name, retrying on
 * a name that exists, so a local user who pre-creates files or folders with
 * tandem's pattern cannot make tandem use one of theirs. The folder is then
 * checked (lstat: a directory, our uid, no group or other bits) before any
 * socket goes in. Removal walks the tree depth first without following
 * links (host_remove_tree). */
#include "engine/engine_rundir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/host.h"
#include "base/mem.h"

#define SOCKET_NAME_MAX 17 /* strlen("/e4294967295.sock"): the longest socket name */

struct engine_rundir {
    char *path;
};

/* The parent folder: the first of $XDG_RUNTIME_DIR, $TMPDIR that is set and
 * not empty, else /tmp. */
static const char *parent_dir(void) {
    const char *names[] = {"XDG_RUNTIME_DIR", "TMPDIR"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *v = getenv(names[i]);
        if (v && v[0])
            return v;
    }
    return "/tmp";
}

tandem_err engine_rundir_new(struct engine_rundir **out, char *err, size_t errlen) {
    *out = NULL;
    const char *parent = parent_dir();
    size_t n = strlen(parent) + sizeof "/tandem-XXXXXX";
    if (n + SOCKET_NAME_MAX > sizeof ((struct sockaddr_un *)0)->sun_path) {
        tandem_errmsg(err, errlen, "the run folder's parent %s is too long for unix socket "
                      "paths (108 bytes): set XDG_RUNTIME_DIR or TMPDIR to a shorter folder",
                      parent);
        return TANDEM_ERR_TOOBIG;
    }
    if (strpbrk(parent, ",\" \t\n")) { /* the engine splits --host on commas and trims spaces */
        tandem_errmsg(err, errlen, "the run folder's parent %s has a comma, a quote or a space, "
                      "which an engine socket path cannot carry: set XDG_RUNTIME_DIR or TMPDIR "
                      "to a plain folder", parent);
        return TANDEM_ERR_INVAL;
    }
    struct engine_rundir *d = mem_calloc(1, sizeof *d);
    if (!d || !(d->path = mem_calloc(1, n))) {
        mem_free(d);
        return TANDEM_ERR_NOMEM;
    }
    snprintf(d->path, n, "%s/tandem-XXXXXX", parent);
    if (!mkdtemp(d->path)) {
        tandem_errmsg(err, errlen, "cannot create a private run folder in %s: %s", parent,
                      strerror(errno));
        mem_free(d->path);
        mem_free(d);
        return TANDEM_ERR_IO;
    }
    struct stat st;
    if (lstat(d->path, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 077)) {
        tandem_errmsg(err, errlen, "the run folder %s is not private to this user", d->path);
        engine_rundir_free(d);
        return TANDEM_ERR_IO;
    }
    *out = d;
    return TANDEM_OK;
}

const char *engine_rundir_path(const struct engine_rundir *d) { return d->path; }

tandem_err engine_rundir_socket(const struct engine_rundir *d, unsigned index, char *out,
                                size_t cap, char *err, size_t errlen) {
    int n = snprintf(out, cap, "%s/e%u.sock", d->path, index);
    if (n < 0 || (size_t)n >= cap || (size_t)n >= sizeof ((struct sockaddr_un *)0)->sun_path) {
        tandem_errmsg(err, errlen, "the engine socket path %s/e%u.sock is longer than a unix "
                      "socket allows (107 bytes)", d->path, index);
        return TANDEM_ERR_TOOBIG;
    }
    if (unlink(out) != 0 && errno != ENOENT) {
        tandem_errmsg(err, errlen, "cannot remove the old engine socket %s: %s", out,
                      strerror(errno));
        return TANDEM_ERR_IO;
    }
    return TANDEM_OK;
}

tandem_err engine_rundir_slots(const struct engine_rundir *d, unsigned index, char *out,
                               size_t cap, char *err, size_t errlen) {
    int n = snprintf(out, cap, "%s/e%u.slots", d->path, index);
    if (n < 0 || (size_t)n >= cap)
        return TANDEM_ERR_TOOBIG;
    if (mkdir(out, 0700) != 0 && errno != EEXIST) {
        tandem_errmsg(err, errlen, "cannot create the slot folder %s: %s", out, strerror(errno));
        return TANDEM_ERR_IO;
    }
    return TANDEM_OK;
}

void engine_rundir_free(struct engine_rundir *d) {
    if (!d)
        return;
    host_remove_tree(d->path);
    mem_free(d->path);
    mem_free(d);
}
