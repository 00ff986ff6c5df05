/* model_endpoint.c: URLs, config:MODEL and file:PATH for eval, drift, calibrate.
 *
 * A URL is used as given. config: specs share one private daemon on the
 * user's config; file: specs share one on a config written into a private
 * temporary folder (listen on port 0, logs inside the folder, one model per
 * distinct file, named after it), removed at the end. Both daemons are
 * `tandem serve` itself (flow/private_daemon), so a model is measured with the
 * settings it is served with. */
#include "flow/model_endpoint.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/host.h"
#include "base/mem.h"
#include "flow/private_daemon.h"
#include "serve/config.h"

#define CONFIG_PREFIX "config:"
#define FILE_PREFIX "file:"
#define MAX_FILES 8

struct model_endpoints {
    struct private_daemon *configured, *files;
    struct config *cfg;            /* the user's, for config: names and the key */
    char dir[64];                  /* the file: models' folder; "" = none */
    char paths[MAX_FILES][PATH_MAX];
    char names[MAX_FILES][64];
    size_t n_files;
};

static bool is_url(const char *s) { return !strncmp(s, "http://", 7) || !strncmp(s, "https://", 8); }

/* The model name for path: its file name without .gguf, in the characters
 * a config takes, made unique among the names so far. */
static void name_for(struct model_endpoints *e, const char *path, char *out, size_t cap) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".gguf"))
        n -= 5;
    snprintf(out, cap, "%.*s", (int)(n < 48 ? n : 48), base);
    for (char *c = out; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '.' && *c != '_' && *c != '-')
            *c = '-';
    if (!*out)
        snprintf(out, cap, "model");
    char first[64];
    snprintf(first, sizeof first, "%s", out);
    for (unsigned k = 2; ; k++) {
        bool taken = false;
        for (size_t i = 0; i < e->n_files; i++)
            taken |= !strcmp(e->names[i], out);
        if (!taken)
            return;
        snprintf(out, cap, "%.48s-%u", first, k);
    }
}

/* The name of file:PATH's model, adding it when it is new. NULL after a message. */
static const char *add_file(struct model_endpoints *e, const struct model_endpoints_params *p,
                            const struct model_endpoint *ep) {
    char real[PATH_MAX];
    const char *path = ep->spec + strlen(FILE_PREFIX);
    if (!realpath(path, real) || access(real, R_OK)) {
        fprintf(stderr, "%s: %s %s: %s\n", p->command, ep->flag, ep->spec, strerror(errno));
        return NULL;
    }
    for (size_t i = 0; i < e->n_files; i++)
        if (!strcmp(e->paths[i], real))
            return e->names[i];
    if (e->n_files == MAX_FILES) {
        fprintf(stderr, "%s: at most %d file: models\n", p->command, MAX_FILES);
        return NULL;
    }
    snprintf(e->paths[e->n_files], PATH_MAX, "%s", real);
    name_for(e, real, e->names[e->n_files], sizeof e->names[0]);
    return e->names[e->n_files++];
}

/* A double-quoted YAML scalar of s into f. */
static void yaml_quoted(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* Writes the file: models' config into a new private folder. */
static bool write_files_config(struct model_endpoints *e, const char *command, char *path,
                               size_t cap) {
    snprintf(e->dir, sizeof e->dir, "/tmp/tandem-models-XXXXXX");
    if (!mkdtemp(e->dir)) {
        fprintf(stderr, "%s: cannot make a temporary folder: %s\n", command, strerror(errno));
        e->dir[0] = '\0';
        return false;
    }
    snprintf(path, cap, "%s/tandem.yaml", e->dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "%s: %s: %s\n", command, path, strerror(errno));
        return false;
    }
    fprintf(f, "# written by %s for its file: models; removed when it ends\n"
               "listen: 127.0.0.1:0\nlogs:\n  dir: %s/logs\nmodels:\n", command, e->dir);
    for (size_t i = 0; i < e->n_files; i++) {
        fprintf(f, "  %s:\n    path: ", e->names[i]);
        yaml_quoted(f, e->paths[i]);
        fputc('\n', f);
    }
    return fclose(f) == 0;
}

