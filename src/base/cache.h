/* cache.h: where tandem keeps what it fetches and builds.
 *
 * The root is $TANDEM_CACHE if set, else ${XDG_CACHE_HOME:-$HOME/.cache}/tandem,
 * the same rule scripts/lib.sh follows. */
#ifndef TANDEM_CACHE_H
#define TANDEM_CACHE_H

#include <stddef.h>

#include "base/err.h"

/* Writes the cache root joined with sub (e.g. "models"; NULL or "" for the
 * root itself) into out[cap]. Nothing is created on disk.
 * Returns TANDEM_ERR_NOTFOUND when no environment variable names a home,
 * TANDEM_ERR_TOOBIG when the path does not fit in cap (out is then ""). */
tandem_err cache_path(char *out, size_t cap, const char *sub);

/* Like cache_path, then creates the root and sub (one level each, mode 0755)
 * if missing. Returns cache_path's errors, or TANDEM_ERR_IO when a directory
 * cannot be created (errno says why). */
tandem_err cache_make_dir(char *out, size_t cap, const char *sub);

/* Creates directory path and its missing parents (mode 0755), like mkdir -p.
 * Returns TANDEM_ERR_IO (errno says why) or TANDEM_ERR_TOOBIG (path too long). */
tandem_err cache_mkdir_p(const char *path);

#endif
