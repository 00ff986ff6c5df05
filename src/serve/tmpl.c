/* tmpl.c: the pipeline template language (grammar and contract in tmpl.h).
 *
 * Compiling copies the text once and cuts it into parts: literal runs and
 * references. A part is a kind plus a byte range of that copy (the literal
 * itself, or the <id> of decide.<id> / verify.<id>), so a template costs three
 * allocations however many holes it has, and rendering is one pass over the
 * parts appending to the caller's mem_buf: every value goes straight into it,
 * JSON through json_dump_callback (compact, keys in insertion order), so the
 * buffer's hard maximum stops an oversized rendering as soon as it is passed.
 *
 * Lexing is deliberately dumb, so that a template means what it looks like:
 *   - a hole opens at the first "{{" and closes at the first "}}" after it;
 *     there is no escape and no nesting ("{{{state}}}" is the reference
 *     "{state"; a reference, and so an id, can never contain "}}");
 *   - "}}" outside a hole, and single braces, are literal text;
 *   - whitespace (space, \t, \n, \v, \f, \r) is ignored at both ends of a
 *     reference, and around "[", "decide.choice" and "]" in
 *     candidates[decide.choice]; nowhere else ("decide. x" names the
 *     question " x").
 * Resolving a reference, in this order:
 *   1. the built-in names, decide.choice/confidence/probability included
 *      (they win over an extra decide question of the same name);
 *   2. decide.<id>: <id> (the exact rest) must be in scope->decide_ids; when
 *      the decide stage declares no question at all, a decide.<id> that is not
 *      a built-in is an unknown reference (most likely a misspelt built-in),
 *      otherwise "decide.<id>: no such decide question";
 *   3. verify.<id>: <id> must be in scope->verify_ids, else "verify.<id>: not
 *      answered before this stage";
 *   4. anything else is an unknown reference, and the message lists what this
 *      scope accepts, decide and verify ids spelt out.
 * Only a reference that exists is then checked against scope->decided, so a
 * misspelling is reported as one even in a decide stage.
 *
 * Rendering: a string renders as is; any other JSON value as compact JSON;
 * a description that is null renders as "". In {{candidates}} a line is
 * "- option: description\n", or "- option\n" when the description renders
 * empty (null or ""), so that no line ends in ": ". An answer renders by its
 * "type" (its "choice" as is, "%.2f" of its "noul" or "score"); an answer
 * without "type" by whichever of those it carries. Numbers go through
 * snprintf, which is locale-independent here because tandem never calls
 * setlocale. */
#include "serve/tmpl.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/utf8.h"

enum part_kind {
    PART_TEXT,         /* the range is literal text */
    PART_STATE,
    PART_INSTRUCTIONS,
    PART_CANDIDATES,
    PART_CANDIDATE,    /* candidates[decide.choice] */
    PART_CHOICE,
    PART_CONFIDENCE,
    PART_PROBABILITY,
    PART_DECIDE,       /* the range is the question id */
    PART_VERIFY,       /* the range is the question id */
    PART_ATTEMPT,
};

struct part {
    enum part_kind kind;
    size_t off, len; /* a range of tmpl.text; unused by the fixed references */
};

struct tmpl {
    char *text;         /* the compiled text, owned */
    struct part *parts; /* owned, n_parts of cap */
    size_t n_parts, cap;
    size_t n_refs; /* parts that are not PART_TEXT */
};

/* The fixed references: their names, and whether they need a decide answer. */
static const struct {
    const char *name;
    enum part_kind kind;
    bool decided;
} builtins[] = {
    {"state", PART_STATE, false},
    {"instructions", PART_INSTRUCTIONS, false},
    {"candidates", PART_CANDIDATES, false},
    {"candidates[decide.choice]", PART_CANDIDATE, true},
    {"decide.choice", PART_CHOICE, true},
    {"decide.confidence", PART_CONFIDENCE, true},
    {"decide.probability", PART_PROBABILITY, true},
    {"attempt", PART_ATTEMPT, false},
};
#define N_BUILTINS (sizeof builtins / sizeof builtins[0])
#define DECIDE "decide."
#define VERIFY "verify."

/* --- messages ------------------------------------------------------------- */

/* The caller's optional message buffer and how much of it is written. */
struct out {
    char *err;
    size_t errlen, used;
};

