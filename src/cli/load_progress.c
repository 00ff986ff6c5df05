/* load_progress.c: load progress lines for the command line.
 *
 * The watcher is a thread with its own HTTP client, so the command's own
 * request (a blocking libcurl call) needs no change: the thread polls
 * /v1/status, rewrites one stderr line ("\r" then erase to its end) while
 * some model is loading, and erases it once none is or when stopped. It
 * sleeps on a condition variable, so a stop takes effect at once. */
#include "cli/load_progress.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/host.h"
#include "base/mem.h"
#include "eval/s1client.h"

#define POLL_MS 250

bool load_progress_text(const json_t *model, char *out, size_t cap) {
    const json_t *p = json_object_get(model, "progress");
    const char *state = json_string_value(json_object_get(model, "state"));
    if (!state || strcmp(state, "loading") || !json_is_object(p))
        return false;
    const json_t *fraction = json_object_get(p, "fraction");
    char pct[16] = "";
    const char *phase = json_string_value(json_object_get(p, "phase"));
    if (json_is_number(fraction) && phase && !strcmp(phase, "reading weights"))
        snprintf(pct, sizeof pct, " %.0f%%", 100.0 * json_number_value(fraction));
    snprintf(out, cap, "loading %s: %s%s (%.1f s)",
             json_string_value(json_object_get(model, "name")), phase ? phase : "?", pct,
             (double)json_integer_value(json_object_get(p, "elapsed_ms")) / 1000.0);
    return true;
}

struct load_watch {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;
    struct s1client *client;
};

/* The progress of every loading model in status, "; "-joined; "" if none. */
static void status_line(const json_t *status, char *out, size_t cap) {
    size_t i, n = 0;
    const json_t *m;
    out[0] = '\0';
    json_array_foreach(json_object_get(status, "models"), i, m) {
        char one[256];
        if (load_progress_text(m, one, sizeof one) && n < cap)
            n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? "; " : "", one);
    }
}

static void poll_once(struct load_watch *w, bool *shown) {
    long status = 0;
    json_t *answer = NULL;
    char line[1024] = "";
    if (s1client_get(w->client, &status, &answer, NULL, 0) == TANDEM_OK && status == 200)
        status_line(answer, line, sizeof line);
    json_decref(answer);
    if (line[0] || *shown)
        fprintf(stderr, "\r\033[K%s", line);
    *shown = line[0] != '\0';
}

static void *watch(void *arg) {
    struct load_watch *w = arg;
    bool shown = false;
    pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        pthread_mutex_unlock(&w->lock);
        poll_once(w, &shown);
        pthread_mutex_lock(&w->lock);
        struct timespec until = host_wall_after_ms(POLL_MS);
        while (!w->stop && pthread_cond_timedwait(&w->wake, &w->lock, &until) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&w->lock);
    if (shown)
        fprintf(stderr, "\r\033[K");
    return NULL;
}

struct load_watch *load_watch_start(const char *base, const char *api_key) {
    if (!isatty(STDERR_FILENO))
        return NULL;
    struct load_watch *w = mem_calloc(1, sizeof *w);
    if (!w)
        return NULL;
    struct s1client_params p = s1client_default_params();
    p.endpoint = base;
    p.path = "/v1/status";
    p.api_key = api_key;
    p.timeout_ms = 2000;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    if (s1client_new(&p, &w->client, NULL, 0) != TANDEM_OK ||
        pthread_create(&w->thread, NULL, watch, w) != 0) {
        s1client_free(w->client);
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->lock);
        mem_free(w);
        return NULL;
    }
    return w;
}

void load_watch_stop(struct load_watch *w) {
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    s1client_free(w->client);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    mem_free(w);
}
