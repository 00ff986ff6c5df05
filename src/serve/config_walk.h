/* config_walk.h: the machinery under tandem.yaml's schema (config_schema.c).
 *
 * A walk reads a libfyaml tree with typed readers that record the first error
 * as "<file>:<line>: <key.path>: <what>", expands ~ and ${VAR} in paths, and
 * applies tables of fields: each field names a key, the kind of its value and
 * where the value goes in the target struct (offsetof), with its range, its
 * words or its default. A key that needs more than its kind says has a custom
 * handler. Internal to serve/config*.c: the public interface is config.h. */
#ifndef TANDEM_CONFIG_WALK_H
#define TANDEM_CONFIG_WALK_H

#include <libfyaml.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "serve/config.h"

/* One load's walk: where errors go, and the first one. */
struct config_walk {
    const char *file;   /* the file name messages carry */
    char dir[PATH_MAX]; /* its directory: relative paths resolve against it */
    char *err;          /* the caller's message buffer, errlen bytes */
    size_t errlen;
    tandem_err e;       /* the first error; TANDEM_OK while there is none */
    int line;           /* when set, the line errors report (for checks after the walk) */
};

/* The 1-based line of n: a scalar's own token, a collection's first entry;
 * 0 for NULL. */
int config_walk_line(struct fy_node *n);

/* Records error e as "<file>:<line of at>: <path>: <fmt...>" (w->line instead
 * when set), unless an error is already recorded: the first one wins. Always
 * returns false, so that a reader can `return config_walk_fail(...)`. */
__attribute__((format(printf, 5, 6))) bool config_walk_fail(struct config_walk *w, tandem_err e,
                                                            struct fy_node *at, const char *path,
                                                            const char *fmt, ...);

/* The readers: each reads node n, found at key path path, into the output it
 * names, or records an error naming path and returns false. */

/* The scalar text of n as a NUL-terminated copy in buf[cap] (output); a value
 * of cap bytes or more is an error ("value too long"). */
bool config_walk_scalar(struct config_walk *w, struct fy_node *n, const char *path, char *buf,
                        size_t cap);

/* A decimal integer from min to max into *out. */
bool config_walk_u64(struct config_walk *w, struct fy_node *n, const char *path, uint64_t max,
                     uint64_t min, uint64_t *out);

/* The text of n as a new string in *out (which it frees first; the caller owns it). */
bool config_walk_string(struct config_walk *w, struct fy_node *n, const char *path, char **out);

/* A path, ~ and ${VAR} expanded and made absolute against w->dir, into *out
 * as with config_walk_string. */
bool config_walk_path(struct config_walk *w, struct fy_node *n, const char *path, char **out);

/* The text of n (at most 16383 bytes) and its line into *out, whose text it
 * frees first. */
bool config_walk_text(struct config_walk *w, struct fy_node *n, const char *path,
                      struct config_text *out);

/* A list of strings: *out is a new NULL-terminated array (set even when an
 * item fails, so that the caller frees what was read), *count the items read. */
bool config_walk_list(struct config_walk *w, struct fy_node *n, const char *path, char ***out,
                      size_t *count);

/* Frees the first n strings of v and v. NULL is a no-op. */
void config_walk_list_free(char **v, size_t n);

/* --- fields ------------------------------------------------------------------------- */

enum config_kind {
    CONFIG_KIND_SECTION,    /* a mapping of sub-fields, applied to the same target */
    CONFIG_KIND_CUSTOM,     /* fn reads the value */
    CONFIG_KIND_STRING,     /* char *, owned */
    CONFIG_KIND_PATH,       /* char *, owned: expanded and absolute */
    CONFIG_KIND_TEXT,       /* struct config_text */
    CONFIG_KIND_LIST,       /* char ** (NULL-terminated, owned) and its size_t count */
    CONFIG_KIND_BOOL,       /* bool: true/yes/on or false/no/off */
    CONFIG_KIND_UINT,       /* uint32_t, from min to max */
    CONFIG_KIND_INT,        /* int32_t, from min to max */
    CONFIG_KIND_DOUBLE,     /* double, from min to max */
    CONFIG_KIND_SIZE,       /* uint64_t bytes: "6GiB", "512M", "4096" */
    CONFIG_KIND_DURATION,   /* int64_t ms: "250ms", "30s", "5m", "1h" or ms; at least min ms;
                             * "forever" (CONFIG_KEEP_ALIVE_FOREVER) when forever is set */
    CONFIG_KIND_ENUM,       /* one of choices' words; its value into a bool or an enum */
    CONFIG_KIND_CACHE_TYPE, /* uint32_t: a ggml type id by name ("f16", "q8_0") */
};

/* A handler: reads v (at key path path) into target. */
typedef bool (*config_walk_fn)(struct config_walk *w, struct fy_node *v, const char *path,
                               void *target);

/* Returns the struct a field writes, found or created from target, or NULL
 * after recording an error. */
typedef void *(*config_walk_via_fn)(struct config_walk *w, struct fy_node *v, const char *path,
                                    void *target);

/* An ENUM word and the value it stores. */
struct config_choice {
    const char *word;
    int value;
};

/* A key and what its value is. Tables end with {NULL}; the unknown-key
 * suggestion is the last key in table order within two edits. */