/* Appends to the message; a message that does not fit ends on a whole
 * character. */
__attribute__((format(printf, 2, 3))) static void say(struct out *o, const char *fmt, ...) {
    if (!o->err || !o->errlen)
        return;
    if (o->used + 1 >= o->errlen) {
        o->err[o->errlen - 1] = '\0'; /* full, or errlen 1: only the terminator fits */
        return;
    }
    size_t room = o->errlen - o->used;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->err + o->used, room, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < room) {
        o->used += (size_t)n;
        return;
    }
    o->used = o->errlen - 1;
    tandem_utf8_trim(o->err, o->used);
}

/* --- lexing --------------------------------------------------------------- */

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Narrows [*s, *s + *len) to drop whitespace at both ends. */
static void trim(const char **s, size_t *len) {
    while (*len && is_space(**s))
        (*s)++, (*len)--;
    while (*len && is_space((*s)[*len - 1]))
        (*len)--;
}

static bool equals(const char *s, size_t len, const char *word) {
    return strlen(word) == len && !memcmp(s, word, len);
}

static bool has_prefix(const char *s, size_t len, const char *prefix) {
    size_t n = strlen(prefix);
    return len >= n && !memcmp(s, prefix, n);
}

/* Whether the trimmed reference s is candidates[decide.choice], with
 * whitespace allowed around its tokens. */
static bool is_candidate_index(const char *s, size_t len) {
    static const char head[] = "candidates";
    if (!has_prefix(s, len, head) || s[len - 1] != ']')
        return false;
    const char *p = s + sizeof head - 1;
    size_t n = len - (sizeof head - 1) - 1; /* up to the final ']' */
    trim(&p, &n);
    if (!n || *p != '[')
        return false;
    p++, n--;
    trim(&p, &n);
    return equals(p, n, "decide.choice");
}

/* Whether id[0..len) is one of the NULL-terminated ids (NULL = none). */
static bool listed(const char *const *ids, const char *id, size_t len) {
    for (; ids && *ids; ids++)
        if (equals(id, len, *ids))
            return true;
    return false;
}

/* Whether decide.<id> is a built-in, which the id can then never be
 * referenced past. */
static bool shadowed(const char *id) {
    for (size_t i = 0; i < N_BUILTINS; i++)
        if (!strncmp(builtins[i].name, DECIDE, strlen(DECIDE)) &&
            !strcmp(builtins[i].name + strlen(DECIDE), id))
            return true;
    return false;
}

/* --- compiling ------------------------------------------------------------ */

static tandem_err add_part(struct tmpl *t, enum part_kind kind, size_t off, size_t len) {
    if (mem_array_grow((void **)&t->parts, &t->cap, t->n_parts + 1, sizeof *t->parts,
                       SIZE_MAX) != TANDEM_OK)
        return TANDEM_ERR_NOMEM;
    t->parts[t->n_parts++] = (struct part){kind, off, len};
    t->n_refs += kind != PART_TEXT;
    return TANDEM_OK;
}

/* Lists what scope accepts, after "(known: ". */
static void say_known(struct out *o, const struct tmpl_scope *sc) {
    const char *sep = "";
    for (size_t i = 0; i < N_BUILTINS; i++) {
        if (builtins[i].kind == PART_ATTEMPT || (builtins[i].decided && !sc->decided) ||
            (builtins[i].kind == PART_INSTRUCTIONS && sc->renders_instructions))
            continue;
        say(o, "%s%s", sep, builtins[i].name);
        sep = ", ";
    }
    for (const char *const *id = sc->decide_ids; sc->decided && id && *id; id++)
        if (**id && !shadowed(*id))
            say(o, ", " DECIDE "%s", *id);
    for (const char *const *id = sc->verify_ids; id && *id; id++)
        if (**id)
            say(o, ", " VERIFY "%s", *id);
    say(o, ", attempt)");
}

static tandem_err unknown(struct out *o, const char *s, size_t len, size_t col,
                          const struct tmpl_scope *sc) {
    say(o, "unknown reference {{%.*s}} at column %zu (known: ", (int)len, s, col);
    say_known(o, sc);
    return TANDEM_ERR_FORMAT;
}

