/* cmd_ps.c: `tandem ps`, `tandem load NAME`, `tandem unload NAME`: a running
 * daemon's models, and its admin routes, from the command line.
 *
 * All three talk to a daemon over HTTP (eval/s1client, libcurl): --url, else
 * the listen address of --config, else http://127.0.0.1:8090; the API key is
 * $TANDEM_API_KEY. `ps` reads GET /v1/status and prints one line per model
 * and the budget per device, like `ollama ps`; --json prints the same rows
 * as JSON and --watch redraws every second. Exit codes: 0 the daemon
 * answered, 1 it could not be reached or refused (the message says why),
 * 2 usage. */
#include "cli/cmd_ps.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/units.h"
#include "cli/cli_daemon.h"
#include "cli/load_progress.h"

#define EXIT_FAILED 1
#define EXIT_USAGE 2

struct ps_opts {
    const char *url, *config;
    bool json, watch;
};

static void usage(FILE *f, const char *cmd) {
    if (!strcmp(cmd, "ps"))
        fprintf(f, "usage: tandem ps [--url URL | --config FILE] [--json] [--watch]\n"
                   "\n"
                   "Shows a running daemon's models: state, device, memory planned and\n"
                   "measured, time until keep_alive unloads it, requests and loads, and the\n"
                   "budget of each device.\n");
    else
        fprintf(f, "usage: tandem %s NAME [--url URL | --config FILE]\n"
                   "\n"
                   "Asks a running daemon to %s the model NAME (POST /admin/models/NAME/%s).\n",
                cmd, cmd, cmd);
    fprintf(f, "\n"
               "  --url URL      the daemon (default: --config's listen address, else %s)\n"
               "  --config FILE  take the daemon's address from this tandem.yaml\n",
            CLI_DAEMON_DEFAULT_URL);
    if (!strcmp(cmd, "ps"))
        fprintf(f, "  --json         the rows as JSON\n"
                   "  --watch        redraw every second until interrupted\n");
    fprintf(f, "\nThe API key, if the daemon wants one, is read from $TANDEM_API_KEY.\n"
               "Exit status: 0 the daemon answered, 1 it could not be reached or refused,\n"
               "2 usage.\n");
}

/* --- ps ------------------------------------------------------------------------------------ */

static json_int_t int_of(const json_t *o, const char *key) {
    return json_integer_value(json_object_get(o, key));
}

/* A model's memory on its device, planned and measured (0 = not measured). */
static void model_bytes(const json_t *m, uint64_t *planned, uint64_t *measured) {
    bool gpu = strncmp(json_string_value(json_object_get(m, "device")), "gpu", 3) == 0;
    const char *key = gpu ? "gpu_bytes" : "host_bytes";
    *planned = (uint64_t)int_of(json_object_get(m, "planned"), key);
    *measured = (uint64_t)int_of(json_object_get(m, "measured"), key);
}

/* "4m 59s", "12s", "forever" or "-" (not resident, busy or pinned). */
static const char *until_text(const json_t *m, char *out, size_t cap) {
    const json_t *until = json_object_get(m, "until_ms");
    if (json_is_integer(until)) {
        long s = (long)((json_integer_value(until) + 999) / 1000);
        if (s >= 60)
            snprintf(out, cap, "%ldm %02lds", s / 60, s % 60);
        else
            snprintf(out, cap, "%lds", s);
    } else {
        bool kept = json_is_null(json_object_get(m, "keep_alive_ms")) ||
                    json_is_true(json_object_get(m, "pinned"));
        bool resident = !strcmp(json_string_value(json_object_get(m, "state")), "resident");
        snprintf(out, cap, "%s", resident && kept ? "forever" : "-");
    }
    return out;
}

/* A model's decision-cache hits as the table shows them ("off" when its
 * decisions are not cached, "-" for a remote model). */
static const char *cache_cell(const json_t *m, char *out, size_t cap) {
    const json_t *c = json_object_get(m, "cache");
    if (!c)
        snprintf(out, cap, "-");
    else if (!json_is_true(json_object_get(c, "enabled")))
        snprintf(out, cap, "off");
    else
        snprintf(out, cap, "%lld", (long long)int_of(c, "hits"));
    return out;
}