struct config_field {
    const char *name;
    enum config_kind kind;
    size_t off, size;       /* the member's offsetof and sizeof in the target */
    size_t count_off;       /* LIST: offsetof its size_t count */
    double min, max;        /* UINT, INT, DOUBLE: the range; DURATION: min, in ms */
    bool forever;           /* DURATION: "forever" is allowed */
    const struct config_choice *choices; /* ENUM: ends with {NULL}; messages list them in order */
    size_t cap;             /* the scalar kinds: bytes read at most + 1; 0 = the kind's own */
    const char *def;        /* the scalar kinds: the default, as the YAML would say it; NULL =
                             * none (the target's own value stays) */
    config_walk_fn fn;      /* CUSTOM: the handler */
    const struct config_field *sub; /* SECTION: its fields */
    config_walk_via_fn via; /* when set, the field writes via(target), not target; no def */
};

/* Table rows: CONFIG_UINT(struct config, queue_depth, 1, UINT32_MAX). The type
 * of each member is checked at compile time. */
#define CONFIG_MEMBER(T, m, type) \
    .off = offsetof(T, m) + 0 * _Generic(((T *)0)->m, type: 0), .size = sizeof(type)
#define CONFIG_STRING(T, m) .kind = CONFIG_KIND_STRING, CONFIG_MEMBER(T, m, char *)
#define CONFIG_PATH(T, m) .kind = CONFIG_KIND_PATH, CONFIG_MEMBER(T, m, char *)
#define CONFIG_TEXT(T, m) .kind = CONFIG_KIND_TEXT, CONFIG_MEMBER(T, m, struct config_text)
#define CONFIG_LIST(T, m, n) \
    .kind = CONFIG_KIND_LIST, CONFIG_MEMBER(T, m, char **), \
    .count_off = offsetof(T, n) + 0 * _Generic(((T *)0)->n, size_t: 0)
#define CONFIG_BOOL(T, m) .kind = CONFIG_KIND_BOOL, CONFIG_MEMBER(T, m, bool)
#define CONFIG_UINT(T, m, lo, hi) \
    .kind = CONFIG_KIND_UINT, CONFIG_MEMBER(T, m, uint32_t), .min = (lo), .max = (hi)
#define CONFIG_INT(T, m, lo, hi) \
    .kind = CONFIG_KIND_INT, CONFIG_MEMBER(T, m, int32_t), .min = (lo), .max = (hi)
#define CONFIG_DOUBLE(T, m, lo, hi) \
    .kind = CONFIG_KIND_DOUBLE, CONFIG_MEMBER(T, m, double), .min = (lo), .max = (hi)
#define CONFIG_SIZE(T, m) .kind = CONFIG_KIND_SIZE, CONFIG_MEMBER(T, m, uint64_t)
#define CONFIG_DURATION(T, m) .kind = CONFIG_KIND_DURATION, CONFIG_MEMBER(T, m, int64_t)
#define CONFIG_ENUM(T, m, words) \
    .kind = CONFIG_KIND_ENUM, .off = offsetof(T, m), .size = sizeof(((T *)0)->m), \
    .choices = (words)
#define CONFIG_CACHE_TYPE(T, m) .kind = CONFIG_KIND_CACHE_TYPE, CONFIG_MEMBER(T, m, uint32_t)
#define CONFIG_SECTION(fields) .kind = CONFIG_KIND_SECTION, .sub = (fields)
#define CONFIG_CUSTOM(handler) .kind = CONFIG_KIND_CUSTOM, .fn = (handler)

/* Reads v, found at key path path, as field f into target (or f->via(target)). */
bool config_walk_apply(struct config_walk *w, struct fy_node *v, const char *path,
                       const struct config_field *f, void *target);

/* Walks mapping m at path ("" for the document's root) by fields: each key is
 * applied by its field, in file order; an unknown key is an error, with the
 * closest field's name as a suggestion. */
bool config_walk_section(struct config_walk *w, struct fy_node *m, const char *path,
                         const struct config_field *fields, void *target);

/* Stores the default of every field that has one (sections' too) into target.
 * False (an error naming the field) only for a default the field refuses. */
bool config_walk_defaults(struct config_walk *w, const struct config_field *fields, void *target);

/* --- mappings of named entries (models, pipelines, questions, ...) ---------------- */

/* Checks that v is a mapping of at least one entry ("expected a mapping of at
 * least one <what>") and returns a new zeroed array of as many items of size
 * bytes (the caller owns it), or NULL after recording the error. */
void *config_walk_map_new(struct config_walk *w, struct fy_node *v, const char *path,
                          const char *what, size_t size);

/* Called per entry of a mapping: k is its key node, v its value (NULL when it
 * has none), name the key's text, sub the entry's path; ctx is the caller's. */
typedef bool (*config_walk_entry_fn)(struct config_walk *w, struct fy_node *k, struct fy_node *v,
                                     const char *name, const char *sub, void *ctx);

/* Calls fn for each entry of mapping m, in file order, until one fails. A key
 * is scalar text shorter than name_cap bytes (at most 256); sub is
 * "<path>.<name>" ("<name>" at the root), cut to path_cap - 1 bytes (at most 1024). */
bool config_walk_map_each(struct config_walk *w, struct fy_node *m, const char *path,
                          size_t name_cap, size_t path_cap, config_walk_entry_fn fn, void *ctx);

#endif
