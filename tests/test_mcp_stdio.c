/* Unit tests for mcp_stdio: the MCP bridge `tandem mcp` serves on stdio.
 *
 * Each test feeds lines to mcp_stdio_run from a temporary file or a pipe and
 * reads what it wrote (to a temporary file, or to a pipe awaited with poll
 * while the input stays open): the handshake and ping answered
 * in order, CRLF and a last line without its newline, a line over
 * MCP_STDIO_MAX_MESSAGE refused with docs/mcp.md's -32600 and the rest of
 * that line skipped, a tool call that reaches no daemon answered as a tool
 * error by its thread, and the stop flag ending the loop before any read.
 * The daemon's url is http://127.0.0.1:1, where nothing listens, so no test
 * needs a daemon. */
#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "flow/mcp_stdio.h"
#include "serve/mcp.h"

#define NOWHERE "http://127.0.0.1:1"

static struct mcp_stdio *bridge(volatile sig_atomic_t *stop) {
    struct mcp_stdio_params p = mcp_stdio_default_params();
    p.url = NOWHERE;
    p.stop = stop;
    struct mcp_stdio *s = mcp_stdio_new(&p);
    cr_assert_not_null(s);
    cr_assert_str_eq(mcp_stdio_url(s), NOWHERE);
    return s;
}

/* A temporary file holding text[len], positioned at its start. */
static int input_of(const char *text, size_t len) {
    FILE *f = tmpfile();
    cr_assert_not_null(f);
    int fd = dup(fileno(f));
    fclose(f);
    cr_assert(fd >= 0);
    for (size_t done = 0; done < len;) {
        ssize_t n = write(fd, text + done, len - done);
        cr_assert(n > 0);
        done += (size_t)n;
    }
    cr_assert_eq(lseek(fd, 0, SEEK_SET), 0);
    return fd;
}

/* Serves in[len] to a fresh bridge; returns the lines written, NULL-terminated
 * (free with free_lines). */
static char **serve(const char *in, size_t len, volatile sig_atomic_t *stop) {
    struct mcp_stdio *s = bridge(stop);
    int fd = input_of(in, len);
    FILE *out = tmpfile();
    cr_assert_not_null(out);
    mcp_stdio_run(s, fd, out);
    mcp_stdio_free(s);
    close(fd);
    rewind(out);
    size_t n = 0;
    char **lines = calloc(64, sizeof *lines);
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, out)) > 0) {
        cr_assert(n < 63, "too many lines");
        cr_assert_eq(line[got - 1], '\n', "every message ends its line: %s", line);
        line[got - 1] = '\0';
        lines[n++] = strdup(line);
    }
    free(line);
    fclose(out);
    return lines;
}

static void free_lines(char **lines) {
    for (size_t i = 0; lines[i]; i++)
        free(lines[i]);
    free(lines);
}

static size_t count(char **lines) {
    size_t n = 0;
    while (lines[n])
        n++;
    return n;
}

static json_t *parse(const char *text) {
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    cr_assert_not_null(j, "not JSON: %s: %s", je.text, text);
    return j;
}

static const json_t *get(const json_t *j, const char *key) { return json_object_get(j, key); }

Test(mcp_stdio, answers_initialize_and_ping_one_line_each_in_order) {
    static const char in[] =
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
        "\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}}}\n"
        "\n"
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\r\n"
        "{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}\r\n"
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}"; /* no newline at the end */
    char **lines = serve(in, sizeof in - 1, NULL);
    cr_assert_eq(count(lines), 3, "got %zu lines", count(lines));
    json_t *init = parse(lines[0]);
    cr_assert_eq(json_integer_value(get(init, "id")), 1);
    const json_t *r = get(init, "result");
    cr_assert_str_eq(json_string_value(get(r, "protocolVersion")), "2025-06-18");
    cr_assert_str_eq(json_string_value(get(get(r, "serverInfo"), "name")), "tandem");
    json_decref(init);
    cr_assert_str_eq(lines[1], "{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"result\":{}}");
    cr_assert_str_eq(lines[2], "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}");
    free_lines(lines);
}