/* Resolves a built-in s[0..len) into p->kind; false when s is none. */
static bool resolve_builtin(const char *s, size_t len, struct part *p, bool *decided) {
    for (size_t i = 0; i < N_BUILTINS; i++) {
        if (equals(s, len, builtins[i].name)) {
            p->kind = builtins[i].kind, *decided = builtins[i].decided;
            return true;
        }
    }
    if (!is_candidate_index(s, len))
        return false;
    p->kind = PART_CANDIDATE, *decided = true;
    return true;
}

/* Resolves decide.<id> or verify.<id> (s[0..len), at text[p->off]) into *p.
 * TANDEM_ERR_NOTFOUND: s is neither, an unknown reference. */
static tandem_err resolve_question(const char *s, size_t len, const struct tmpl_scope *sc,
                                   struct out *o, struct part *p, bool *decided) {
    size_t nd = strlen(DECIDE), nv = strlen(VERIFY);
    if (has_prefix(s, len, DECIDE) && len > nd) {
        if (listed(sc->decide_ids, s + nd, len - nd)) {
            *p = (struct part){PART_DECIDE, p->off + nd, len - nd};
            *decided = true;
            return TANDEM_OK;
        }
        if (!sc->decide_ids || !*sc->decide_ids)
            return TANDEM_ERR_NOTFOUND; /* no questions: likely a misspelt built-in */
        say(o, "%.*s: no such decide question", (int)len, s);
        return TANDEM_ERR_FORMAT;
    }
    if (has_prefix(s, len, VERIFY) && len > nv) {
        if (listed(sc->verify_ids, s + nv, len - nv)) {
            *p = (struct part){PART_VERIFY, p->off + nv, len - nv};
            return TANDEM_OK;
        }
        say(o, "%.*s: not answered before this stage", (int)len, s);
        return TANDEM_ERR_FORMAT;
    }
    return TANDEM_ERR_NOTFOUND;
}

/* Resolves the trimmed reference text[off..off+len), whose hole opens at
 * column col, into *p. */
static tandem_err resolve(const char *text, size_t off, size_t len, size_t col,
                          const struct tmpl_scope *sc, struct out *o, struct part *p) {
    const char *s = text + off;
    bool decided = false;
    *p = (struct part){PART_TEXT, off, len};
    if (!resolve_builtin(s, len, p, &decided)) {
        tandem_err e = resolve_question(s, len, sc, o, p, &decided);
        if (e == TANDEM_ERR_NOTFOUND)
            return unknown(o, s, len, col, sc);
        if (e)
            return e;
    }
    if (p->kind == PART_INSTRUCTIONS && sc->renders_instructions) {
        say(o, "{{instructions}} at column %zu refers to itself (this template is the "
               "instructions used when a request brings none)", col);
        return TANDEM_ERR_FORMAT;
    }
    if (decided && !sc->decided) {
        if (p->kind == PART_CANDIDATE)
            say(o, "candidates[decide.choice] is only known in verify stages");
        else
            say(o, "%.*s is only known in verify stages", (int)len, s);
        return TANDEM_ERR_FORMAT;
    }
    return TANDEM_OK;
}

/* Compiles the hole whose "{{" is at text[open] and whose "}}" is at
 * text[close]. */
static tandem_err add_hole(struct tmpl *t, size_t open, size_t close,
                           const struct tmpl_scope *sc, struct out *o) {
    const char *s = t->text + open + 2;
    size_t len = close - open - 2;
    trim(&s, &len);
    if (!len) {
        say(o, "empty reference {{}} at column %zu", open + 1);
        return TANDEM_ERR_FORMAT;
    }
    struct part p;
    tandem_err e = resolve(t->text, (size_t)(s - t->text), len, open + 1, sc, o, &p);
    return e ? e : add_part(t, p.kind, p.off, p.len);
}

static tandem_err parse(struct tmpl *t, const struct tmpl_scope *sc, struct out *o) {
    const char *text = t->text;
    size_t lit = 0; /* where the current literal run starts */
    const char *open;
    while ((open = strstr(text + lit, "{{")) != NULL) {
        size_t at = (size_t)(open - text);
        const char *close = strstr(open + 2, "}}");
        if (!close) {
            say(o, "{{ at column %zu is never closed", at + 1);
            return TANDEM_ERR_FORMAT;
        }
        tandem_err e = at > lit ? add_part(t, PART_TEXT, lit, at - lit) : TANDEM_OK;
        if (!e)
            e = add_hole(t, at, (size_t)(close - text), sc, o);
        if (e)
            return e;
        lit = (size_t)(close - text) + 2;
    }
    size_t end = lit + strlen(text + lit);
    return end > lit ? add_part(t, PART_TEXT, lit, end - lit) : TANDEM_OK;
}