/* The decision cache's line under the table; nothing when the daemon has none. */
static void print_cache(const json_t *status) {
    const json_t *c = json_object_get(status, "cache");
    if (!c)
        return;
    if (!int_of(c, "max_bytes")) {
        printf("decision cache: off (cache.max_bytes: 0)\n");
        return;
    }
    char used[32], cap[32];
    units_format_bytes((uint64_t)int_of(c, "bytes"), used, sizeof used);
    units_format_bytes((uint64_t)int_of(c, "max_bytes"), cap, sizeof cap);
    printf("decision cache: %lld entries, %s of %s; %lld hits, %lld misses, %lld coalesced, "
           "%lld evicted\n", (long long)int_of(c, "entries"), used, cap,
           (long long)int_of(c, "hits"), (long long)int_of(c, "misses"),
           (long long)int_of(c, "coalesced"), (long long)int_of(c, "evictions"));
}

/* The rows ps shows, as JSON: what the table prints, in numbers. */
static json_t *ps_rows(const json_t *status) {
    json_t *models = json_array();
    size_t i;
    const json_t *m;
    json_array_foreach(json_object_get(status, "models"), i, m) {
        uint64_t planned, measured;
        model_bytes(m, &planned, &measured);
        json_array_append_new(
            models,
            json_pack("{s:O, s:O, s:O, s:O, s:I, s:o, s:O, s:I, s:I, s:I, s:I}", "name",
                      json_object_get(m, "name"), "state", json_object_get(m, "state"),
                      "progress", json_object_get(m, "progress"), "device",
                      json_object_get(m, "device"), "planned_bytes", (json_int_t)planned,
                      "measured_bytes", measured ? json_integer((json_int_t)measured) : json_null(),
                      "until_ms", json_object_get(m, "until_ms"), "running",
                      int_of(m, "running"), "queued", int_of(m, "queued"), "answered",
                      int_of(m, "answered"), "loads", int_of(m, "loads")));
        json_t *cache = json_object_get(m, "cache");
        json_object_set(json_array_get(models, i), "cache", cache ? cache : json_null());
    }
    json_t *budget = json_object_get(status, "budget");
    json_t *cache = json_object_get(status, "cache");
    return json_pack("{s:o, s:O, s:O, s:O}", "models", models, "devices",
                     json_object_get(budget, "devices"), "queue", json_object_get(status, "queue"),
                     "cache", cache ? cache : json_null());
}

static void print_table(const json_t *status) {
    printf("%-24s %-9s %-6s %10s %10s %9s %8s %8s %6s %7s\n", "NAME", "STATE", "DEVICE",
           "PLANNED", "MEASURED", "UNTIL", "RUN/QUE", "ANSWERED", "LOADS", "CACHED");
    size_t i;
    const json_t *m;
    json_array_foreach(json_object_get(status, "models"), i, m) {
        uint64_t planned, measured;
        model_bytes(m, &planned, &measured);
        char p[32], me[32], until[32], rq[24], cached[24];
        units_format_bytes(planned, p, sizeof p);
        if (measured)
            units_format_bytes(measured, me, sizeof me);
        else
            snprintf(me, sizeof me, "-");
        snprintf(rq, sizeof rq, "%lld/%lld", (long long)int_of(m, "running"),
                 (long long)int_of(m, "queued"));
        printf("%-24s %-9s %-6s %10s %10s %9s %8s %8lld %6lld %7s\n",
               json_string_value(json_object_get(m, "name")),
               json_string_value(json_object_get(m, "state")),
               json_string_value(json_object_get(m, "device")), p, me,
               until_text(m, until, sizeof until), rq, (long long)int_of(m, "answered"),
               (long long)int_of(m, "loads"), cache_cell(m, cached, sizeof cached));
    }
    const json_t *d;
    json_array_foreach(json_object_get(json_object_get(status, "budget"), "devices"), i, d) {
        char used[32], budget[32];
        units_format_bytes((uint64_t)int_of(d, "used_bytes"), used, sizeof used);
        units_format_bytes((uint64_t)int_of(d, "budget_bytes"), budget, sizeof budget);
        printf("budget %s: %s of %s planned in use%s\n",
               json_string_value(json_object_get(d, "device")), used, budget,
               json_is_true(json_object_get(d, "simulated")) ? " (simulated GPU)" : "");
    }
    const json_t *q = json_object_get(status, "queue");
    printf("queue: %lld waiting (depth %lld)\n", (long long)int_of(q, "waiting"),
           (long long)int_of(q, "depth"));
    print_cache(status);
    json_array_foreach(json_object_get(status, "models"), i, m) {
        char line[256];
        if (isatty(STDOUT_FILENO) && load_progress_text(m, line, sizeof line))
            printf("%s\n", line);
    }
}

