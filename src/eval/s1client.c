/* s1client.c: POST /v1/systemone over libcurl's easy interface.
 *
 * One CURL easy handle per client, reused for every request so the
 * connection stays alive. The response is collected into a bounded mem_buf
 * (S1CLIENT_MAX_RESPONSE); a larger body aborts the transfer. curl_global_init
 * is not thread-safe, so it runs once under pthread_once before the first
 * handle. Signals are off (CURLOPT_NOSIGNAL) because clients run in worker
 * threads. A caller's cancel check rides on libcurl's progress callback, and
 * a stream (s1client_get_lines) goes to its consumer line by line through
 * the same bounded buffer. */
#include "eval/s1client.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/mem.h"

#define DEFAULT_TIMEOUT_MS 60000L
#define QUOTE_MAX 200 /* body bytes quoted in messages */

struct s1client {
    CURL *curl;
    struct curl_slist *headers;
    char *url;
    struct mem_buf body;
    char curl_err[CURL_ERROR_SIZE];
    long timeout_ms;
    bool (*cancelled)(void *user);
    void *cancel_user;
    bool was_cancelled;
    s1client_line_fn on_line; /* s1client_get_lines: the stream's consumer */
    void *line_user;
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_FAILED_INIT;

static void global_init(void) { global_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

struct s1client_params s1client_default_params(void) {
    return (struct s1client_params){.endpoint = NULL, .api_key = NULL,
                                    .timeout_ms = DEFAULT_TIMEOUT_MS};
}

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *user) {
    struct s1client *c = user;
    size_t n = size * nmemb;
    if (mem_buf_append(&c->body, ptr, n) != TANDEM_OK)
        return 0; /* makes curl fail the transfer with CURLE_WRITE_ERROR */
    return n;
}

/* libcurl's progress callback: a non-zero return abandons the exchange. */
static int on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow) {
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    struct s1client *c = user;
    c->was_cancelled = c->cancelled(c->cancel_user);
    return c->was_cancelled;
}

/* "<base><path>" from an endpoint with or without the path. */
static char *make_url(const char *endpoint, const char *path) {
    size_t n = strlen(endpoint);
    while (n && endpoint[n - 1] == '/')
        n--;
    size_t pl = strlen(path);
    bool has_path = n >= pl && !memcmp(endpoint + n - pl, path, pl);
    char *url = mem_alloc(n + pl + 1);
    if (!url)
        return NULL;
    memcpy(url, endpoint, n);
    if (has_path)
        url[n] = '\0';
    else
        memcpy(url + n, path, pl + 1);
    return url;
}

tandem_err s1client_new(const struct s1client_params *params, struct s1client **out, char *err,
                        size_t errlen) {
    *out = NULL;
    const char *ep = params->endpoint;
    if (!ep || (strncmp(ep, "http://", 7) && strncmp(ep, "https://", 8))) {
        tandem_errmsg(err, errlen, "endpoint \"%s\": not an http:// or https:// URL",
                      ep ? ep : "");
        return TANDEM_ERR_INVAL;
    }
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK) {
        tandem_errmsg(err, errlen, "libcurl: %s", curl_easy_strerror(global_rc));
        return TANDEM_ERR_HTTP;
    }
    struct s1client *c = mem_calloc(1, sizeof *c);
    if (!c)
        return TANDEM_ERR_NOMEM;
    mem_buf_init(&c->body, S1CLIENT_MAX_RESPONSE);
    c->timeout_ms = params->timeout_ms > 0 ? params->timeout_ms : DEFAULT_TIMEOUT_MS;
    tandem_err e = TANDEM_ERR_NOMEM;
    if (!(c->url = make_url(ep, params->path ? params->path : "/v1/systemone")))
        goto fail;
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (!h)
        goto fail;
    c->headers = h;
    if (!(h = curl_slist_append(c->headers, "Accept: application/json")))
        goto fail;
    /* no "Expect: 100-continue": servers that never send 100 would cost a second each */
    if (!(h = curl_slist_append(c->headers, "Expect:")))
        goto fail;
    if (params->api_key) {
        size_t n = strlen(params->api_key) + sizeof "Authorization: Bearer ";
        char *line = mem_alloc(n);
        if (!line)
            goto fail;
        snprintf(line, n, "Authorization: Bearer %s", params->api_key);
        h = curl_slist_append(c->headers, line);
        mem_free(line);
        if (!h)
            goto fail;
    }
    for (size_t i = 0; params->headers && params->headers[i]; i++)
        if (!(h = curl_slist_append(c->headers, params->headers[i])))
            goto fail;
    if (!(c->curl = curl_easy_init())) {
        tandem_errmsg(err, errlen, "libcurl: cannot create a handle");
        e = TANDEM_ERR_HTTP;
        goto fail;
    }
    if (params->unix_socket &&
        curl_easy_setopt(c->curl, CURLOPT_UNIX_SOCKET_PATH, params->unix_socket) != CURLE_OK)
        goto fail;
    curl_easy_setopt(c->curl, CURLOPT_URL, c->url);
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, c->curl_err);
    curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->curl, CURLOPT_TIMEOUT_MS, c->timeout_ms);
    curl_easy_setopt(c->curl, CURLOPT_USERAGENT, "tandem-eval");
    /* a decision request is never redirected; following one would resend the body */
    curl_easy_setopt(c->curl, CURLOPT_FOLLOWLOCATION, 0L);
    if ((c->cancelled = params->cancelled)) {
        c->cancel_user = params->cancel_user;
        curl_easy_setopt(c->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c->curl, CURLOPT_XFERINFODATA, c);
        curl_easy_setopt(c->curl, CURLOPT_NOPROGRESS, 0L);
    }
    *out = c;
    return TANDEM_OK;
