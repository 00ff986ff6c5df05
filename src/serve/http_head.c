/* http_head.c: a strict parser of one HTTP/1.x request head.
 *
 * The head is cut into lines the way evbuffer_readln(EVBUFFER_EOL_CRLF)
 * cuts them (a line ends at LF; one CR just before it is part of the end),
 * then the request line and each header line are checked byte by byte
 * against the narrow grammar http_head.h states. Every read is bounded by
 * the line's length; nothing is copied until a line has been checked, and
 * a header is added with evhttp_add_header, so the result is the same
 * evkeyvalq a handler reads. */
#include "serve/http_head.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/http.h>

#include "base/mem.h"

/* The methods evhttp knows (evhttp_parse_request_line); it answers the
 * others itself. */
static const char *const known_methods[] = {"GET",     "POST",    "HEAD",  "PUT",  "DELETE",
                                            "OPTIONS", "CONNECT", "PATCH", "TRACE"};

size_t http_head_end(const char *buf, size_t len, size_t *scan) {
    /* *scan is the start of a line not yet known to be complete */
    for (size_t p = *scan; p < len;) {
        const char *nl = memchr(buf + p, '\n', len - p);
        if (!nl)
            return 0;
        size_t end = (size_t)(nl - buf) + 1;
        if (end - p == 1 || (end - p == 2 && buf[p] == '\r'))
            return end; /* an empty line closes the head */
        p = *scan = end;
    }
    return 0;
}

