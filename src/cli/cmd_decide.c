/* cmd_decide.c: `tandem decide`: one pipeline request, for scripts and cron.
 *
 * The request goes to the daemon the config describes when one is listening
 * there. When nothing listens, decide starts a private `tandem serve` on the
 * same config, on a free loopback port, as its own child: the daemon's code
 * runs the pipeline (one implementation, one behaviour), starts only the
 * engines the pipeline needs, and stops them when decide stops it
 * (flow/private_daemon).
 *
 * Exit codes: 0 accepted, 3 rejected, 4 escalated, 1 any failure (the
 * message is on stderr), 2 usage or configuration error. */
#include "cli/cmd_decide.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/load_progress.h"
#include "flow/private_daemon.h"
#include "serve/config.h"
#include "eval/s1client.h"

#define EXIT_ACCEPTED 0
#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define EXIT_REJECTED 3
#define EXIT_ESCALATED 4

struct decide_opts {
    const char *config, *pipeline, *request_file, *state, *instructions, *llama_server;
    json_t *candidates;
    bool human, private_only, verbose;
    long timeout_s;
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem decide --config FILE --pipeline NAME\n"
            "                     (--request FILE | --state TEXT --candidate OPTION=DESCRIPTION...)\n"
            "                     [--instructions TEXT] [--human] [--timeout S] [--private] [--verbose]\n"
            "\n"
            "Runs one decide-then-verify pipeline request (docs/pipelines.md) and prints the\n"
            "answer as JSON on stdout. It uses the daemon listening at the config's address;\n"
            "when none is, it starts the engines itself (a private `tandem serve`), answers,\n"
            "and stops them.\n"
            "\n"
            "  --config FILE        the tandem.yaml that declares the pipeline\n"
            "  --pipeline NAME      the pipeline to run\n"
            "  --request FILE       the request body (JSON; - = stdin): state, candidates, ...\n"
            "  --state TEXT         the situation (instead of --request)\n"
            "  --candidate K=DESC   a candidate option and its description (repeat, at least 2)\n"
            "  --instructions TEXT  the decide question's instructions (default: the pipeline's)\n"
            "  --human              a readable summary instead of JSON\n"
            "  --timeout S          the whole request's deadline (default: limits.request_timeout)\n"
            "  --private            never use a running daemon\n"
            "  --verbose            show the private daemon's log on stderr\n"
            "\n"
            "exit codes: 0 accepted, 3 rejected, 4 escalated, 1 failure, 2 usage or configuration\n");
}

/* --- the request ------------------------------------------------------------------------- */

static bool add_candidate(struct decide_opts *o, const char *arg) {
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) {
        fprintf(stderr, "tandem decide: --candidate: expected OPTION=DESCRIPTION, got '%s'\n", arg);
        return false;
    }
    char key[256];
    snprintf(key, sizeof key, "%.*s", (int)(eq - arg), arg);
    if (!o->candidates)
        o->candidates = json_object();
    return json_object_set_new(o->candidates, key, json_string(eq + 1)) == 0;
}

/* The request body: the file, or one built from the flags. NULL after a message. */
static json_t *build_request(const struct decide_opts *o) {
    json_error_t je;
    if (o->request_file) {
        bool in = !strcmp(o->request_file, "-");
        json_t *req = in ? json_loadf(stdin, 0, &je) : json_load_file(o->request_file, 0, &je);
        if (!req)
            fprintf(stderr, "tandem decide: %s:%d:%d: %s\n", in ? "(stdin)" : o->request_file,
                    je.line, je.column, je.text);
        return req;
    }
    json_t *req = json_pack("{sssO}", "state", o->state, "candidates", o->candidates);
    if (req && o->instructions)
        json_object_set_new(req, "instructions", json_string(o->instructions));
    return req;
}

/* --- talking to a daemon ------------------------------------------------------------------- */

/* POSTs req to <base>/v1/pipelines/<name>. Returns the client's error
 * (TANDEM_ERR_REFUSED: nothing listens) with *status and *answer set on OK. */