Test(mcp_stdio, refuses_a_line_over_the_limit_and_reads_on) {
    static const char ping[] = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}\n";
    size_t big = MCP_STDIO_MAX_MESSAGE + 100000; /* the tail must be skipped, not parsed */
    size_t len = big + 1 + sizeof ping - 1;
    char *in = malloc(len);
    cr_assert_not_null(in);
    memset(in, 'x', big);
    in[big] = '\n';
    memcpy(in + big + 1, ping, sizeof ping - 1);
    char **lines = serve(in, len, NULL);
    free(in);
    cr_assert_eq(count(lines), 2, "got %zu lines", count(lines));
    json_t *e = parse(lines[0]);
    cr_assert(json_is_null(get(e, "id")));
    cr_assert_eq(json_integer_value(get(get(e, "error"), "code")), MCP_INVALID_REQUEST);
    cr_assert_str_eq(json_string_value(get(get(e, "error"), "message")),
                     "a message of more than 4194304 bytes (4194304 read so far): "
                     "tandem mcp reads at most 4 MiB per line");
    json_decref(e);
    cr_assert_str_eq(lines[1], "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}");
    free_lines(lines);
}

Test(mcp_stdio, a_line_of_the_limit_with_its_newline_is_read) {
    /* MCP_STDIO_MAX_MESSAGE bytes with the newline: the buffer is full, not over */
    static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\",\"params\":{\"_\":\"";
    static const char tail[] = "\"}}\n";
    size_t len = MCP_STDIO_MAX_MESSAGE;
    char *in = malloc(len);
    cr_assert_not_null(in);
    memset(in, 'y', len);
    memcpy(in, head, sizeof head - 1);
    memcpy(in + len - (sizeof tail - 1), tail, sizeof tail - 1);
    char **lines = serve(in, len, NULL);
    free(in);
    cr_assert_eq(count(lines), 1, "got %zu lines", count(lines));
    cr_assert_str_eq(lines[0], "{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{}}");
    free_lines(lines);
}

Test(mcp_stdio, the_stop_flag_ends_serving_before_any_line) {
    static const char in[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n";
    volatile sig_atomic_t stop = SIGTERM;
    char **lines = serve(in, sizeof in - 1, &stop);
    cr_assert_eq(count(lines), 0, "answered after a stop: %s", lines[0]);
    free_lines(lines);
}

/* --- a tool call on its own thread --------------------------------------------------------- */

struct run_args {
    struct mcp_stdio *s;
    int fd;
    FILE *out;
};

static void *run_thread(void *arg) {
    struct run_args *a = arg;
    mcp_stdio_run(a->s, a->fd, a->out);
    return NULL;
}

Test(mcp_stdio, a_call_that_reaches_no_daemon_is_answered_as_a_tool_error, .timeout = 30) {
    struct mcp_stdio *s = bridge(NULL);
    cr_assert_not(mcp_stdio_refresh_catalog(s), "nothing listens at " NOWHERE);
    int p[2], o[2];
    cr_assert_eq(pipe(p), 0);
    cr_assert_eq(pipe(o), 0);
    struct run_args a = {.s = s, .fd = p[0], .out = fdopen(o[1], "w")};
    cr_assert_not_null(a.out);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, run_thread, &a), 0);
    static const char call[] = "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\","
                               "\"params\":{\"name\":\"status\",\"arguments\":{}}}\n";
    cr_assert_eq(write(p[1], call, sizeof call - 1), (ssize_t)(sizeof call - 1));
    /* the answer comes from the call's thread while the input stays open */
    char buf[8192];
    size_t n = 0;
    struct pollfd pfd = {.fd = o[0], .events = POLLIN};
    while (!memchr(buf, '\n', n) && n < sizeof buf - 1 && poll(&pfd, 1, 20000) == 1) {
        ssize_t k = read(o[0], buf + n, sizeof buf - 1 - n);
        cr_assert(k > 0, "the output ended before the answer");
        n += (size_t)k;
    }
    close(p[1]);
    cr_assert_eq(pthread_join(t, NULL), 0);
    mcp_stdio_free(s);
    fclose(a.out);
    close(p[0]);
    for (ssize_t k; n < sizeof buf - 1 && (k = read(o[0], buf + n, sizeof buf - 1 - n)) > 0;)
        n += (size_t)k; /* whatever else it wrote before the input ended */
    close(o[0]);
    cr_assert(n > 0, "no answer");
    buf[n] = '\0';
    char *nl = strchr(buf, '\n');
    cr_assert_not_null(nl);
    cr_assert_eq(nl[1], '\0', "one line only: %s", buf);
    *nl = '\0';
    json_t *msg = parse(buf);
    cr_assert_eq(json_integer_value(get(msg, "id")), 5);
    cr_assert(json_is_true(get(get(msg, "result"), "isError")), "%s", buf);
    json_decref(msg);
}
