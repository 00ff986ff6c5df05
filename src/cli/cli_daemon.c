/* cli_daemon.c: a running daemon, from a client command.
 *
 * The address comes from --url, else the listen address of --config, else the
 * default; the exchange is eval/s1client's (libcurl), with the key from
 * $TANDEM_API_KEY, never argv. */
#include "cli/cli_daemon.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/s1client.h"
#include "serve/config.h"

int cli_daemon_url(const char *url, const char *config, const char *cmd, char *out, size_t cap) {
    if (url) {
        snprintf(out, cap, "%s", url);
        return 0;
    }
    if (!config) {
        snprintf(out, cap, "%s", CLI_DAEMON_DEFAULT_URL);
        return 0;
    }
    struct config *cfg;
    char err[1024];
    if (config_load(config, &cfg, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem %s: %s\n", cmd, err);
        return 2;
    }
    config_listen_url(cfg, out, cap);
    config_free(cfg);
    if (!out[0]) {
        fprintf(stderr, "tandem %s: %s listens on port 0 (any free port): give --url\n", cmd,
                config);
        return 2;
    }
    return 0;
}

json_t *cli_daemon_call(const char *cmd, const char *base, const char *path, const char *body,
                        const char *const *headers) {
    struct s1client_params p = s1client_default_params();
    p.endpoint = base;
    p.path = path;
    p.headers = headers;
    p.api_key = getenv("TANDEM_API_KEY");
    p.timeout_ms = 10000;
    struct s1client *c;
    char err[1024] = "";
    long status = 0;
    json_t *answer = NULL;
    tandem_err e = s1client_new(&p, &c, err, sizeof err);
    if (e == TANDEM_OK)
        e = body ? s1client_post(c, body, strlen(body), &status, &answer, err, sizeof err)
                 : s1client_get(c, &status, &answer, err, sizeof err);
    s1client_free(c);
    if (e != TANDEM_OK) {
        fprintf(stderr, "tandem %s: cannot reach the daemon at %s: %s\n", cmd, base, err);
        return NULL;
    }
    if (status / 100 != 2) {
        const char *msg = json_string_value(
            json_object_get(json_object_get(answer, "error"), "message"));
        fprintf(stderr, "tandem %s: %s%s answered %ld: %s\n", cmd, base, path, status,
                msg ? msg : err[0] ? err : "(no message)");
        json_decref(answer);
        return NULL;
    }
    if (!answer)
        fprintf(stderr, "tandem %s: %s%s: %s\n", cmd, base, path, err);
    return answer;
}