static int show(const struct ps_opts *o, const char *base) {
    json_t *status = cli_daemon_call("ps", base, "/v1/status", NULL, NULL);
    if (!status)
        return EXIT_FAILED;
    if (o->json) {
        json_t *rows = ps_rows(status);
        json_dumpf(rows, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        fputc('\n', stdout);
        json_decref(rows);
    } else {
        print_table(status);
    }
    json_decref(status);
    fflush(stdout);
    return 0;
}

/* Parses the options; the non-option arguments are left from optind. */
static int parse(int argc, char **argv, const char *cmd, struct ps_opts *o) {
    static const struct option opts[] = {{"url", required_argument, NULL, 'u'},
                                         {"config", required_argument, NULL, 'c'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"watch", no_argument, NULL, 'w'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    bool ps = !strcmp(cmd, "ps");
    int c;
    optind = 0; /* GNU getopt: full re-initialisation for a second parse */
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'u': o->url = optarg; break;
        case 'c': o->config = optarg; break;
        case 'j': o->json = true; break;
        case 'w': o->watch = true; break;
        case 'h': usage(stdout, cmd); return -1;
        default: usage(stderr, cmd); return EXIT_USAGE;
        }
        if (!ps && (c == 'j' || c == 'w')) {
            fprintf(stderr, "tandem %s: --%s is an option of `tandem ps`\n", cmd,
                    c == 'j' ? "json" : "watch");
            return EXIT_USAGE;
        }
    }
    if (o->url && o->config) {
        fprintf(stderr, "tandem %s: give --url or --config, not both\n", cmd);
        return EXIT_USAGE;
    }
    return 0;
}

int cmd_ps_main(int argc, char **argv, const char *llama_server) {
    (void)llama_server;
    struct ps_opts o = {0};
    char base[512];
    int rc = parse(argc, argv, "ps", &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (optind < argc) {
        fprintf(stderr, "tandem ps: unexpected argument '%s'\n", argv[optind]);
        return EXIT_USAGE;
    }
    if ((rc = cli_daemon_url(o.url, o.config, "ps", base, sizeof base)))
        return rc;
    if (!o.watch)
        return show(&o, base);
    bool tty = isatty(STDOUT_FILENO);
    for (;;) {
        if (tty)
            fputs("\033[H\033[2J", stdout); /* home, clear */
        if ((rc = show(&o, base)))
            return rc;
        sleep(1);
    }
}

/* load and unload: POST /admin/models/NAME/(load|unload). */
static int admin(int argc, char **argv, const char *cmd) {
    struct ps_opts o = {0};
    char base[512], path[600];
    int rc = parse(argc, argv, cmd, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (optind != argc - 1) {
        usage(stderr, cmd);
        return EXIT_USAGE;
    }
    const char *name = argv[optind];
    if (!*name || strchr(name, '/') || strchr(name, '?') || strchr(name, '#') ||
        strchr(name, '%') || strchr(name, ' ')) {
        fprintf(stderr, "tandem %s: '%s' is not a model name\n", cmd, name);
        return EXIT_USAGE;
    }
    if ((rc = cli_daemon_url(o.url, o.config, cmd, base, sizeof base)))
        return rc;
    snprintf(path, sizeof path, "/admin/models/%s/%s", name, cmd);
    json_t *answer = cli_daemon_call(cmd, base, path, "", NULL);
    if (!answer)
        return EXIT_FAILED;
    printf("%s: %s\n", name, json_string_value(json_object_get(answer, "state")));
    json_decref(answer);
    return 0;
}

int cmd_load_main(int argc, char **argv, const char *llama_server) {
    (void)llama_server;
    return admin(argc, argv, "load");
}

int cmd_unload_main(int argc, char **argv, const char *llama_server) {
    (void)llama_server;
    return admin(argc, argv, "unload");
}
