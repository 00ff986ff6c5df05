/* config_edit.c: verdict values rewritten in the config's own text.
 *
 * libfyaml parses the text only to locate things: the byte range of a value
 * token to replace, or the end of a block where a missing key goes (after
 * the line of the block's last token, at the column of the block's first
 * key). The edit itself is a splice of the original bytes, so everything
 * else survives untouched. Each value is one splice followed by a fresh
 * parse, which keeps the offsets of the next one right; a verdict has a few
 * values, so the repeated parse costs nothing that matters. Flow-style
 * blocks ({a: 1}) are refused rather than rewritten. */
#include "serve/config_edit.h"

#include <libfyaml.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/mem.h"
#include "base/utf8.h"

#define INDENT_STEP 2

struct text {
    char *data;
    size_t len;
};

/* The token that ends node: a scalar's own, else the last one inside it. */
static struct fy_token *last_token(struct fy_node *n) {
    void *it = NULL;
    if (!n)
        return NULL;
    if (fy_node_is_mapping(n)) {
        struct fy_node_pair *p, *last = NULL;
        while ((p = fy_node_mapping_iterate(n, &it)))
            last = p;
        if (!last)
            return NULL;
        struct fy_node *v = fy_node_pair_value(last);
        struct fy_token *t = last_token(v);
        return t ? t : last_token(fy_node_pair_key(last));
    }
    if (fy_node_is_sequence(n)) {
        struct fy_node *item, *last = NULL;
        while ((item = fy_node_sequence_iterate(n, &it)))
            last = item;
        return last_token(last);
    }
    return fy_node_get_scalar_token(n);
}

/* Column of the first key of block mapping m, or -1. */
static int key_column(struct fy_node *m) {
    void *it = NULL;
    struct fy_node_pair *p = fy_node_mapping_iterate(m, &it);
    struct fy_token *t = p ? fy_node_get_scalar_token(fy_node_pair_key(p)) : NULL;
    const struct fy_mark *mk = t ? fy_token_start_mark(t) : NULL;
    return mk ? mk->column : -1;
}

/* Replaces t[at..at+del) with ins[0..n). */
static tandem_err splice(struct text *t, size_t at, size_t del, const char *ins, size_t n) {
    char *d = mem_alloc(t->len - del + n + 1);
    if (!d)
        return TANDEM_ERR_NOMEM;
    memcpy(d, t->data, at);
    memcpy(d + at, ins, n);
    memcpy(d + at + n, t->data + at + del, t->len - at - del);
    t->len = t->len - del + n;
    d[t->len] = '\0';
    mem_free(t->data);
    t->data = d;
    return TANDEM_OK;
}

/* Offset just after the line holding block m's last token; a text without a
 * final newline gets one there first. */
static tandem_err end_of_block(struct text *t, struct fy_node *m, size_t *at) {
    struct fy_token *last = last_token(m);
    const struct fy_mark *mk = last ? fy_token_end_mark(last) : NULL;
    size_t pos = mk ? mk->input_pos : t->len;
    while (pos < t->len && t->data[pos] != '\n')
        pos++;
    if (pos == t->len) {
        tandem_err e = splice(t, t->len, 0, "\n", 1);
        if (e != TANDEM_OK)
            return e;
    }
    *at = pos + 1;
    return TANDEM_OK;
}

/* Renders v as lines at column col: "key: text", under "section:" when
 * section is set, and under "verdict:" first when with_verdict. */
static int entry_lines(char *buf, size_t cap, int col, bool with_verdict, const char *section,
                       const struct config_edit_value *v) {
    int n = 0, m;
    if (with_verdict) {
        n = snprintf(buf, cap, "%*sverdict:\n", col, "");
        col += INDENT_STEP;
    }
    if (section && n >= 0 && (size_t)n < cap) {
        m = snprintf(buf + n, cap - (size_t)n, "%*s%s:\n", col, "", section);
        n = m < 0 ? m : n + m;
        col += INDENT_STEP;
    }
    if (n >= 0 && (size_t)n < cap) {
        m = snprintf(buf + n, cap - (size_t)n, "%*s%s: %s\n", col, "", v->key, v->text);
        n = m < 0 ? m : n + m;
    }
    return n >= 0 && (size_t)n < cap ? n : -1;
}

/* Adds v (under section and verdict as entry_lines() says) as the last
 * entry of block mapping m, at m's indentation. */
static tandem_err add_entry(struct text *t, struct fy_node *m, bool with_verdict,
                            const char *section, const struct config_edit_value *v) {
    char lines[1024];
    int n = entry_lines(lines, sizeof lines, key_column(m), with_verdict, section, v);
    if (n < 0)
        return TANDEM_ERR_FORMAT;
    size_t at;
    tandem_err e = end_of_block(t, m, &at);
    return e == TANDEM_OK ? splice(t, at, 0, lines, (size_t)n) : e;
}

/* Replaces the scalar value of pair p with v->text. */
static tandem_err replace_value(struct text *t, struct fy_node_pair *p,
                                const struct config_edit_value *v) {
    struct fy_token *tok = fy_node_get_scalar_token(fy_node_pair_value(p));
    const struct fy_mark *s = tok ? fy_token_start_mark(tok) : NULL;
    const struct fy_mark *e = tok ? fy_token_end_mark(tok) : NULL;
    if (!s || !e || e->input_pos < s->input_pos || e->input_pos > t->len)
        return TANDEM_ERR_FORMAT;
    size_t from = s->input_pos, to = e->input_pos;
    /* a quoted scalar's token holds its content only: take the quotes too */
    if (from > 0 && to < t->len && (t->data[from - 1] == '"' || t->data[from - 1] == '\'') &&
        t->data[to] == t->data[from - 1]) {
        from--;
        to++;
    }
    return splice(t, from, to - from, v->text, strlen(v->text));
}