fail:
    if (e == TANDEM_ERR_NOMEM)
        tandem_errmsg(err, errlen, "out of memory");
    s1client_free(c);
    return e;
}

void s1client_free(struct s1client *c) {
    if (!c)
        return;
    if (c->curl)
        curl_easy_cleanup(c->curl);
    curl_slist_free_all(c->headers);
    mem_buf_deinit(&c->body);
    mem_free(c->url);
    mem_free(c);
}

const char *s1client_url(const struct s1client *c) { return c->url; }

/* Copies up to QUOTE_MAX bytes of s[0..n) into out with control bytes as '.'. */
static void quote(const char *s, size_t n, char *out, size_t cap) {
    size_t m = n < QUOTE_MAX ? n : QUOTE_MAX;
    if (m >= cap)
        m = cap - 1;
    for (size_t i = 0; i < m; i++)
        out[i] = (unsigned char)s[i] < 0x20 ? '.' : s[i];
    out[m] = '\0';
}

/* Runs the exchange set up on c's handle and parses the answer. */
static tandem_err perform(struct s1client *c, long *status, json_t **response, char *err,
                          size_t errlen) {
    *status = 0;
    *response = NULL;
    c->body.len = 0;
    if (c->body.data)
        c->body.data[0] = '\0';
    c->curl_err[0] = '\0';
    c->was_cancelled = false;
    CURLcode rc = curl_easy_perform(c->curl);
    if (rc == CURLE_ABORTED_BY_CALLBACK && c->was_cancelled) {
        tandem_errmsg(err, errlen, "cancelled");
        return TANDEM_ERR_CANCELLED;
    }
    if (rc != CURLE_OK) {
        const char *why = c->curl_err[0] ? c->curl_err : curl_easy_strerror(rc);
        if (rc == CURLE_OPERATION_TIMEDOUT) {
            tandem_errmsg(err, errlen, "no answer within %ld ms", c->timeout_ms);
            return TANDEM_ERR_TIMEOUT;
        }
        if (rc == CURLE_WRITE_ERROR && c->body.len + CURL_MAX_WRITE_SIZE > c->body.max) {
            tandem_errmsg(err, errlen, "response larger than %u bytes", S1CLIENT_MAX_RESPONSE);
            return TANDEM_ERR_TOOBIG;
        }
        tandem_errmsg(err, errlen, "%s", why);
        return rc == CURLE_COULDNT_CONNECT ? TANDEM_ERR_REFUSED : TANDEM_ERR_HTTP;
    }
    curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, status);
    json_error_t je;
    *response = c->body.len ? json_loadb(c->body.data, c->body.len, 0, &je) : NULL;
    if (!*response) {
        char q[QUOTE_MAX + 1];
        quote(c->body.data ? c->body.data : "", c->body.len, q, sizeof q);
        tandem_errmsg(err, errlen, "HTTP %ld with a body that is not JSON: \"%s\"", *status,
                      c->body.len ? q : "(empty)");
    }
    return TANDEM_OK;
}

tandem_err s1client_post(struct s1client *c, const char *body, size_t len, long *status,
                         json_t **response, char *err, size_t errlen) {
    curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    return perform(c, status, response, err, errlen);
}

tandem_err s1client_get(struct s1client *c, long *status, json_t **response, char *err,
                        size_t errlen) {
    curl_easy_setopt(c->curl, CURLOPT_HTTPGET, 1L);
    return perform(c, status, response, err, errlen);
}

long s1client_retry_after(const struct s1client *c) {
    curl_off_t s = -1;
    if (curl_easy_getinfo(c->curl, CURLINFO_RETRY_AFTER, &s) != CURLE_OK || s <= 0)
        return -1;
    return (long)s;
}

/* A stream's bytes: each complete line goes to the consumer, the rest waits. */
static size_t on_stream_data(char *ptr, size_t size, size_t nmemb, void *user) {
    struct s1client *c = user;
    size_t n = size * nmemb;
    if (mem_buf_append(&c->body, ptr, n) != TANDEM_OK)
        return 0; /* a line longer than S1CLIENT_MAX_RESPONSE */
    size_t start = 0;
    for (size_t i = 0; i < c->body.len; i++) {
        if (c->body.data[i] != '\n')
            continue;
        size_t len = i - start;
        if (len && c->body.data[start + len - 1] == '\r')
            len--;
        if (!c->on_line(c->line_user, c->body.data + start, len))
            return 0;
        start = i + 1;
    }
    memmove(c->body.data, c->body.data + start, c->body.len - start);
    c->body.len -= start;
    return n;
}

tandem_err s1client_get_lines(struct s1client *c, s1client_line_fn on_line, void *user,
                              long *status, char *err, size_t errlen) {
    c->on_line = on_line;
    c->line_user = user;
    c->body.len = 0;
    c->curl_err[0] = '\0';
    c->was_cancelled = false;
    curl_easy_setopt(c->curl, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_stream_data);
    curl_easy_setopt(c->curl, CURLOPT_TIMEOUT_MS, 0L);
    CURLcode rc = curl_easy_perform(c->curl);
    curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c->curl, CURLOPT_TIMEOUT_MS, c->timeout_ms);
    *status = 0;
    curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, status);
    if (rc == CURLE_OK || rc == CURLE_WRITE_ERROR) /* ended by the server, or by on_line */
        return TANDEM_OK;
    if (rc == CURLE_ABORTED_BY_CALLBACK && c->was_cancelled)
        return TANDEM_ERR_CANCELLED;
    tandem_errmsg(err, errlen, "%s", c->curl_err[0] ? c->curl_err : curl_easy_strerror(rc));
    return rc == CURLE_COULDNT_CONNECT ? TANDEM_ERR_REFUSED : TANDEM_ERR_HTTP;
}
