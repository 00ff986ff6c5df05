/* cache.c: resolves paths under tandem's cache root from the environment.
 * Pure string work: nothing here touches the file system. */
#include "cache.h"

#include <stdio.h>
#include <stdlib.h>

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