static tandem_err post(const struct decide_opts *o, const struct config *cfg, const char *base,
                       const json_t *req, long *status, json_t **answer, char *err, size_t errlen) {
    char path[300];
    snprintf(path, sizeof path, "/v1/pipelines/%s", o->pipeline);
    struct s1client_params p = s1client_default_params();
    p.endpoint = base;
    p.path = path;
    p.api_key = cfg->n_api_keys ? cfg->api_keys[0] : "tandem-decide";
    /* the daemon keeps the deadline; the client waits a little longer for its 504 */
    char deadline[64];
    snprintf(deadline, sizeof deadline, "X-Tandem-Timeout-Ms: %ld", o->timeout_s * 1000);
    const char *const headers[] = {deadline, NULL};
    if (o->timeout_s > 0)
        p.headers = headers;
    p.timeout_ms = (o->timeout_s > 0 ? o->timeout_s * 1000 : cfg->request_timeout_ms) + 5000;
    struct s1client *c;
    tandem_err e = s1client_new(&p, &c, err, errlen);
    char *body = e == TANDEM_OK ? json_dumps(req, JSON_COMPACT) : NULL;
    struct load_watch *watch = body ? load_watch_start(base, p.api_key) : NULL;
    if (e == TANDEM_OK && body)
        e = s1client_post(c, body, strlen(body), status, answer, err, errlen);
    load_watch_stop(watch);
    free(body);
    s1client_free(c);
    return e;
}

/* --- the answer ---------------------------------------------------------------------------- */

static double num(const json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

static void print_answer_value(const json_t *a) {
    const char *type = json_string_value(json_object_get(a, "type"));
    if (type && !strcmp(type, "choice"))
        printf("%s", json_string_value(json_object_get(a, "choice")));
    else if (type && !strcmp(type, "score"))
        printf("%.2f", num(a, "score"));
    else
        printf("%.2f", num(a, "noul"));
}

static void print_probabilities(const json_t *choice) {
    const char *k;
    json_t *v;
    bool first = true;
    json_object_foreach(json_object_get(choice, "probabilities"), k, v) {
        printf("%s%s %.3f", first ? "" : ", ", k, json_number_value(v));
        first = false;
    }
    printf("; confidence %.2f\n", num(choice, "confidence"));
}

static void print_attempt(const json_t *at) {
    printf("attempt %lld: %s\n", (long long)json_integer_value(json_object_get(at, "attempt")),
           json_string_value(json_object_get(at, "candidate")));
    size_t i;
    json_t *st;
    json_array_foreach(json_object_get(at, "verify"), i, st) {
        printf("  %s:", json_string_value(json_object_get(st, "model")));
        const char *id;
        json_t *q;
        json_object_foreach(json_object_get(st, "questions"), id, q) {
            printf(" %s ", id);
            print_answer_value(json_object_get(q, "answer"));
            json_t *th = json_object_get(q, "threshold");
            if (json_is_string(th))
                printf(" (%s %s)", json_string_value(th),
                       json_is_true(json_object_get(q, "passed")) ? "passed" : "FAILED");
        }
        printf("\n");
    }
}

static void print_human(const json_t *a) {
    const json_t *d = json_object_get(a, "decide"), *t = json_object_get(a, "timing");
    const char *choice = json_string_value(json_object_get(a, "choice"));
    printf("verdict: %s%s%s\n", json_string_value(json_object_get(a, "verdict")),
           choice ? ": " : "", choice ? choice : "");
    printf("reason:  %s\n", json_string_value(json_object_get(a, "reason")));
    printf("decide (%s): ", json_string_value(json_object_get(d, "model")));
    print_probabilities(json_object_get(json_object_get(d, "answers"), CONFIG_DECIDE_CHOICE_ID));
    size_t i;
    json_t *at;
    json_array_foreach(json_object_get(a, "attempts"), i, at)
        print_attempt(at);
    printf("time:    %.2f s (queued %.2f s, loading %.2f s, running %.2f s)\n",
           num(t, "total_ms") / 1000, num(t, "queued_ms") / 1000, num(t, "loading_ms") / 1000,
           num(t, "running_ms") / 1000);
}

static int report(const struct decide_opts *o, long status, json_t *answer) {
    if (status != 200) {
        const char *msg = json_string_value(json_object_get(json_object_get(answer, "error"), "message"));
        fprintf(stderr, "tandem decide: HTTP %ld: %s\n", status, msg ? msg : "(no message)");
        return EXIT_FAILED;
    }
    if (o->human)
        print_human(answer);
    else
        json_dumpf(answer, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER), printf("\n");
    const char *v = json_string_value(json_object_get(answer, "verdict"));
    return !v ? EXIT_FAILED : !strcmp(v, "accepted") ? EXIT_ACCEPTED
           : !strcmp(v, "rejected")                  ? EXIT_REJECTED
                                                     : EXIT_ESCALATED;
}

/* --- main ------------------------------------------------------------------------------------- */

static int parse_args(int argc, char **argv, struct decide_opts *o) {
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},  {"pipeline", required_argument, NULL, 'p'},
        {"request", required_argument, NULL, 'r'}, {"state", required_argument, NULL, 's'},
        {"candidate", required_argument, NULL, 'k'}, {"instructions", required_argument, NULL, 'i'},
        {"human", no_argument, NULL, 'H'},         {"timeout", required_argument, NULL, 't'},
        {"private", no_argument, NULL, 'P'},       {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},          {0}};
    int c;
    char *end;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'c': o->config = optarg; break;
        case 'p': o->pipeline = optarg; break;
        case 'r': o->request_file = optarg; break;
        case 's': o->state = optarg; break;
        case 'k': if (!add_candidate(o, optarg)) return EXIT_USAGE; break;
        case 'i': o->instructions = optarg; break;
        case 'H': o->human = true; break;
        case 'P': o->private_only = true; break;
        case 'v': o->verbose = true; break;
        case 't':
            o->timeout_s = strtol(optarg, &end, 10);
            if (*end || o->timeout_s < 1 || o->timeout_s > 86400) {
                fprintf(stderr, "tandem decide: --timeout: expected seconds from 1 to 86400\n");
                return EXIT_USAGE;
            }
            break;
        case 'h': usage(stdout); return -1;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    bool by_flags = o->state || o->candidates || o->instructions;
    if (!o->config || !o->pipeline || optind != argc || (!o->request_file == !o->state) ||
        (o->request_file && by_flags) || (o->state && json_object_size(o->candidates) < 2)) {
        fprintf(stderr, "tandem decide: need --config, --pipeline, and either --request or "
                        "--state with at least two --candidate\n");
        usage(stderr);
        return EXIT_USAGE;
    }
    return 0;
}