/* The block mapping under key in block mapping m into *out (NULL when the
 * key is absent); a present value that is not a block mapping is a format
 * error. */
static tandem_err child_block(struct fy_node *m, const char *key, struct fy_node **out) {
    struct fy_node_pair *pair = fy_node_mapping_lookup_pair_by_string(m, key, FY_NT);
    *out = pair ? fy_node_pair_value(pair) : NULL;
    if (pair && (!*out || !fy_node_is_mapping(*out) || fy_node_get_style(*out) == FYNS_FLOW))
        return TANDEM_ERR_FORMAT;
    return TANDEM_OK;
}

/* Sets v under pipeline block pl: replaces the value, or adds the entry to
 * the deepest block that exists on its way. *path names the block that was
 * not a block mapping, on TANDEM_ERR_FORMAT. */
static tandem_err apply_one(struct text *t, struct fy_node *pl, const struct config_edit_value *v,
                            const char **path) {
    struct fy_node *verdict, *block;
    *path = "verdict";
    if (child_block(pl, "verdict", &verdict) != TANDEM_OK)
        return TANDEM_ERR_FORMAT;
    if (!verdict)
        return add_entry(t, pl, true, v->section, v);
    block = verdict;
    if (v->section) {
        *path = "verdict.thresholds";
        if (child_block(verdict, v->section, &block) != TANDEM_OK)
            return TANDEM_ERR_FORMAT;
        if (!block)
            return add_entry(t, verdict, false, v->section, v);
    }
    struct fy_node_pair *pair = fy_node_mapping_lookup_pair_by_string(block, v->key, FY_NT);
    if (!pair)
        return add_entry(t, block, false, NULL, v);
    if (!fy_node_is_scalar(fy_node_pair_value(pair)))
        return TANDEM_ERR_FORMAT;
    return replace_value(t, pair, v);
}

static void ignore_diag(struct fy_diag *diag, void *user, const char *buf, size_t len) {
    (void)diag, (void)user, (void)buf, (void)len;
}

/* The pipeline's block mapping in a fresh parse of t (*doc: caller destroys). */
static struct fy_node *find_pipeline(const struct text *t, const char *pipeline,
                                     struct fy_document **doc) {
    struct fy_diag_cfg dcfg;
    fy_diag_cfg_default(&dcfg);
    dcfg.fp = NULL;
    dcfg.output_fn = ignore_diag; /* the caller loaded the file already: it parses */
    struct fy_diag *diag = fy_diag_create(&dcfg);
    struct fy_parse_cfg cfg = {.flags = FYPCF_QUIET | FYPCF_DEFAULT_PARSE, .diag = diag};
    *doc = fy_document_build_from_string(&cfg, t->data, t->len);
    if (diag)
        fy_diag_unref(diag);
    struct fy_node *root = *doc ? fy_document_root(*doc) : NULL;
    struct fy_node *pls = root && fy_node_is_mapping(root)
                              ? fy_node_mapping_lookup_by_string(root, "pipelines", FY_NT)
                              : NULL;
    struct fy_node *pl = pls && fy_node_is_mapping(pls)
                             ? fy_node_mapping_lookup_by_string(pls, pipeline, FY_NT)
                             : NULL;
    return pl && fy_node_is_mapping(pl) && fy_node_get_style(pl) != FYNS_FLOW ? pl : NULL;
}

tandem_err config_edit_verdict(const char *name, const char *text, size_t len,
                               const char *pipeline, const struct config_edit_value *values,
                               size_t n, char **out, size_t *out_len, char *err, size_t errlen) {
    *out = NULL;
    struct text t = {mem_alloc(len + 1), len};
    if (!t.data)
        return TANDEM_ERR_NOMEM;
    memcpy(t.data, text, len); /* every byte, a NUL included: libfyaml gets the length */
    t.data[len] = '\0';
    tandem_err e = TANDEM_OK;
    size_t bad = utf8_bad_line((const unsigned char *)text, len); /* libfyaml can hang on it */
    if (bad) {
        tandem_errmsg(err, errlen, "%s:%zu: not valid UTF-8 (or a NUL byte)", name, bad);
        e = TANDEM_ERR_FORMAT;
    }
    for (size_t i = 0; i < n && e == TANDEM_OK; i++) {
        struct fy_document *doc;
        struct fy_node *pl = find_pipeline(&t, pipeline, &doc);
        const char *path = "";
        if (!pl) {
            tandem_errmsg(err, errlen, "%s: pipelines.%s: %s", name, pipeline,
                          doc ? "not found, or not a block mapping" : "the YAML does not parse");
            e = TANDEM_ERR_FORMAT;
        } else if ((e = apply_one(&t, pl, &values[i], &path)) == TANDEM_ERR_FORMAT) {
            tandem_errmsg(err, errlen,
                          "%s: pipelines.%s.%s: is in flow style or not a mapping; "
                          "write it as a block to let tandem edit it",
                          name, pipeline, path);
        }
        fy_document_destroy(doc);
    }
    if (e != TANDEM_OK) {
        mem_free(t.data);
        return e;
    }
    *out = t.data;
    *out_len = t.len;
    return TANDEM_OK;
}
