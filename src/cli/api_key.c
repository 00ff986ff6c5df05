/* api_key.c: a client command's API key from a file or the environment.
 *
 * A key in argv shows in `ps` and /proc/PID/cmdline to every local user, so
 * commands read it from $TANDEM_API_KEY or from a file. The file's format is
 * the engine's own --api-key-file's (one key per line, '#' comments); only
 * the first key is used. A file that group or others may read is refused
 * rather than used: the key it holds is already exposed, and saying so is
 * better than sending it (the same rule ssh applies to private keys). */
#include "cli/api_key.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *api_key_argv_refusal(void) {
    return "--api-key puts the key in the process list, where every local user can read it; "
           "use --api-key-file FILE (mode 0600) or $TANDEM_API_KEY";
}

/* Cuts leading and trailing whitespace off s in place; returns the start. */
static char *trim(char *s) {
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

tandem_err api_key_read_file(const char *path, char *key, size_t cap, char *err, size_t errcap) {
    FILE *f = fopen(path, "r");
    struct stat st;
    if (!f || fstat(fileno(f), &st)) {
        tandem_errmsg(err, errcap, "cannot read the API key file %s: %s", path, strerror(errno));
        if (f)
            fclose(f);
        return TANDEM_ERR_IO;
    }
    if (st.st_mode & (S_IRGRP | S_IROTH)) {
        tandem_errmsg(err, errcap, "the API key file %s is readable by others (mode %04o); "
                      "chmod 600 %s", path, (unsigned)(st.st_mode & 07777), path);
        fclose(f);
        return TANDEM_ERR_INVAL;
    }
    char line[API_KEY_MAX + 2];
    tandem_err e = TANDEM_ERR_NOTFOUND;
    while (e == TANDEM_ERR_NOTFOUND && fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        bool whole = n < sizeof line - 1 || line[n - 1] == '\n' || feof(f);
        char *k = trim(line);
        if (whole && (!*k || *k == '#'))
            continue;
        if (!whole || strlen(k) >= cap)
            e = TANDEM_ERR_TOOBIG;
        else
            memcpy(key, k, strlen(k) + 1), e = TANDEM_OK;
    }
    fclose(f);
    if (e == TANDEM_ERR_NOTFOUND)
        tandem_errmsg(err, errcap, "the API key file %s holds no key (only empty or # lines)", path);
    else if (e == TANDEM_ERR_TOOBIG)
        tandem_errmsg(err, errcap, "a line of the API key file %s is longer than %zu bytes", path, cap - 1);
    return e;
}

tandem_err api_key_resolve(const char *file, char *buf, size_t cap, const char **key, char *err,
                           size_t errcap) {
    *key = NULL;
    if (file) {
        tandem_err e = api_key_read_file(file, buf, cap, err, errcap);
        if (e == TANDEM_OK)
            *key = buf;
        return e;
    }
    const char *env = getenv("TANDEM_API_KEY");
    if (env && *env)
        *key = env;
    return TANDEM_OK;
}