/* RFC 9110 tchar: what a header name may hold. */
static bool is_tchar(unsigned char ch) {
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* A control byte: anything below a space but a tab, and DEL. */
static bool is_ctl(unsigned char ch) { return (ch < 0x20 && ch != '\t') || ch == 0x7f; }

static tandem_err fail(char *err, size_t errlen, tandem_err e, const char *what) {
    tandem_errmsg(err, errlen, "%s", what);
    return e;
}

/* "METHOD SP target SP HTTP/1.x" in line[len]. A method that is a token but not one evhttp
 * knows leaves h->method NULL and the rest is checked as for any other: the result is then
 * TANDEM_ERR_UNSUPPORTED when the line is otherwise good. */
static tandem_err parse_request_line(const char *line, size_t len, struct http_head *h, char *err,
                                     size_t errlen) {
    const char *sp1 = memchr(line, ' ', len);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', len - (size_t)(sp1 + 1 - line)) : NULL;
    if (!sp1 || !sp2)
        return fail(err, errlen, TANDEM_ERR_FORMAT, "bad request line");
    size_t mlen = (size_t)(sp1 - line), tlen = (size_t)(sp2 - sp1 - 1);
    const char *version = sp2 + 1;
    size_t vlen = len - (size_t)(version - line);
    for (size_t i = 0; i < sizeof known_methods / sizeof *known_methods; i++)
        if (strlen(known_methods[i]) == mlen && !memcmp(line, known_methods[i], mlen))
            h->method = known_methods[i];
    for (size_t i = 0; !h->method && i < mlen; i++)
        if (!is_tchar((unsigned char)line[i]))
            return fail(err, errlen, TANDEM_ERR_FORMAT, "bad request line");
    if (!mlen)
        return fail(err, errlen, TANDEM_ERR_FORMAT, "bad request line");
    if (vlen != 8 || memcmp(version, "HTTP/1.", 7) || (version[7] != '0' && version[7] != '1'))
        return fail(err, errlen, TANDEM_ERR_FORMAT, "bad HTTP version: expected HTTP/1.0 or 1.1");
    h->minor = version[7] - '0';
    if (!tlen)
        return fail(err, errlen, TANDEM_ERR_FORMAT, "bad request line");
    for (size_t i = 0; i < tlen; i++)
        if (is_ctl((unsigned char)sp1[1 + i]) || sp1[1 + i] == '\t' ||
            (unsigned char)sp1[1 + i] >= 0x80)
            return fail(err, errlen, TANDEM_ERR_FORMAT, "bad request-target");
    if (!(h->target = mem_alloc(tlen + 1)))
        return TANDEM_ERR_NOMEM;
    memcpy(h->target, sp1 + 1, tlen);
    h->target[tlen] = '\0';
    struct evhttp_uri *u = evhttp_uri_parse_with_flags(h->target, EVHTTP_URI_NONCONFORMANT);
    if (!u)
        return fail(err, errlen, TANDEM_ERR_FORMAT, "bad request-target");
    evhttp_uri_free(u);
    return h->method ? TANDEM_OK : TANDEM_ERR_UNSUPPORTED;
}

/* "name: value" in line[len], added to h->headers. */
static tandem_err parse_header_line(const char *line, size_t len, struct http_head *h, char *err,
                                    size_t errlen) {
    if (line[0] == ' ' || line[0] == '\t')
        return fail(err, errlen, TANDEM_ERR_FORMAT, "folded header line");
    const char *colon = memchr(line, ':', len);
    size_t nlen = colon ? (size_t)(colon - line) : 0;
    if (!nlen)
        return fail(err, errlen, TANDEM_ERR_FORMAT, "bad header line");
    for (size_t i = 0; i < nlen; i++)
        if (!is_tchar((unsigned char)line[i]))
            return fail(err, errlen, TANDEM_ERR_FORMAT, "bad header name");
    const char *v = colon + 1, *end = line + len;
    for (const char *p = v; p < end; p++)
        if (is_ctl((unsigned char)*p))
            return fail(err, errlen, TANDEM_ERR_FORMAT, "control byte in a header value");
    while (v < end && *v == ' ')
        v++;
    while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    char *name = mem_alloc(nlen + 1), *value = mem_alloc((size_t)(end - v) + 1);
    tandem_err e = name && value ? TANDEM_OK : TANDEM_ERR_NOMEM;
    if (e == TANDEM_OK) {
        memcpy(name, line, nlen);
        name[nlen] = '\0';
        memcpy(value, v, (size_t)(end - v));
        value[end - v] = '\0';
        if (evhttp_add_header(&h->headers, name, value) != 0)
            e = TANDEM_ERR_NOMEM; /* the bytes were checked: only allocation can fail */
    }
    mem_free(name);
    mem_free(value);
    return e;
}

tandem_err http_head_parse(const char *head, size_t len, struct http_head *out, char *err,
                           size_t errlen) {
    *out = (struct http_head){0};
    TAILQ_INIT(&out->headers);
    bool first = true, unknown = false; /* an unknown method: refused once the head checks */
    for (size_t p = 0; p < len;) {
        const char *nl = memchr(head + p, '\n', len - p);
        if (!nl)
            return fail(err, errlen, TANDEM_ERR_FORMAT, "unterminated head");
        size_t end = (size_t)(nl - head), n = end - p;
        if (n && head[end - 1] == '\r')
            n--;
        if (!n && first) /* the empty line: the head is over */
            return fail(err, errlen, TANDEM_ERR_FORMAT, "empty request line");
        if (!n)
            return unknown ? fail(err, errlen, TANDEM_ERR_UNSUPPORTED, "unknown method")
                           : TANDEM_OK;
        for (size_t i = 0; i < n; i++)
            if (head[p + i] == '\0' || head[p + i] == '\r')
                return fail(err, errlen, TANDEM_ERR_FORMAT, "control byte in the head");
        tandem_err e = first ? parse_request_line(head + p, n, out, err, errlen)
                             : parse_header_line(head + p, n, out, err, errlen);
        if (first && e == TANDEM_ERR_UNSUPPORTED)
            unknown = true, e = TANDEM_OK;
        if (e != TANDEM_OK)
            return e;
        first = false;
        p = end + 1;
    }
    return fail(err, errlen, TANDEM_ERR_FORMAT, "unterminated head");
}

void http_head_deinit(struct http_head *h) {
    if (h->headers.tqh_last) /* initialised */
        evhttp_clear_headers(&h->headers);
    mem_free(h->target);
    *h = (struct http_head){0};
}
