/* cache.c: resolves paths under tandem's cache root from the environment.
 * String work, except cache_make_dir, which creates a directory on demand. */
#include "base/cache.h"

#include <errno.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static const char *nonempty_env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

tandem_err cache_path(char *out, size_t cap, const char *sub) {
    const char *root = nonempty_env("TANDEM_CACHE");
    const char *base = NULL, *suffix = "";
    if (!root) {
        if ((base = nonempty_env("XDG_CACHE_HOME")))
            suffix = "/tandem";
        else if ((base = nonempty_env("HOME")))
            suffix = "/.cache/tandem";
        else
            return TANDEM_ERR_NOTFOUND;
        root = base;
    }
    int has_sub = sub && *sub;
    int n = snprintf(out, cap, "%s%s%s%s", root, suffix, has_sub ? "/" : "",
                     has_sub ? sub : "");
    if (n < 0 || (size_t)n >= cap) {
        if (cap)
            out[0] = '\0';
        return TANDEM_ERR_TOOBIG;
    }
    return TANDEM_OK;
}

tandem_err cache_make_dir(char *out, size_t cap, const char *sub) {
    char root[4096];
    tandem_err e = cache_path(root, sizeof root, NULL);
    if (e == TANDEM_OK)
        e = cache_path(out, cap, sub);
    if (e != TANDEM_OK)
        return e;
    if ((mkdir(root, 0755) != 0 && errno != EEXIST) ||
        (mkdir(out, 0755) != 0 && errno != EEXIST))
        return TANDEM_ERR_IO;
    return TANDEM_OK;
}

tandem_err cache_mkdir_p(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return TANDEM_ERR_TOOBIG;
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return TANDEM_ERR_IO;
            *p = '/';
        }
    return mkdir(buf, 0755) != 0 && errno != EEXIST ? TANDEM_ERR_IO : TANDEM_OK;
}