/* Runs the request on the configured daemon, else on a private one. */
static int run(const struct decide_opts *o, const struct config *cfg, const json_t *req) {
    char url[300], err[1024];
    long status = 0;
    json_t *answer = NULL;
    config_listen_url(cfg, url, sizeof url);
    tandem_err e = TANDEM_ERR_REFUSED;
    if (url[0] && !o->private_only)
        e = post(o, cfg, url, req, &status, &answer, err, sizeof err);
    if (e == TANDEM_ERR_REFUSED) {
        struct private_daemon_params p = {.command = "tandem decide", .config = o->config,
                                          .llama_server = o->llama_server, .verbose = o->verbose};
        struct private_daemon *d;
        if (private_daemon_start(&p, &d) != TANDEM_OK)
            return EXIT_FAILED;
        e = post(o, cfg, private_daemon_url(d), req, &status, &answer, err, sizeof err);
        private_daemon_stop(d, e != TANDEM_OK || status >= 500);
    } else if (e == TANDEM_OK) {
        fprintf(stderr, "tandem decide: answered by the daemon at %s\n", url);
    }
    if (e != TANDEM_OK || !answer) {
        fprintf(stderr, "tandem decide: %s\n", err);
        json_decref(answer);
        return EXIT_FAILED;
    }
    int rc = report(o, status, answer);
    json_decref(answer);
    return rc;
}

int cmd_decide_main(int argc, char **argv, const char *llama_server) {
    struct decide_opts o = {.llama_server = llama_server};
    int rc = parse_args(argc, argv, &o);
    if (rc) {
        json_decref(o.candidates);
        return rc < 0 ? 0 : rc;
    }
    char err[1024];
    struct config *cfg = NULL;
    json_t *req = NULL;
    if (config_load(o.config, &cfg, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem decide: %s\n", err);
        rc = EXIT_USAGE;
    } else if (!config_find_pipeline(cfg, o.pipeline)) {
        fprintf(stderr, "tandem decide: %s has no pipeline named \"%s\"\n", o.config, o.pipeline);
        rc = EXIT_USAGE;
    } else if (!(req = build_request(&o))) {
        rc = EXIT_USAGE;
    } else {
        rc = run(&o, cfg, req);
    }
    json_decref(req);
    json_decref(o.candidates);
    config_free(cfg);
    return rc;
}
