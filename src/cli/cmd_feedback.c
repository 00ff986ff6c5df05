/* cmd_feedback.c: `tandem feedback REQUEST_ID ...`: how a decision went, told
 * to the daemon that answered it.
 *
 * Builds the body of POST /v1/feedback from flags (docs/serve.md, "Outcomes")
 * and prints what the daemon did with each label. --gold Q=ANSWER reads
 * ANSWER as JSON when it is JSON (true, 2, "x", {"target": ...}), else as a
 * plain string, so `--gold route=billing --gold refund=true --gold urgency=2`
 * says what it reads; --gold-json takes the whole gold object. The daemon is
 * reached as by `tandem ps` (cli_daemon). */
#include "cli/cmd_feedback.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli_daemon.h"

#define EXIT_FAILED 1
#define EXIT_USAGE 2

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem feedback REQUEST_ID [--url URL | --config FILE] [--node ID] [--replace]\n"
            "         (--gold QUESTION=ANSWER ... | --gold-json JSON | --outcome KEY | --outcome-none)\n"
            "\n"
            "Tells the daemon that answered request REQUEST_ID (its x-request-id) how the\n"
            "decision went (POST /v1/feedback): the right answers of its questions, or for a\n"
            "pipeline the candidate that was right. /v1/quality then scores the labelled\n"
            "requests, and `--data store:7d` replays them with these labels as gold.\n"
            "\n"
            "  --gold Q=ANSWER   the right answer of question Q: an option name, true/false\n"
            "                    (noul), a level (score), or a JSON gold value (with a target);\n"
            "                    repeat for more questions\n"
            "  --gold-json JSON  the whole gold object, question -> answer\n"
            "  --outcome KEY     a pipeline request: the candidate that was right\n"
            "  --outcome-none    a pipeline request: none of the candidates was right\n"
            "  --replace         change a label given before (else the daemon answers 409)\n"
            "  --url URL         the daemon (default: --config's listen address, else %s)\n"
            "  --config FILE     take the daemon's address from this tandem.yaml\n"
            "  --node ID         the node that answered (the answer's x-tandem-node), sent as\n"
            "                    that header: behind a gateway that routes /v1/feedback by it\n"
            "                    (docs/scale-out.md, Feedback in a fleet), --url is the gateway\n"
            "\n"
            "The API key, if the daemon wants one, is read from $TANDEM_API_KEY.\n"
            "Exit status: 0 the labels were kept, 1 the daemon could not be reached or\n"
            "refused them (the message says why), 2 usage.\n",
            CLI_DAEMON_DEFAULT_URL);
}

struct feedback_opts {
    const char *url, *config, *outcome, *node;
    bool outcome_none, replace;
    json_t *gold; /* owned */
};

/* Adds "Q=ANSWER" to o->gold. Returns false after saying why. */
static bool add_gold(struct feedback_opts *o, const char *arg) {
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) {
        fprintf(stderr, "tandem feedback: --gold %s: expected QUESTION=ANSWER\n", arg);
        return false;
    }
    json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
    if (!v)
        v = json_string(eq + 1);
    char q[512];
    snprintf(q, sizeof q, "%.*s", (int)(eq - arg), arg);
    return json_object_set_new(o->gold, q, v) == 0;
}

/* Parses the options. Returns 0, -1 (help shown) or EXIT_USAGE. */
static int parse(int argc, char **argv, struct feedback_opts *o) {
    enum { O_GOLD = 256, O_GOLD_JSON, O_OUTCOME, O_OUTCOME_NONE, O_REPLACE, O_URL, O_CONFIG,
           O_NODE };
    static const struct option opts[] = {
        {"gold", required_argument, NULL, O_GOLD},
        {"gold-json", required_argument, NULL, O_GOLD_JSON},
        {"outcome", required_argument, NULL, O_OUTCOME},
        {"outcome-none", no_argument, NULL, O_OUTCOME_NONE},
        {"replace", no_argument, NULL, O_REPLACE},
        {"url", required_argument, NULL, O_URL},
        {"config", required_argument, NULL, O_CONFIG},
        {"node", required_argument, NULL, O_NODE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_GOLD:
            if (!add_gold(o, optarg))
                return EXIT_USAGE;
            break;
        case O_GOLD_JSON: {
            json_t *g = json_loads(optarg, 0, NULL);
            if (!json_is_object(g) || json_object_update(o->gold, g)) {
                fprintf(stderr, "tandem feedback: --gold-json: expected a JSON object, "
                                "question -> answer\n");
                json_decref(g);
                return EXIT_USAGE;
            }
            json_decref(g);
            break;
        }
        case O_OUTCOME: o->outcome = optarg; break;
        case O_OUTCOME_NONE: o->outcome_none = true; break;
        case O_REPLACE: o->replace = true; break;
        case O_URL: o->url = optarg; break;
        case O_CONFIG: o->config = optarg; break;
        case O_NODE: o->node = optarg; break;
        case 'h': usage(stdout); return -1;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    int kinds = (json_object_size(o->gold) > 0) + (o->outcome != NULL) + o->outcome_none;
    const char *why = optind != argc - 1 ? "give one REQUEST_ID"
                      : kinds != 1 ? "give --gold (or --gold-json), --outcome or --outcome-none: one of them"
                      : o->url && o->config ? "give --url or --config, not both" : NULL;
    if (why) {
        fprintf(stderr, "tandem feedback: %s (see --help)\n", why);
        return EXIT_USAGE;
    }
    return 0;
}

/* "a, b" or "-". */
static void print_list(const char *what, const json_t *list) {
    size_t i;
    json_t *v;
    printf("  %-10s", what);
    json_array_foreach(list, i, v) printf("%s%s", i ? ", " : "", json_string_value(v));
    printf("%s\n", json_array_size(list) ? "" : "-");
}

int cmd_feedback_main(int argc, char **argv, const char *llama_server) {
    (void)llama_server;
    struct feedback_opts o = {.gold = json_object()};
    char base[512];
    int rc = o.gold ? parse(argc, argv, &o) : EXIT_FAILED;
    if (!rc)
        rc = cli_daemon_url(o.url, o.config, "feedback", base, sizeof base);
    if (rc) {
        json_decref(o.gold);
        return rc < 0 ? 0 : rc;
    }
    json_t *body = json_pack("{s:s, s:b}", "request_id", argv[optind], "replace", o.replace);
    if (json_object_size(o.gold))
        json_object_set(body, "gold", o.gold);
    else
        json_object_set_new(body, "outcome", o.outcome ? json_string(o.outcome) : json_null());
    char *text = json_dumps(body, JSON_COMPACT), node[200];
    snprintf(node, sizeof node, "x-tandem-node: %s", o.node ? o.node : "");
    const char *const headers[] = {node, NULL};
    json_t *answer = text ? cli_daemon_call("feedback", base, "/v1/feedback", text,
                                            o.node ? headers : NULL)
                          : NULL;
    if (answer) {
        printf("%s:\n", argv[optind]);
        print_list("labelled", json_object_get(answer, "labelled"));
        print_list("unchanged", json_object_get(answer, "unchanged"));
        print_list("replaced", json_object_get(answer, "replaced"));
    }
    free(text);
    json_decref(answer);
    json_decref(body);
    json_decref(o.gold);
    return answer ? 0 : EXIT_FAILED;
}
