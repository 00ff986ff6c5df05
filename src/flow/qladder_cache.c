/* qladder_cache.c: the ladder's cache keys and sidecars.
 *
 * Every key is a hash of one '|'-separated line that starts with what it
 * keys ("build", "judge", "imatrix") and ends with the engine build, so
 * keys of different things never collide and a new engine invalidates all
 * of them. The sidecar is only trusted when it names the same build key and
 * the file it describes is still readable; it is rewritten whole, atomically. */
#include "flow/qladder_cache.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/host.h"
#include "version.h"

/* Hex SHA-256 of text. */
static void key_of(const char *text, char out[HASH_SHA256_HEX_LEN + 1]) {
    if (hash_buffer_sha256(text, strlen(text), out) != TANDEM_OK)
        out[0] = '\0';
}

void qladder_cache_build_key(const char *src_sha, const char *type, const char *imatrix_sha,
                             char *const *protect, size_t n_protect,
                             char out[HASH_SHA256_HEX_LEN + 1]) {
    char text[2048];
    int n = snprintf(text, sizeof text, "build|%s|%s|%s|%d", src_sha, type,
                     imatrix_sha ? imatrix_sha : "-", TANDEM_ENGINE_BUILD);
    for (size_t i = 0; i < n_protect && n > 0 && (size_t)n < sizeof text; i++)
        n += snprintf(text + n, sizeof text - (size_t)n, "|%s", protect[i]);
    key_of(text, out);
}

void qladder_cache_judge_key(const char *build, const struct qladder_judge_inputs *in,
                             char out[HASH_SHA256_HEX_LEN + 1]) {
    char text[1024];
    snprintf(text, sizeof text, "judge|%s|%s|%s|%u|%.6f|%u|%.6f|%d", build, in->src_sha,
             in->data_sha, in->seed, in->share, in->repeat, in->margin, TANDEM_ENGINE_BUILD);
    key_of(text, out);
}

void qladder_cache_imatrix_key(const char *src_sha, const char *data_sha, unsigned seed,
                               double share, char out[HASH_SHA256_HEX_LEN + 1]) {
    char text[512];
    snprintf(text, sizeof text, "imatrix|%s|%s|%u|%.6f|%d", src_sha, data_sha, seed, share,
             TANDEM_ENGINE_BUILD);
    key_of(text, out);
}

json_t *qladder_cache_load(const char *path, const char *build) {
    char side[PATH_MAX + 16];
    snprintf(side, sizeof side, "%s.ladder.json", path);
    json_t *j = json_load_file(side, 0, NULL);
    const char *k = json_string_value(json_object_get(j, "build"));
    if (!k || strcmp(k, build) || access(path, R_OK) != 0) {
        json_decref(j);
        return NULL;
    }
    return j;
}

tandem_err qladder_cache_save(const char *path, const json_t *j, char *err, size_t errlen) {
    char side[PATH_MAX + 16];
    snprintf(side, sizeof side, "%s.ladder.json", path);
    char *text = json_dumps(j, JSON_INDENT(2));
    tandem_err e = text ? host_write_atomic(side, text, strlen(text)) : TANDEM_ERR_NOMEM;
    free(text); /* jansson's allocation */
    if (e != TANDEM_OK)
        tandem_errmsg(err, errlen, "%s: cannot write the cache (%s)", side,
                      e == TANDEM_ERR_IO ? strerror(errno) : tandem_strerror(e));
    return e;
}