tandem_err tmpl_compile(const char *text, const struct tmpl_scope *scope, struct tmpl **out,
                        char *err, size_t errlen) {
    static const struct tmpl_scope none = {0};
    struct out o = {err, errlen, 0};
    *out = NULL;
    if (!text) {
        say(&o, "no template text");
        return TANDEM_ERR_INVAL;
    }
    struct tmpl *t = mem_calloc(1, sizeof *t);
    if (t)
        t->text = mem_strdup(text);
    tandem_err e = t && t->text ? parse(t, scope ? scope : &none, &o) : TANDEM_ERR_NOMEM;
    if (e == TANDEM_ERR_NOMEM)
        say(&o, "%s", tandem_strerror(e));
    if (e) {
        tmpl_free(t);
        return e;
    }
    *out = t;
    return TANDEM_OK;
}

void tmpl_free(struct tmpl *t) {
    if (!t)
        return;
    mem_free(t->parts);
    mem_free(t->text);
    mem_free(t);
}

bool tmpl_is_literal(const struct tmpl *t) {
    return !t || t->n_refs == 0;
}

/* --- rendering ------------------------------------------------------------ */

/* json_dump_callback's sink: the caller's buffer, and why it refused. */
struct sink {
    struct mem_buf *b;
    tandem_err e;
};

static int collect(const char *buf, size_t size, void *data) {
    struct sink *k = data;
    k->e = mem_buf_append(k->b, buf, size);
    return k->e ? -1 : 0;
}

static tandem_err put(struct mem_buf *b, const char *s, size_t n) {
    return mem_buf_append(b, s, n);
}

static tandem_err put_str(struct mem_buf *b, const char *s) {
    return put(b, s, strlen(s));
}

/* "%.2f" of x; 512 bytes hold any double's "%.2f" (DBL_MAX has 309 digits). */
static tandem_err put_2f(struct mem_buf *b, double x) {
    char num[512];
    int n = snprintf(num, sizeof num, "%.2f", x);
    return put(b, num, n > 0 && (size_t)n < sizeof num ? (size_t)n : 0);
}

/* A string as is, null as nothing, anything else as compact JSON. */
static tandem_err put_value(struct mem_buf *b, const json_t *v) {
    if (json_is_string(v))
        return put(b, json_string_value(v), json_string_length(v));
    if (!v || json_is_null(v))
        return TANDEM_OK;
    struct sink k = {b, TANDEM_OK};
    if (json_dump_callback(v, collect, &k, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER))
        return k.e ? k.e : TANDEM_ERR_NOMEM; /* otherwise jansson's own allocation failed */
    return TANDEM_OK;
}

static bool renders_empty(const json_t *v) {
    return !v || json_is_null(v) || (json_is_string(v) && !json_string_length(v));
}

static tandem_err put_candidates(struct mem_buf *b, const json_t *cands) {
    const char *option;
    json_t *desc;
    tandem_err e = TANDEM_OK;
    json_object_foreach((json_t *)cands, option, desc) {
        e = put_str(b, "- ");
        if (!e)
            e = put_str(b, option);
        if (!e && !renders_empty(desc))
            e = put_str(b, ": ");
        if (!e)
            e = put_value(b, desc);
        if (!e)
            e = put_str(b, "\n");
        if (e)
            break;
    }
    return e;
}

/* An answer as the System One API gives it; TANDEM_ERR_NOTFOUND when it
 * carries no value this module can render. */
static tandem_err put_answer(struct mem_buf *b, const json_t *a) {
    const char *type = json_string_value(json_object_get(a, "type"));
    const json_t *choice = json_object_get(a, "choice");
    const json_t *noul = json_object_get(a, "noul");
    const json_t *score = json_object_get(a, "score");
    if (type ? !strcmp(type, "choice") && json_is_string(choice) : json_is_string(choice))
        return put_value(b, choice);
    if (type ? !strcmp(type, "noul") && json_is_number(noul) : json_is_number(noul))
        return put_2f(b, json_number_value(noul));
    if (type ? !strcmp(type, "score") && json_is_number(score) : json_is_number(score))
        return put_2f(b, json_number_value(score));
    return TANDEM_ERR_NOTFOUND;
}

