/* curl_loop.c: libcurl's multi socket interface on libevent.
 *
 * libcurl says which sockets to watch (sock_cb: one struct event per socket,
 * kept on l->socks and attached to the socket with curl_multi_assign) and
 * when to wake it (timer_cb: one evtimer); those events call
 * curl_multi_socket_action and then drain curl_multi_info_read (drain), which
 * takes each finished transfer out of the multi handle and hands it to the
 * owner's done callback. Nothing blocks, and nothing is called back from
 * inside curl_loop_add: libcurl only arms the timer there.
 *
 * Invariant: every struct sock on l->socks is a socket libcurl currently
 * watches; curl_loop_free releases those left after curl_multi_cleanup. */
#include "serve/curl_loop.h"

#include "base/mem.h"

struct sock { /* one socket libcurl asked us to watch */
    struct curl_loop *l;
    curl_socket_t fd;
    struct event *ev;
    struct sock *prev, *next;
};

struct curl_loop {
    struct event_base *base;
    CURLM *multi;
    struct event *timer; /* libcurl's timeout */
    struct sock *socks;
    curl_loop_done_fn done;
    void *user;
};

/* Hands every finished transfer to the owner. */
static void drain(struct curl_loop *l) {
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(l->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        CURL *e = msg->easy_handle;
        CURLcode rc = msg->data.result;
        curl_multi_remove_handle(l->multi, e);
        l->done(e, rc, l->user);
    }
}

static void on_sock_event(evutil_socket_t fd, short what, void *arg) {
    struct curl_loop *l = arg;
    int running;
    int action = (what & EV_READ ? CURL_CSELECT_IN : 0) | (what & EV_WRITE ? CURL_CSELECT_OUT : 0);
    curl_multi_socket_action(l->multi, fd, action, &running);
    drain(l);
}

static void on_curl_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct curl_loop *l = arg;
    int running;
    curl_multi_socket_action(l->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    drain(l);
}

static void sock_free(struct sock *s) {
    struct curl_loop *l = s->l;
    if (s->prev)
        s->prev->next = s->next;
    else
        l->socks = s->next;
    if (s->next)
        s->next->prev = s->prev;
    if (s->ev)
        event_free(s->ev);
    mem_free(s);
}

static struct sock *sock_new(struct curl_loop *l, curl_socket_t fd) {
    struct sock *s = mem_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->l = l;
    s->fd = fd;
    if (!(s->ev = event_new(l->base, fd, EV_READ | EV_PERSIST, on_sock_event, l))) {
        mem_free(s);
        return NULL;
    }
    s->next = l->socks;
    if (l->socks)
        l->socks->prev = s;
    l->socks = s;
    curl_multi_assign(l->multi, fd, s);
    return s;
}

/* CURLMOPT_SOCKETFUNCTION: watch fd for what libcurl asks, or stop. */
static int sock_cb(CURL *e, curl_socket_t fd, int what, void *userp, void *socketp) {
    (void)e;
    struct curl_loop *l = userp;
    struct sock *s = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (s) {
            curl_multi_assign(l->multi, fd, NULL);
            sock_free(s);
        }
        return 0;
    }
    if (!s && !(s = sock_new(l, fd)))
        return -1;
    short flags = EV_PERSIST | (what & CURL_POLL_IN ? EV_READ : 0) |
                  (what & CURL_POLL_OUT ? EV_WRITE : 0);
    event_del(s->ev);
    event_assign(s->ev, l->base, fd, flags, on_sock_event, l);
    return event_add(s->ev, NULL) == 0 ? 0 : -1;
}

/* CURLMOPT_TIMERFUNCTION: (re)arm or stop the one timer; never acts itself. */
static int timer_cb(CURLM *multi, long ms, void *userp) {
    (void)multi;
    struct curl_loop *l = userp;
    if (ms < 0) {
        evtimer_del(l->timer);
        return 0;
    }
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    return evtimer_add(l->timer, &tv) == 0 ? 0 : -1;
}

struct curl_loop *curl_loop_new(struct event_base *base, curl_loop_done_fn done, void *user) {
    if (!base || !done || curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return NULL;
    struct curl_loop *l = mem_calloc(1, sizeof *l);
    if (!l) {
        curl_global_cleanup();
        return NULL;
    }
    *l = (struct curl_loop){.base = base, .done = done, .user = user};
    l->multi = curl_multi_init();
    l->timer = evtimer_new(base, on_curl_timer, l);
    if (!l->multi || !l->timer) {
        curl_loop_free(l);
        return NULL;
    }
    curl_multi_setopt(l->multi, CURLMOPT_SOCKETFUNCTION, sock_cb);
    curl_multi_setopt(l->multi, CURLMOPT_SOCKETDATA, l);
    curl_multi_setopt(l->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(l->multi, CURLMOPT_TIMERDATA, l);
    return l;
}

void curl_loop_free(struct curl_loop *l) {
    if (!l)
        return;
    if (l->multi)
        curl_multi_cleanup(l->multi); /* closes the cached connections */
    while (l->socks)
        sock_free(l->socks);
    if (l->timer)
        event_free(l->timer);
    mem_free(l);
    curl_global_cleanup();
}

bool curl_loop_add(struct curl_loop *l, CURL *easy) {
    return curl_multi_add_handle(l->multi, easy) == CURLM_OK;
}

void curl_loop_remove(struct curl_loop *l, CURL *easy) { curl_multi_remove_handle(l->multi, easy); }
