/* dataset.c: --data as a file or as the daemon's stored traffic.
 *
 * A store spec goes through a temporary JSONL file rather than a second
 * loader: the export is the same bytes `tandem export` writes, and the set is
 * read by the one dataset parser, so a stored request is a case exactly when
 * the same line in a file would be. */
#include "flow/dataset.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/cache.h"
#include "base/hash.h"
#include "base/mem.h"
#include "base/units.h"
#include "serve/config.h"

bool dataset_is_store(const char *data) {
    return !strncmp(data, DATASET_STORE_PREFIX, strlen(DATASET_STORE_PREFIX));
}

tandem_err dataset_store_path(const char *config_path, char *out, size_t cap, char *err,
                              size_t errlen) {
    if (!config_path) {
        tandem_err e = cache_path(out, cap, "logs/store.db");
        if (e)
            tandem_errmsg(err, errlen, "cannot find the cache folder for the default store");
        return e;
    }
    struct config *cfg;
    if (config_load(config_path, &cfg, err, errlen) != TANDEM_OK)
        return TANDEM_ERR_FORMAT;
    tandem_err e = TANDEM_OK;
    if (!cfg->store_path) {
        tandem_errmsg(err, errlen, "%s: store.path is off: this daemon keeps no requests",
                      config_path);
        e = TANDEM_ERR_FORMAT;
    } else {
        snprintf(out, cap, "%s", cfg->store_path);
    }
    config_free(cfg);
    return e;
}

/* Whether path names a YAML file (a tandem.yaml) rather than a database. */
static bool is_yaml(const char *path) {
    size_t n = strlen(path);
    return (n > 5 && !strcmp(path + n - 5, ".yaml")) || (n > 4 && !strcmp(path + n - 4, ".yml"));
}

/* The store a spec names: its @WHERE (a database file, or a tandem.yaml whose
 * store.path it is), else config_path's, else the default. */
static tandem_err store_location(const char *where, const char *config_path, char *out,
                                 size_t cap, char *err, size_t errlen) {
    if (*where && !is_yaml(where)) {
        snprintf(out, cap, "%s", where);
        return TANDEM_OK;
    }
    return dataset_store_path(*where ? where : config_path, out, cap, err, errlen);
}

/* Writes one case as a JSONL line (a store_case_fn). */
static bool write_case(void *user, const json_t *c, char *err, size_t errlen) {
    FILE *f = user;
    if (json_dumpf(c, f, JSON_COMPACT | JSON_PRESERVE_ORDER) == 0 && fputc('\n', f) != EOF)
        return true;
    tandem_errmsg(err, errlen, "cannot write the export: %s", strerror(errno));
    return false;
}

tandem_err dataset_export(const char *path, const struct store_export_opts *o, FILE *f,
                          size_t *exported, size_t *skipped, char *err, size_t errlen) {
    tandem_err e = store_export(path, o, write_case, f, exported, skipped, err, errlen);
    if (e == TANDEM_ERR_INVAL)
        return TANDEM_ERR_IO;
    if (!e && fflush(f) != 0) {
        tandem_errmsg(err, errlen, "cannot write the export: %s", strerror(errno));
        return TANDEM_ERR_IO;
    }
    return e;
}

/* Parses "SINCE[:MODEL][@WHERE]" (after the prefix) into *o, model[cap] and
 * where[wcap] ("" when absent). False with err set when SINCE is not a duration. */
static bool parse_spec(const char *spec, struct store_export_opts *o, char *model, size_t cap,
                       char *where, size_t wcap, char *err, size_t errlen) {
    char since[64];
    const char *at = strrchr(spec, '@');
    snprintf(where, wcap, "%s", at ? at + 1 : "");
    size_t end = at ? (size_t)(at - spec) : strlen(spec);
    size_t n = strcspn(spec, ":@");
    snprintf(since, sizeof since, "%.*s", (int)(n < sizeof since - 1 ? n : sizeof since - 1), spec);
    *o = (struct store_export_opts){0};
    if (units_parse_ms(since, &o->since_ms) != TANDEM_OK || o->since_ms <= 0) {
        tandem_errmsg(err, errlen, "--data " DATASET_STORE_PREFIX "%s: expected "
                      DATASET_STORE_PREFIX "SINCE[:MODEL][@FILE], SINCE a duration like 24h "
                      "or 7d", spec);
        return false;
    }
    if (spec[n] == ':' && n + 1 < end) {
        snprintf(model, cap, "%.*s", (int)(end - n - 1), spec + n + 1);
        o->model = model;
    }
    return true;
}

/* Exports the store's window into a temporary file, hashes it when asked, and
 * loads it leniently. */
static tandem_err load_store(const char *spec, const struct dataset_opts *d,
                             struct evalset **out, size_t *skipped, char *err, size_t errlen) {
    struct store_export_opts o;
    char model[256], where[PATH_MAX], path[PATH_MAX], tmp[PATH_MAX];
    tandem_err e;
    if (!parse_spec(spec, &o, model, sizeof model, where, sizeof where, err, errlen))
        return TANDEM_ERR_FORMAT;
    if ((e = store_location(where, d->config_path, path, sizeof path, err, errlen)))
        return e;
    const char *dir = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/tandem-store-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        tandem_errmsg(err, errlen, "cannot create a temporary file in %s: %s",
                      dir && *dir ? dir : "/tmp", strerror(errno));
        if (fd >= 0)
            close(fd);
        return TANDEM_ERR_IO;
    }
    size_t exported = 0, bodiless = 0, invalid = 0;
    e = dataset_export(path, &o, f, &exported, &bodiless, err, errlen);
    fclose(f);
    if (!e && !exported) {
        tandem_errmsg(err, errlen, "%s: no request to replay in the last %s%s%s (%zu kept "
                      "without their bodies: replaying needs store.bodies: true)", path, spec,
                      o.model ? " of model " : "", o.model ? o.model : "", bodiless);
        e = TANDEM_ERR_FORMAT;
    }
    if (!e && d->sha256)
        e = hash_file_sha256(tmp, d->sha256, err, errlen);
    if (!e)
        e = evalset_load_lenient(tmp, out, &invalid, err, errlen);
    unlink(tmp);
    if (!e) { /* reports name the spec, not the temporary file */
        char *name = mem_alloc(strlen(DATASET_STORE_PREFIX) + strlen(spec) + 1);
        if (name) {
            sprintf(name, DATASET_STORE_PREFIX "%s", spec);
            mem_free((*out)->path);
            (*out)->path = name;
        }
    }
    if (!e && skipped)
        *skipped = bodiless + invalid;
    return e;
}

tandem_err dataset_load(const char *data, const struct dataset_opts *o, struct evalset **out,
                        size_t *skipped, char *err, size_t errlen) {
    if (skipped)
        *skipped = 0;
    if (dataset_is_store(data))
        return load_store(data + strlen(DATASET_STORE_PREFIX), o, out, skipped, err, errlen);
    tandem_err e = o->sha256 ? hash_file_sha256(data, o->sha256, err, errlen) : TANDEM_OK;
    if (e)
        return e;
    return o->audit_ok ? evalset_load_any(data, out, skipped, err, errlen)
                       : evalset_load(data, out, err, errlen);
}