/* The text of the reference p, for messages: "decide.urgent". */
static void say_ref(struct out *o, const struct tmpl *t, const struct part *p) {
    if (p->kind == PART_DECIDE || p->kind == PART_VERIFY)
        say(o, "%s%.*s", p->kind == PART_DECIDE ? DECIDE : VERIFY, (int)p->len,
            t->text + p->off);
    for (size_t i = 0; i < N_BUILTINS; i++)
        if (builtins[i].kind == p->kind)
            say(o, "%s", builtins[i].name);
}

static tandem_err missing(struct out *o, const struct tmpl *t, const struct part *p,
                          const char *why) {
    say_ref(o, t, p);
    say(o, ": %s", why);
    return TANDEM_ERR_NOTFOUND;
}

/* An answer to question p (decide.<id> or verify.<id>) from answers. */
static tandem_err put_question(struct mem_buf *b, const struct tmpl *t, const struct part *p,
                               const json_t *answers, struct out *o) {
    const json_t *a = json_object_getn(answers, t->text + p->off, p->len);
    if (!a)
        return missing(o, t, p, p->kind == PART_DECIDE ? "not in the decide answer"
                                                       : "not in the earlier verify answers");
    tandem_err e = put_answer(b, a);
    return e == TANDEM_ERR_NOTFOUND ? missing(o, t, p, "the answer has no choice, noul or score")
                                    : e;
}

static tandem_err put_candidate(struct mem_buf *b, const struct tmpl *t, const struct part *p,
                                const struct tmpl_values *v, struct out *o) {
    if (!v->choice)
        return missing(o, t, p, "no candidate under verification");
    const json_t *desc = json_object_get(v->candidates, v->choice);
    if (!desc) {
        say_ref(o, t, p);
        say(o, ": no candidate \"%s\"", v->choice);
        return TANDEM_ERR_NOTFOUND;
    }
    return put_value(b, desc);
}

static tandem_err put_part(struct mem_buf *b, const struct tmpl *t, const struct part *p,
                           const struct tmpl_values *v, struct out *o) {
    switch (p->kind) {
    case PART_TEXT: return put(b, t->text + p->off, p->len);
    case PART_STATE:
        return v->state ? put_value(b, v->state) : missing(o, t, p, "not in the request");
    case PART_INSTRUCTIONS:
        return v->instructions ? put_value(b, v->instructions)
                               : missing(o, t, p, "not in the request");
    case PART_CANDIDATES:
        return json_is_object(v->candidates) ? put_candidates(b, v->candidates)
                                             : missing(o, t, p, "not in the request");
    case PART_CANDIDATE: return put_candidate(b, t, p, v, o);
    case PART_CHOICE:
        return v->choice ? put_str(b, v->choice)
                         : missing(o, t, p, "no candidate under verification");
    case PART_CONFIDENCE: return put_2f(b, v->confidence);
    case PART_PROBABILITY: return put_2f(b, v->probability);
    case PART_DECIDE: return put_question(b, t, p, v->decide_answers, o);
    case PART_VERIFY: return put_question(b, t, p, v->verify_answers, o);
    case PART_ATTEMPT: {
        char num[16];
        int n = snprintf(num, sizeof num, "%u", v->attempt);
        return put(b, num, (size_t)n);
    }
    }
    return TANDEM_ERR_INVAL; /* unreachable: every kind is handled above */
}

tandem_err tmpl_render(const struct tmpl *t, const struct tmpl_values *v, struct mem_buf *out,
                       char *err, size_t errlen) {
    static const struct tmpl_values none = {0};
    struct out o = {err, errlen, 0};
    tandem_err e = TANDEM_OK;
    for (size_t i = 0; i < t->n_parts && !e; i++)
        e = put_part(out, t, &t->parts[i], v ? v : &none, &o);
    if (e == TANDEM_ERR_TOOBIG)
        say(&o, "the rendered text passes its limit of %zu bytes", out->max);
    else if (e == TANDEM_ERR_NOMEM)
        say(&o, "%s", tandem_strerror(e));
    return e;
}