/* Checks a config: spec against the user's config. */
static bool check_configured(struct model_endpoints *e, const struct model_endpoints_params *p,
                             const struct model_endpoint *ep) {
    const char *name = ep->spec + strlen(CONFIG_PREFIX);
    char err[1024];
    if (p->no_config) {
        fprintf(stderr, "%s: %s %s: this command takes a URL or file:PATH\n", p->command,
                ep->flag, ep->spec);
        return false;
    }
    if (!p->config) {
        fprintf(stderr, "%s: %s %s: config:MODEL needs --config FILE, the tandem.yaml that "
                        "declares MODEL\n", p->command, ep->flag, ep->spec);
        return false;
    }
    if (!e->cfg && config_load(p->config, &e->cfg, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "%s: %s\n", p->command, err);
        return false;
    }
    if (!config_find_model(e->cfg, name)) {
        fprintf(stderr, "%s: %s %s: %s declares no model \"%s\"\n", p->command, ep->flag,
                ep->spec, p->config, name);
        return false;
    }
    return true;
}

/* Sets each endpoint's model and tells which daemons are needed. */
static tandem_err classify(struct model_endpoints *e, const struct model_endpoints_params *p,
                    struct model_endpoint *eps, size_t n, bool *configured, bool *files) {
    for (size_t i = 0; i < n; i++) {
        struct model_endpoint *ep = &eps[i];
        if (is_url(ep->spec)) {
            ep->url = ep->spec;
        } else if (!strncmp(ep->spec, CONFIG_PREFIX, strlen(CONFIG_PREFIX))) {
            if (!check_configured(e, p, ep))
                return TANDEM_ERR_INVAL;
            ep->model = ep->spec + strlen(CONFIG_PREFIX);
            *configured = true;
        } else if (!strncmp(ep->spec, FILE_PREFIX, strlen(FILE_PREFIX))) {
            if (!(ep->model = add_file(e, p, ep)))
                return TANDEM_ERR_INVAL;
            *files = true;
        } else {
            fprintf(stderr, "%s: %s %s: expected an http:// or https:// URL, config:MODEL or "
                            "file:PATH\n", p->command, ep->flag, ep->spec);
            return TANDEM_ERR_INVAL;
        }
    }
    return TANDEM_OK;
}

static tandem_err start(const struct model_endpoints_params *p, const char *config,
                        struct private_daemon **out) {
    struct private_daemon_params dp = {.command = p->command, .config = config,
                                       .llama_server = p->llama_server, .verbose = p->verbose};
    return private_daemon_start(&dp, out);
}

tandem_err model_endpoints_start(const struct model_endpoints_params *p,
                                 struct model_endpoint *eps, size_t n,
                                 struct model_endpoints **out) {
    *out = NULL;
    struct model_endpoints *e = mem_calloc(1, sizeof *e);
    if (!e) {
        fprintf(stderr, "%s: out of memory\n", p->command);
        return TANDEM_ERR_NOMEM;
    }
    bool configured = false, files = false;
    char path[PATH_MAX];
    tandem_err rc = classify(e, p, eps, n, &configured, &files);
    if (!rc && configured)
        rc = start(p, p->config, &e->configured);
    if (!rc && files)
        rc = write_files_config(e, p->command, path, sizeof path)
                 ? start(p, path, &e->files) : TANDEM_ERR_IO;
    for (size_t i = 0; !rc && i < n; i++)
        if (!is_url(eps[i].spec))
            eps[i].url = private_daemon_url(strncmp(eps[i].spec, CONFIG_PREFIX, strlen(CONFIG_PREFIX))
                                                ? e->files : e->configured);
    if (rc || (!configured && !files)) {
        model_endpoints_free(e);
        return rc;
    }
    *out = e;
    return TANDEM_OK;
}

const char *model_endpoints_api_key(const struct model_endpoints *e) {
    return e && e->cfg && e->cfg->n_api_keys ? e->cfg->api_keys[0] : NULL;
}

void model_endpoints_free(struct model_endpoints *e) {
    if (!e)
        return;
    private_daemon_stop(e->configured, false);
    private_daemon_stop(e->files, false);
    if (e->dir[0])
        host_remove_tree(e->dir);
    config_free(e->cfg);
    mem_free(e);
}
