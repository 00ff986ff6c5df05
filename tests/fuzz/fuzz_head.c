/* libFuzzer target for the server's head check (serve/http_head.c): the
 * input is the bytes a client sends on a connection, a request head first.
 *
 * http_head_end must find the same end whether the bytes come at once or in
 * two pieces (the server scans a growing copy, resuming where it stopped),
 * and that end must close an empty line. http_head_parse must then accept
 * or refuse without a crash or a leak; what it accepts must hold only what
 * http_head.h promises (a method evhttp knows, HTTP/1.0 or 1.1, a target
 * without spaces or control bytes, token header names, values without
 * control bytes but tabs and without the blanks evhttp trims), and must
 * parse again, to the same method, target, version and headers, once
 * written back in canonical form. Built by `make fuzz`; `make test` replays
 * the corpus (tests/fuzz/replay.c). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/http.h>

#include "serve/http_head.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "fuzz_head: broken: %s (line %d)\n", #cond, __LINE__);            \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

static bool is_tchar(unsigned char ch) {
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static void check_accepted(const struct http_head *h) {
    static const char *const methods[] = {"GET", "POST", "HEAD", "PUT", "DELETE",
                                          "OPTIONS", "CONNECT", "PATCH", "TRACE"};
    bool known = false;
    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++)
        known |= !strcmp(h->method, methods[i]);
    CHECK(known);
    CHECK(h->minor == 0 || h->minor == 1);
    CHECK(h->target && *h->target);
    for (const unsigned char *p = (const unsigned char *)h->target; *p; p++)
        CHECK(*p > ' ' && *p < 0x7f);
    const struct evkeyval *kv;
    TAILQ_FOREACH(kv, &h->headers, next) {
        CHECK(*kv->key);
        for (const unsigned char *p = (const unsigned char *)kv->key; *p; p++)
            CHECK(is_tchar(*p));
        size_t n = strlen(kv->value);
        for (size_t i = 0; i < n; i++)
            CHECK((unsigned char)kv->value[i] >= ' ' || kv->value[i] == '\t');
        CHECK(!strchr(kv->value, 0x7f));
        CHECK(!n || (kv->value[0] != ' ' && kv->value[n - 1] != ' ' && kv->value[n - 1] != '\t'));
    }
}

/* h written back in canonical form (CRLF, one space after each colon);
 * NULL on OOM. */
static char *canonical(const struct http_head *h, size_t *len) {
    size_t cap = strlen(h->method) + strlen(h->target) + 16;
    const struct evkeyval *kv;
    TAILQ_FOREACH(kv, &h->headers, next)
        cap += strlen(kv->key) + strlen(kv->value) + 4;
    char *out = malloc(cap + 3);
    if (!out)
        return NULL;
    size_t n = (size_t)sprintf(out, "%s %s HTTP/1.%d\r\n", h->method, h->target, h->minor);
    TAILQ_FOREACH(kv, &h->headers, next)
        n += (size_t)sprintf(out + n, "%s: %s\r\n", kv->key, kv->value);
    n += (size_t)sprintf(out + n, "\r\n");
    *len = n;
    return out;
}

static void check_round_trip(const struct http_head *h) {
    size_t len, scan = 0;
    char *text = canonical(h, &len);
    if (!text)
        return;
    CHECK(http_head_end(text, len, &scan) == len);
    struct http_head again;
    CHECK(http_head_parse(text, len, &again, NULL, 0) == TANDEM_OK);
    CHECK(!strcmp(again.method, h->method) && !strcmp(again.target, h->target));
    CHECK(again.minor == h->minor);
    const struct evkeyval *a = TAILQ_FIRST(&h->headers), *b = TAILQ_FIRST(&again.headers);
    for (; a && b; a = TAILQ_NEXT(a, next), b = TAILQ_NEXT(b, next))
        CHECK(!strcmp(a->key, b->key) && !strcmp(a->value, b->value));
    CHECK(!a && !b);
    http_head_deinit(&again);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *buf = (const char *)data;
    size_t scan = 0, end = http_head_end(buf, size, &scan);
    size_t cut = size ? data[0] % (size + 1) : 0, scan2 = 0;
    size_t first = http_head_end(buf, cut, &scan2);
    CHECK(first ? first == end : http_head_end(buf, size, &scan2) == end);
    if (!end)
        return 0;
    CHECK(end <= size && buf[end - 1] == '\n');
    CHECK(end == 1 || buf[end - 2] == '\n' || (end >= 3 && buf[end - 2] == '\r' &&
                                               buf[end - 3] == '\n') || end == 2);
    struct http_head h;
    char err[128];
    tandem_err e = http_head_parse(buf, end, &h, err, sizeof err);
    CHECK(e == TANDEM_OK || e == TANDEM_ERR_FORMAT || e == TANDEM_ERR_UNSUPPORTED ||
          e == TANDEM_ERR_NOMEM);
    if (e == TANDEM_OK) {
        check_accepted(&h);
        check_round_trip(&h);
    }
    http_head_deinit(&h);
    return 0;
}
