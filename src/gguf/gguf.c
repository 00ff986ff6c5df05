/* gguf.c: the GGUF reader. The file is untrusted input.
 *
 * Design: the file is mmap'ed read-only (or a caller buffer is borrowed) and
 * parsed in one forward pass with a cursor (struct rd) that checks the
 * remaining length before every read. Nothing is copied: keys, strings and
 * tensor names point into the mapping, and tensor data is never touched, so
 * opening a multi-GB model faults in only the header pages.
 *
 * Order of checks (mirrors ggml/src/gguf.cpp gguf_init_from_reader() so that
 * a file is rejected here when the engine would reject it):
 *   header     magic, version (2 or 3), tensor_count, kv_count
 *   kv pairs   key (non-empty, unique), value type, value; arrays of any
 *              type but ARRAY (nested arrays are rejected, as ggml does);
 *              strings <= 1 GiB, arrays <= 2^30 elements, as ggml
 *   alignment  general.alignment must be UINT32 and a power of two
 *   tensors    name (< 64 bytes, unique), 1..4 dims, ne >= 0, element count
 *              <= INT64_MAX, known non-retired type, ne0 % block == 0
 *   data       section starts at the header end padded to the alignment;
 *              tensor offsets are aligned and packed in order (ggml requires
 *              offset == sum of the padded sizes before it), and every
 *              tensor's bytes lie inside the file (llama's loader check).
 *
 * Allocation: counts from the file are first bounded by the bytes left
 * divided by the smallest possible encoding of one entry; arrays then grow
 * geometrically as entries are actually parsed, so memory stays proportional
 * to the bytes really present. Names are indexed in open-addressing hash
 * tables (duplicate detection and O(1) lookup); string arrays get an offset
 * index, built only after all their elements were validated.
 *
 * Every failure writes one line "<name>: offset <N>: <context>: <detail>".
 *
 * Limit: a mapped file that another process truncates raises SIGBUS on the
 * next access; model files in the cache are written once and never shrunk. */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/ggml_types.h"
#include "base/mem.h"

#define HEADER_BYTES 24  /* magic + version + tensor_count + kv_count */
#define KV_MIN_BYTES 14  /* key length 8 + >= 1 key byte + type 4 + >= 1 value byte */
#define TENSOR_MIN_BYTES 32 /* name length 8 + n_dims 4 + one ne 8 + type 4 + offset 8 */
#define ARRAY_HDR_BYTES 12  /* elem type 4 + count 8 */
#define ALIGNMENT_KEY "general.alignment"

/* --- name index: open addressing over names that live in the mapping ------ */

struct slot {
    const char *ptr;
    uint64_t len;
    uint64_t idx1; /* entry index + 1; 0 = empty */
};

struct name_index {
    struct slot *slots;
    uint64_t cap; /* 0 or a power of two */
    uint64_t used;
};

static uint64_t hash_bytes(const char *p, uint64_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (uint64_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

/* Returns the slot holding (p, n) or the empty slot where it belongs.
 * Requires cap > used, so an empty slot exists. */
static struct slot *index_probe(const struct name_index *ix, const char *p, uint64_t n) {
    uint64_t mask = ix->cap - 1;
    for (uint64_t h = hash_bytes(p, n) & mask;; h = (h + 1) & mask) {
        struct slot *s = &ix->slots[h];
        if (!s->idx1 || (s->len == n && (n == 0 || memcmp(s->ptr, p, n) == 0)))
            return s;
    }
}

static tandem_err index_grow(struct name_index *ix) {
    uint64_t cap = ix->cap ? ix->cap * 2 : 16;
    if (cap < ix->cap || cap > SIZE_MAX / sizeof(struct slot))
        return TANDEM_ERR_NOMEM;
    struct name_index bigger = {mem_calloc(cap, sizeof(struct slot)), cap, ix->used};
    if (!bigger.slots)
        return TANDEM_ERR_NOMEM;
    for (uint64_t i = 0; i < ix->cap; i++)
        if (ix->slots[i].idx1)
            *index_probe(&bigger, ix->slots[i].ptr, ix->slots[i].len) = ix->slots[i];
    mem_free(ix->slots);
    *ix = bigger;
    return TANDEM_OK;
}

/* Adds name (p, n) for entry idx. Returns TANDEM_ERR_FORMAT with the earlier
 * entry's index in *first when the name is already present. */
static tandem_err index_add(struct name_index *ix, const char *p, uint64_t n, uint64_t idx,
                            uint64_t *first) {
    if ((ix->used + 1) * 2 > ix->cap) {
        tandem_err e = index_grow(ix);
        if (e)
            return e;
    }
    struct slot *s = index_probe(ix, p, n);
    if (s->idx1) {
        *first = s->idx1 - 1;
        return TANDEM_ERR_FORMAT;
    }
    *s = (struct slot){p, n, idx + 1};
    ix->used++;
    return TANDEM_OK;
}

/* Returns the entry index of (p, n), or UINT64_MAX when absent. */
static uint64_t index_find(const struct name_index *ix, const char *p, uint64_t n) {
    if (!ix->cap)
        return UINT64_MAX;
    const struct slot *s = index_probe(ix, p, n);
    return s->idx1 ? s->idx1 - 1 : UINT64_MAX;
}

/* --- the handle ------------------------------------------------------------- */

struct gguf {
    const uint8_t *base; /* file bytes; NULL only when size == 0 */
    uint64_t size;
    void *map; /* our mapping (gguf_open) or NULL (borrowed buffer) */
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    struct gguf_kv *kv;
    uint64_t n_kv;
    size_t cap_kv;
    struct gguf_tensor *tensors;
    uint64_t n_tensors;
    size_t cap_tensors;
    struct name_index kv_index, tensor_index;
};

/* --- little-endian decoding (no alignment assumptions) ---------------------- */

static uint16_t le16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p) {
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* Bytes of one encoded scalar; 0 for STRING, ARRAY and unknown types. */
uint64_t gguf_type_size(enum gguf_type t) {
    static const uint8_t sizes[GGUF_TYPE_COUNT_] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return (unsigned)t < GGUF_TYPE_COUNT_ ? sizes[t] : 0;
}

const char *gguf_type_name(enum gguf_type t) {
    static const char *const names[GGUF_TYPE_COUNT_] = {
        "UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
        "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64",
    };
    return (unsigned)t < GGUF_TYPE_COUNT_ ? names[t] : "unknown";
}

/* --- the cursor and its messages -------------------------------------------- */

struct rd {
    const uint8_t *p;
    uint64_t size;
    uint64_t pos;
    const char *name; /* message prefix */
    char *err;
    size_t errlen;
    char what[208]; /* context: "", "key 3", "key 'general.name'", "tensor 'x'" */
};

/* Writes (p, n) into dst[cap] with nonprintable bytes, quotes and
 * backslashes escaped, at most 40 source bytes ("..." marks the cut). */
static void escape(char *dst, size_t cap, const char *p, uint64_t n) {
    size_t o = 0;
    uint64_t shown = n > 40 ? 40 : n;
    for (uint64_t i = 0; i < shown && o + 5 < cap; i++) {
        uint8_t c = (uint8_t)p[i];
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '"' && c != '\\')
            dst[o++] = (char)c;
        else
            o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", c);
    }
    if (shown < n && o + 4 <= cap) {
        memcpy(dst + o, "...", 3);
        o += 3;
    }
    dst[o < cap ? o : cap - 1] = '\0';
}

static void what_index(struct rd *r, const char *kind, uint64_t i) {
    snprintf(r->what, sizeof r->what, "%s %" PRIu64, kind, i);
}

static void what_name(struct rd *r, const char *kind, struct gguf_str s) {
    char esc[176];
    escape(esc, sizeof esc, s.ptr, s.len);
    snprintf(r->what, sizeof r->what, "%s '%s'", kind, esc);
}

static tandem_err vfail(struct rd *r, tandem_err code, uint64_t off, const char *fmt,
                        va_list ap) {
    char detail[512];
    vsnprintf(detail, sizeof detail, fmt, ap);
    tandem_errmsg(r->err, r->errlen, "%s: offset %" PRIu64 ": %s%s%s", r->name, off, r->what,
                  *r->what ? ": " : "", detail);
    return code;
}

/* Reports a malformed field at file offset off; returns TANDEM_ERR_FORMAT. */
__attribute__((format(printf, 3, 4))) static tandem_err fail(struct rd *r, uint64_t off,
                                                             const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tandem_err e = vfail(r, TANDEM_ERR_FORMAT, off, fmt, ap);
    va_end(ap);
    return e;
}

/* Like fail() with another code. */
__attribute__((format(printf, 4, 5))) static tandem_err fail_code(struct rd *r, tandem_err code,
                                                                  uint64_t off,
                                                                  const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tandem_err e = vfail(r, code, off, fmt, ap);
    va_end(ap);
    return e;
}

static uint64_t left(const struct rd *r) {
    return r->size - r->pos;
}

/* Checks that n more bytes exist for the field described by desc. */
static tandem_err need(struct rd *r, uint64_t n, const char *desc) {
    uint64_t l = left(r);
    if (l >= n)
        return TANDEM_OK;
    if (!l)
        return fail(r, r->pos, "expected %s (%" PRIu64 " bytes), found end of file", desc, n);
    return fail(r, r->pos, "expected %s (%" PRIu64 " bytes), found only %" PRIu64 " byte%s", desc,
                n, l, l == 1 ? "" : "s");
}

static tandem_err rd_u32(struct rd *r, const char *desc, uint32_t *v) {
    tandem_err e = need(r, 4, desc);
    if (!e) {
        *v = le32(r->p + r->pos);
        r->pos += 4;
    }
    return e;
}

static tandem_err rd_u64(struct rd *r, const char *desc, uint64_t *v) {
    tandem_err e = need(r, 8, desc);
    if (!e) {
        *v = le64(r->p + r->pos);
        r->pos += 8;
    }
    return e;
}

/* Reads a uint64 length + bytes string (at most GGUF_MAX_STRING_LENGTH). */
static tandem_err rd_str(struct rd *r, const char *desc, struct gguf_str *out) {
    uint64_t off = r->pos, len;
    char field[96];
    snprintf(field, sizeof field, "%s length", desc);
    tandem_err e = rd_u64(r, field, &len);
    if (e)
        return e;
    if (len > GGUF_MAX_STRING_LENGTH)
        return fail(r, off, "expected a %s of at most %u bytes, found length %" PRIu64, desc,
                    GGUF_MAX_STRING_LENGTH, len);
    if (len > left(r))
        return fail(r, off,
                    "expected a %s of %" PRIu64 " bytes, found only %" PRIu64
                    " bytes before end of file",
                    desc, len, left(r));
    out->ptr = (const char *)r->p + r->pos;
    out->len = len;
    r->pos += len;
    return TANDEM_OK;
}

/* --- header ------------------------------------------------------------------ */

static tandem_err parse_magic(struct rd *r) {
    tandem_err e = need(r, 4, "magic \"GGUF\"");
    if (e)
        return e;
    if (memcmp(r->p, "GGUF", 4)) {
        char esc[32];
        escape(esc, sizeof esc, (const char *)r->p, 4);
        return fail(r, 0, "expected magic \"GGUF\", found \"%s\"", esc);
    }
    r->pos = 4;
    return TANDEM_OK;
}

static tandem_err parse_version(struct rd *r, uint32_t *version) {
    uint32_t v;
    tandem_err e = rd_u32(r, "version", &v);
    if (e)
        return e;
    *version = v;
    if (v == 2 || v == 3)
        return TANDEM_OK;
    if (v == 1)
        return fail_code(r, TANDEM_ERR_UNSUPPORTED, 4,
                         "expected version 2 or 3, found 1 (GGUFv1 is no longer supported)");
    if (v && !(v & 0xffffu))
        return fail_code(r, TANDEM_ERR_UNSUPPORTED, 4,
                         "expected version 2 or 3, found %" PRIu32
                         " (0x%08" PRIx32 ": a file of the other byte order?)",
                         v, v);
    return fail_code(r, v ? TANDEM_ERR_UNSUPPORTED : TANDEM_ERR_FORMAT, 4,
                     "expected version 2 or 3, found %" PRIu32, v);
}

/* Reads a count at offset off and bounds it by the bytes after the header. */
static tandem_err parse_count(struct rd *r, const char *desc, const char *entries,
                              uint64_t min_bytes, uint64_t *count) {
    uint64_t off = r->pos;
    tandem_err e = rd_u64(r, desc, count);
    if (e)
        return e;
    uint64_t room = r->size >= HEADER_BYTES ? r->size - HEADER_BYTES : 0;
    if (*count > room / min_bytes)
        return fail(r, off,
                    "expected a %s of at most %" PRIu64 " (%s of %" PRIu64 "+ bytes in the %" PRIu64
                    " bytes after the header), found %" PRIu64,
                    desc, room / min_bytes, entries, min_bytes, room, *count);
    return TANDEM_OK;
}

static tandem_err parse_header(struct rd *r, struct gguf *g, uint64_t *n_tensors,
                               uint64_t *n_kv) {
    tandem_err e = parse_magic(r);
    if (!e)
        e = parse_version(r, &g->version);
    if (!e)
        e = parse_count(r, "tensor count", "tensor infos", TENSOR_MIN_BYTES, n_tensors);
    if (!e)
        e = parse_count(r, "key/value count", "key/value pairs", KV_MIN_BYTES, n_kv);
    return e;
}

/* --- key/value pairs ---------------------------------------------------------- */

/* Walks count strings from the cursor, validating each. */
static tandem_err walk_strings(struct rd *r, uint64_t count) {
    char desc[64];
    struct gguf_str s;
    for (uint64_t j = 0; j < count; j++) {
        snprintf(desc, sizeof desc, "string element %" PRIu64, j);
        tandem_err e = rd_str(r, desc, &s);
        if (e)
            return e;
    }
    return TANDEM_OK;
}

/* Builds kv->str_index for a validated string array (the bytes were proven
 * by walk_strings(), so no bound can fail here). */
static tandem_err index_strings(struct rd *r, struct gguf_kv *kv) {
    if (!kv->arr_count)
        return TANDEM_OK;
    uint64_t *ix = mem_alloc_array(kv->arr_count, sizeof *ix);
    if (!ix)
        return fail_code(r, TANDEM_ERR_NOMEM, kv->offset,
                         "out of memory indexing %" PRIu64 " strings", kv->arr_count);
    uint64_t off = ARRAY_HDR_BYTES;
    for (uint64_t j = 0; j < kv->arr_count; j++) {
        ix[j] = off;
        off += 8 + le64(kv->value + off);
    }
    kv->str_index = ix;
    return TANDEM_OK;
}

static tandem_err parse_array(struct rd *r, struct gguf_kv *kv) {
    uint64_t type_off = r->pos, count_off;
    uint32_t et;
    tandem_err e = rd_u32(r, "array element type", &et);
    if (e)
        return e;
    if (et == GGUF_TYPE_ARRAY)
        return fail(r, type_off,
                    "expected an array element type other than ARRAY (nested arrays are"
                    " not supported), found ARRAY");
    if (et >= GGUF_TYPE_COUNT_)
        return fail(r, type_off, "expected an array element type 0..12, found %" PRIu32, et);
    count_off = r->pos;
    if ((e = rd_u64(r, "array count", &kv->arr_count)))
        return e;
    kv->arr_type = (enum gguf_type)et;
    uint64_t n = kv->arr_count, esize = et == GGUF_TYPE_STRING ? 8 : gguf_type_size(et);
    if (n > GGUF_MAX_ARRAY_ELEMENTS)
        return fail(r, count_off, "expected at most %u array elements, found %" PRIu64,
                    GGUF_MAX_ARRAY_ELEMENTS, n);
    if (n > left(r) / esize)
        return fail(r, count_off,
                    "expected at most %" PRIu64 " %s elements in the %" PRIu64
                    " bytes left, found count %" PRIu64,
                    left(r) / esize, gguf_type_name(kv->arr_type), left(r), n);
    if (et != GGUF_TYPE_STRING) {
        r->pos += n * esize; /* n * esize <= left: checked above */
        return TANDEM_OK;
    }
    return walk_strings(r, n);
}

static tandem_err parse_value(struct rd *r, struct gguf_kv *kv) {
    struct gguf_str s;
    char desc[32];
    switch (kv->type) {
    case GGUF_TYPE_STRING:
        return rd_str(r, "string", &s);
    case GGUF_TYPE_ARRAY:
        return parse_array(r, kv);
    default:
        snprintf(desc, sizeof desc, "%s value", gguf_type_name(kv->type));
        tandem_err e = need(r, gguf_type_size(kv->type), desc);
        if (!e)
            r->pos += gguf_type_size(kv->type);
        return e;
    }
}

/* Parses pair i into g->kv[i] (capacity already reserved). */
static tandem_err parse_kv(struct rd *r, struct gguf *g, uint64_t i) {
    struct gguf_kv kv = {.offset = r->pos};
    uint64_t first;
    what_index(r, "key", i);
    tandem_err e = rd_str(r, "key", &kv.key);
    if (e)
        return e;
    if (!kv.key.len)
        return fail(r, kv.offset, "expected a non-empty key, found length 0");
    e = index_add(&g->kv_index, kv.key.ptr, kv.key.len, i, &first);
    if (e == TANDEM_ERR_FORMAT) {
        char esc[176];
        escape(esc, sizeof esc, kv.key.ptr, kv.key.len);
        return fail(r, kv.offset, "expected a new key, found duplicate '%s' (first at offset %" PRIu64 ")",
                    esc, g->kv[first].offset);
    }
    if (e)
        return fail_code(r, e, kv.offset, "out of memory");
    what_name(r, "key", kv.key);
    uint64_t type_off = r->pos;
    uint32_t t;
    if ((e = rd_u32(r, "value type", &t)))
        return e;
    if (t >= GGUF_TYPE_COUNT_)
        return fail(r, type_off, "expected a value type 0..12, found %" PRIu32, t);
    kv.type = (enum gguf_type)t;
    kv.value = r->p + r->pos;
    uint64_t start = r->pos;
    if ((e = parse_value(r, &kv)))
        return e;
    kv.value_len = r->pos - start;
    if (kv.type == GGUF_TYPE_ARRAY && kv.arr_type == GGUF_TYPE_STRING &&
        (e = index_strings(r, &kv)))
        return e;
    g->kv[g->n_kv++] = kv;
    return TANDEM_OK;
}

static tandem_err parse_kvs(struct rd *r, struct gguf *g, uint64_t n_kv) {
    for (uint64_t i = 0; i < n_kv; i++) {
        tandem_err e = mem_array_grow((void **)&g->kv, &g->cap_kv, (size_t)i + 1, sizeof *g->kv,
                                      (size_t)n_kv);
        if (e)
            return fail_code(r, e, r->pos, "out of memory");
        if ((e = parse_kv(r, g, i)))
            return e;
    }
    r->what[0] = '\0';
    return TANDEM_OK;
}

static tandem_err parse_alignment(struct rd *r, struct gguf *g) {
    const struct gguf_kv *kv = gguf_kv_find(g, ALIGNMENT_KEY);
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (!kv)
        return TANDEM_OK;
    snprintf(r->what, sizeof r->what, "key '%s'", ALIGNMENT_KEY);
    uint64_t value_off = (uint64_t)(kv->value - r->p);
    if (kv->type != GGUF_TYPE_UINT32)
        return fail(r, value_off - 4, "expected type UINT32, found %s", gguf_type_name(kv->type));
    uint32_t a = le32(kv->value);
    if (!a || (a & (a - 1)))
        return fail(r, value_off, "expected a power of two, found %" PRIu32, a);
    g->alignment = a;
    r->what[0] = '\0';
    return TANDEM_OK;
}

/* --- tensor infos ---------------------------------------------------------------- */

static void shape_str(char *dst, size_t cap, const struct gguf_tensor *t) {
    int o = snprintf(dst, cap, "(%" PRId64, t->ne[0]);
    for (uint32_t j = 1; j < t->n_dims && o > 0 && (size_t)o < cap; j++)
        o += snprintf(dst + o, cap - (size_t)o, ", %" PRId64, t->ne[j]);
    if (o > 0 && (size_t)o < cap)
        snprintf(dst + o, cap - (size_t)o, ")");
}

static tandem_err parse_tensor_name(struct rd *r, struct gguf *g, struct gguf_tensor *t,
                                    uint64_t i) {
    uint64_t first;
    what_index(r, "tensor", i);
    tandem_err e = rd_str(r, "tensor name", &t->name);
    if (e)
        return e;
    if (t->name.len >= GGUF_MAX_NAME)
        return fail(r, t->info_offset, "expected a name of at most %d bytes, found %" PRIu64 " bytes",
                    GGUF_MAX_NAME - 1, t->name.len);
    e = index_add(&g->tensor_index, t->name.ptr, t->name.len, i, &first);
    if (e == TANDEM_ERR_FORMAT) {
        char esc[176];
        escape(esc, sizeof esc, t->name.ptr, t->name.len);
        return fail(r, t->info_offset,
                    "expected a new tensor name, found duplicate '%s' (first at offset %" PRIu64 ")",
                    esc, g->tensors[first].info_offset);
    }
    if (e)
        return fail_code(r, e, t->info_offset, "out of memory");
    what_name(r, "tensor", t->name);
    return TANDEM_OK;
}

static tandem_err parse_tensor_shape(struct rd *r, struct gguf_tensor *t) {
    uint64_t off = r->pos, ne0_off, nel;
    tandem_err e = rd_u32(r, "dimension count", &t->n_dims);
    if (e)
        return e;
    if (t->n_dims < 1 || t->n_dims > 4)
        return fail(r, off, "expected 1 to 4 dimensions, found %" PRIu32, t->n_dims);
    ne0_off = r->pos;
    for (uint32_t j = 0; j < 4; j++)
        t->ne[j] = 1;
    for (uint32_t j = 0; j < t->n_dims; j++) {
        uint64_t v;
        char desc[32];
        off = r->pos;
        snprintf(desc, sizeof desc, "size of dimension %" PRIu32, j);
        if ((e = rd_u64(r, desc, &v)))
            return e;
        t->ne[j] = (int64_t)v;
        if (t->ne[j] < 0)
            return fail(r, off, "expected a non-negative size of dimension %" PRIu32 ", found %" PRId64,
                        j, t->ne[j]);
    }
    /* As ggml: the running product must stay representable in int64_t. */
    nel = (uint64_t)t->ne[0];
    for (uint32_t j = 1; j < t->n_dims; j++) {
        uint64_t n = (uint64_t)t->ne[j];
        if (n > 1 && nel > (uint64_t)INT64_MAX / n) {
            char shape[128];
            shape_str(shape, sizeof shape, t);
            return fail(r, ne0_off, "expected at most %" PRId64 " elements, found shape %s",
                        INT64_MAX, shape);
        }
        nel *= n;
    }
    return TANDEM_OK;
}

static tandem_err parse_tensor_type(struct rd *r, struct gguf_tensor *t) {
    uint64_t off = r->pos;
    tandem_err e = rd_u32(r, "ggml type", &t->type);
    if (e)
        return e;
    const struct ggml_type_info *ti = ggml_type_get(t->type);
    if (!ti && t->type < ggml_type_count())
        return fail(r, off, "expected a supported ggml type, found retired type %" PRIu32, t->type);
    if (!ti)
        return fail(r, off, "expected a ggml type below %" PRIu32 ", found %" PRIu32,
                    ggml_type_count(), t->type);
    e = ggml_type_tensor_bytes(t->type, t->ne, t->n_dims, &t->size);
    if (e == TANDEM_ERR_FORMAT)
        return fail(r, off,
                    "expected ne[0] to be a multiple of %" PRIu32 " (the %s block size), found %" PRId64,
                    ti->block_size, ti->name, t->ne[0]);
    if (e) {
        char shape[128];
        shape_str(shape, sizeof shape, t);
        return fail(r, off, "expected a size below 2^64 bytes, found %s of shape %s", ti->name,
                    shape);
    }
    return TANDEM_OK;
}

static tandem_err parse_tensor(struct rd *r, struct gguf *g, uint64_t i) {
    struct gguf_tensor t = {.info_offset = r->pos};
    tandem_err e = parse_tensor_name(r, g, &t, i);
    if (!e)
        e = parse_tensor_shape(r, &t);
    if (!e)
        e = parse_tensor_type(r, &t);
    if (!e)
        e = rd_u64(r, "data offset", &t.offset);
    if (!e)
        g->tensors[g->n_tensors++] = t;
    return e;
}

static tandem_err parse_tensors(struct rd *r, struct gguf *g, uint64_t n_tensors) {
    for (uint64_t i = 0; i < n_tensors; i++) {
        tandem_err e = mem_array_grow((void **)&g->tensors, &g->cap_tensors, (size_t)i + 1,
                                      sizeof *g->tensors, (size_t)n_tensors);
        if (e)
            return fail_code(r, e, r->pos, "out of memory");
        if ((e = parse_tensor(r, g, i)))
            return e;
    }
    r->what[0] = '\0';
    return TANDEM_OK;
}

/* --- data section ------------------------------------------------------------------ */

/* File offset of t's data offset field: the last field of its info. */
static uint64_t offset_field(const struct gguf_tensor *t) {
    return t->info_offset + 8 + t->name.len + 4 + 8ull * t->n_dims + 4;
}

static tandem_err place_data_section(struct rd *r, struct gguf *g) {
    uint64_t end = r->pos, a = g->alignment;
    if (!g->n_tensors) { /* as ggml: no padding without tensors */
        g->data_offset = end;
        return TANDEM_OK;
    }
    uint64_t pad = (a - end % a) % a;
    if (pad > left(r))
        return fail(r, end,
                    "expected %" PRIu64 " bytes of padding up to the data section at offset %" PRIu64
                    " (alignment %" PRIu64 "), found end of file",
                    pad, end + pad, a);
    g->data_offset = end + pad;
    return TANDEM_OK;
}

static tandem_err check_tensor_data(struct rd *r, struct gguf *g) {
    uint64_t a = g->alignment, expected = 0, avail = g->size - g->data_offset;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct gguf_tensor *t = &g->tensors[i];
        uint64_t off = offset_field(t);
        what_name(r, "tensor", t->name);
        if (t->offset % a)
            return fail(r, off, "expected a data offset that is a multiple of %" PRIu64 ", found %" PRIu64,
                        a, t->offset);
        if (t->offset != expected)
            return fail(r, off,
                        "expected data offset %" PRIu64 " (tensors are packed in order, each"
                        " padded to the alignment), found %" PRIu64,
                        expected, t->offset);
        if (t->offset > avail || t->size > avail - t->offset)
            return fail(r, off, "data extends past end of file (needs %" PRIu64 " bytes, %" PRIu64 " left)",
                        t->size, t->offset > avail ? 0 : avail - t->offset);
        /* size <= avail <= file size, so neither addition can wrap. */
        expected += t->size + (a - t->size % a) % a;
    }
    r->what[0] = '\0';
    return TANDEM_OK;
}

/* --- open / free --------------------------------------------------------------------- */

void gguf_free(struct gguf *g) {
    if (!g)
        return;
    for (uint64_t i = 0; i < g->n_kv; i++)
        mem_free((void *)g->kv[i].str_index);
    mem_free(g->kv);
    mem_free(g->tensors);
    mem_free(g->kv_index.slots);
    mem_free(g->tensor_index.slots);
    if (g->map)
        munmap(g->map, (size_t)g->size);
    mem_free(g);
}

static tandem_err parse(struct gguf *g, const char *name, char *err, size_t errlen) {
    struct rd r = {.p = g->base, .size = g->size, .name = name, .err = err, .errlen = errlen};
    uint64_t n_tensors = 0, n_kv = 0;
    tandem_err e = parse_header(&r, g, &n_tensors, &n_kv);
    if (!e)
        e = parse_kvs(&r, g, n_kv);
    if (!e)
        e = parse_alignment(&r, g);
    if (!e)
        e = parse_tensors(&r, g, n_tensors);
    if (!e)
        e = place_data_section(&r, g);
    if (!e)
        e = check_tensor_data(&r, g);
    return e;
}

/* Takes ownership of map (may be NULL) whether or not parsing succeeds. */
static tandem_err open_bytes(const uint8_t *data, uint64_t len, void *map, const char *name,
                             struct gguf **out, char *err, size_t errlen) {
    struct gguf *g = mem_calloc(1, sizeof *g);
    if (!g) {
        if (map)
            munmap(map, (size_t)len);
        tandem_errmsg(err, errlen, "%s: out of memory", name);
        return TANDEM_ERR_NOMEM;
    }
    g->base = data;
    g->size = len;
    g->map = map;
    tandem_err e = parse(g, name, err, errlen);
    if (e) {
        gguf_free(g);
        return e;
    }
    *out = g;
    return TANDEM_OK;
}

tandem_err gguf_open_memory(const void *data, size_t len, const char *name, struct gguf **out,
                            char *err, size_t errlen) {
    *out = NULL;
    if (!data && len)
        return TANDEM_ERR_INVAL;
    return open_bytes(data, len, NULL, name ? name : "(memory)", out, err, errlen);
}

tandem_err gguf_open(const char *path, struct gguf **out, char *err, size_t errlen) {
    struct stat st;
    void *map = NULL;
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        tandem_errmsg(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return TANDEM_ERR_IO;
    }
    if (fstat(fd, &st)) {
        tandem_errmsg(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return TANDEM_ERR_IO;
    }
    if (!S_ISREG(st.st_mode)) {
        tandem_errmsg(err, errlen, "%s: cannot read: %s", path,
                      S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
        close(fd);
        return TANDEM_ERR_IO;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size > SIZE_MAX) {
        close(fd);
        tandem_errmsg(err, errlen, "%s: cannot map: file too large", path);
        return TANDEM_ERR_TOOBIG;
    }
    if (size && (map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) {
        tandem_errmsg(err, errlen, "%s: cannot map: %s", path, strerror(errno));
        close(fd);
        return TANDEM_ERR_IO;
    }
    close(fd); /* the mapping keeps the file */
    return open_bytes(map, size, map, path, out, err, errlen);
}

/* --- handle facts ---------------------------------------------------------------------- */

uint32_t gguf_version(const struct gguf *g) {
    return g ? g->version : 0;
}

uint64_t gguf_file_size(const struct gguf *g) {
    return g ? g->size : 0;
}

uint64_t gguf_alignment(const struct gguf *g) {
    return g ? g->alignment : 0;
}

uint64_t gguf_data_offset(const struct gguf *g) {
    return g ? g->data_offset : 0;
}

uint64_t gguf_kv_count(const struct gguf *g) {
    return g ? g->n_kv : 0;
}

uint64_t gguf_tensor_count(const struct gguf *g) {
    return g ? g->n_tensors : 0;
}

bool gguf_str_eq(struct gguf_str s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && (n == 0 || memcmp(s.ptr, cstr, n) == 0);
}

const struct gguf_kv *gguf_kv_at(const struct gguf *g, uint64_t i) {
    return g && i < g->n_kv ? &g->kv[i] : NULL;
}

const struct gguf_kv *gguf_kv_find(const struct gguf *g, const char *key) {
    if (!g || !key)
        return NULL;
    uint64_t i = index_find(&g->kv_index, key, strlen(key));
    return i < g->n_kv ? &g->kv[i] : NULL;
}

const struct gguf_tensor *gguf_tensor_at(const struct gguf *g, uint64_t i) {
    return g && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct gguf_tensor *gguf_tensor_find(const struct gguf *g, const char *name) {
    if (!g || !name)
        return NULL;
    uint64_t i = index_find(&g->tensor_index, name, strlen(name));
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const uint8_t *gguf_header_bytes(const struct gguf *g) { return g ? g->base : NULL; }

const void *gguf_tensor_data(const struct gguf *g, const struct gguf_tensor *t) {
    if (!g || !t || !g->base)
        return NULL;
    return g->base + g->data_offset + t->offset;
}

/* --- value conversion --------------------------------------------------------------------- */

static bool is_int(enum gguf_type t) {
    return t <= GGUF_TYPE_INT32 || t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_INT64;
}

static bool is_signed(enum gguf_type t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

/* Decodes an integer of type t at p as a sign and magnitude. */
static void decode_int(enum gguf_type t, const uint8_t *p, bool *neg, uint64_t *mag) {
    int64_t s = 0;
    uint64_t u = 0;
    switch (t) {
    case GGUF_TYPE_UINT8: u = p[0]; break;
    case GGUF_TYPE_UINT16: u = le16(p); break;
    case GGUF_TYPE_UINT32: u = le32(p); break;
    case GGUF_TYPE_UINT64: u = le64(p); break;
    case GGUF_TYPE_INT8: s = (int8_t)p[0]; break;
    case GGUF_TYPE_INT16: s = (int16_t)le16(p); break;
    case GGUF_TYPE_INT32: s = (int32_t)le32(p); break;
    default: s = (int64_t)le64(p); break; /* INT64 */
    }
    if (!is_signed(t)) {
        *neg = false;
        *mag = u;
    } else {
        *neg = s < 0;
        *mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    }
}

static tandem_err to_u64(enum gguf_type t, const uint8_t *p, uint64_t *out) {
    bool neg;
    uint64_t mag;
    decode_int(t, p, &neg, &mag);
    if (neg)
        return TANDEM_ERR_RANGE;
    *out = mag;
    return TANDEM_OK;
}

static tandem_err to_i64(enum gguf_type t, const uint8_t *p, int64_t *out) {
    bool neg;
    uint64_t mag;
    decode_int(t, p, &neg, &mag);
    if (!neg && mag > (uint64_t)INT64_MAX)
        return TANDEM_ERR_RANGE;
    /* mag of a negative int64 is at most 2^63: -(mag - 1) - 1 cannot overflow */
    *out = neg ? -(int64_t)(mag - 1) - 1 : (int64_t)mag;
    return TANDEM_OK;
}

static double to_f64(enum gguf_type t, const uint8_t *p) {
    if (t == GGUF_TYPE_FLOAT32) {
        uint32_t bits = le32(p);
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    uint64_t bits = le64(p);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* Points *p at kv's scalar value after checking its type is accepted by ok. */
static tandem_err scalar_at(const struct gguf_kv *kv, bool (*ok)(enum gguf_type),
                            const uint8_t **p) {
    if (!kv)
        return TANDEM_ERR_NOTFOUND;
    if (!ok(kv->type))
        return TANDEM_ERR_TYPE;
    if (!kv->value || kv->value_len < gguf_type_size(kv->type))
        return TANDEM_ERR_FORMAT;
    *p = kv->value;
    return TANDEM_OK;
}

/* Points *p at element i of an array kv whose element type is accepted by ok. */
static tandem_err elem_at(const struct gguf_kv *kv, uint64_t i, bool (*ok)(enum gguf_type),
                          const uint8_t **p) {
    if (!kv)
        return TANDEM_ERR_NOTFOUND;
    if (kv->type != GGUF_TYPE_ARRAY || !ok(kv->arr_type))
        return TANDEM_ERR_TYPE;
    if (i >= kv->arr_count)
        return TANDEM_ERR_RANGE;
    uint64_t es = gguf_type_size(kv->arr_type);
    if (!kv->value || kv->value_len < ARRAY_HDR_BYTES ||
        i >= (kv->value_len - ARRAY_HDR_BYTES) / es)
        return TANDEM_ERR_FORMAT;
    *p = kv->value + ARRAY_HDR_BYTES + i * es;
    return TANDEM_OK;
}

static bool is_float(enum gguf_type t) {
    return t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64;
}

static bool is_bool(enum gguf_type t) {
    return t == GGUF_TYPE_BOOL;
}

tandem_err gguf_kv_u64(const struct gguf_kv *kv, uint64_t *out) {
    const uint8_t *p;
    tandem_err e = scalar_at(kv, is_int, &p);
    return e ? e : to_u64(kv->type, p, out);
}

tandem_err gguf_kv_i64(const struct gguf_kv *kv, int64_t *out) {
    const uint8_t *p;
    tandem_err e = scalar_at(kv, is_int, &p);
    return e ? e : to_i64(kv->type, p, out);
}

tandem_err gguf_kv_f64(const struct gguf_kv *kv, double *out) {
    const uint8_t *p;
    tandem_err e = scalar_at(kv, is_float, &p);
    if (!e)
        *out = to_f64(kv->type, p);
    return e;
}

tandem_err gguf_kv_bool(const struct gguf_kv *kv, bool *out) {
    const uint8_t *p;
    tandem_err e = scalar_at(kv, is_bool, &p);
    if (!e)
        *out = p[0] != 0;
    return e;
}

/* Decodes the string whose length field is at value[off] of a kv. */
static tandem_err str_at(const struct gguf_kv *kv, uint64_t off, struct gguf_str *out) {
    if (!kv->value || off > kv->value_len || kv->value_len - off < 8)
        return TANDEM_ERR_FORMAT;
    uint64_t len = le64(kv->value + off);
    if (len > kv->value_len - off - 8)
        return TANDEM_ERR_FORMAT;
    out->ptr = (const char *)kv->value + off + 8;
    out->len = len;
    return TANDEM_OK;
}

tandem_err gguf_kv_str(const struct gguf_kv *kv, struct gguf_str *out) {
    if (!kv)
        return TANDEM_ERR_NOTFOUND;
    if (kv->type != GGUF_TYPE_STRING)
        return TANDEM_ERR_TYPE;
    return str_at(kv, 0, out);
}

tandem_err gguf_kv_arr(const struct gguf_kv *kv, enum gguf_type *elem, uint64_t *count) {
    if (!kv)
        return TANDEM_ERR_NOTFOUND;
    if (kv->type != GGUF_TYPE_ARRAY)
        return TANDEM_ERR_TYPE;
    *elem = kv->arr_type;
    *count = kv->arr_count;
    return TANDEM_OK;
}

tandem_err gguf_kv_arr_u64(const struct gguf_kv *kv, uint64_t i, uint64_t *out) {
    const uint8_t *p;
    tandem_err e = elem_at(kv, i, is_int, &p);
    return e ? e : to_u64(kv->arr_type, p, out);
}

tandem_err gguf_kv_arr_i64(const struct gguf_kv *kv, uint64_t i, int64_t *out) {
    const uint8_t *p;
    tandem_err e = elem_at(kv, i, is_int, &p);
    return e ? e : to_i64(kv->arr_type, p, out);
}

tandem_err gguf_kv_arr_f64(const struct gguf_kv *kv, uint64_t i, double *out) {
    const uint8_t *p;
    tandem_err e = elem_at(kv, i, is_float, &p);
    if (!e)
        *out = to_f64(kv->arr_type, p);
    return e;
}

tandem_err gguf_kv_arr_bool(const struct gguf_kv *kv, uint64_t i, bool *out) {
    const uint8_t *p;
    tandem_err e = elem_at(kv, i, is_bool, &p);
    if (!e)
        *out = p[0] != 0;
    return e;
}

tandem_err gguf_kv_arr_str(const struct gguf_kv *kv, uint64_t i, struct gguf_str *out) {
    if (!kv)
        return TANDEM_ERR_NOTFOUND;
    if (kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_STRING)
        return TANDEM_ERR_TYPE;
    if (i >= kv->arr_count)
        return TANDEM_ERR_RANGE;
    if (kv->str_index)
        return str_at(kv, kv->str_index[i], out);
    uint64_t off = ARRAY_HDR_BYTES; /* hand-built kv: walk, checking each step */
    for (uint64_t j = 0; j < i; j++) {
        tandem_err e = str_at(kv, off, out);
        if (e)
            return e;
        off += 8 + out->len;
    }
    return str_at(kv, off, out);
}

/* --- lookup + read ------------------------------------------------------------------------ */

tandem_err gguf_get_u64(const struct gguf *g, const char *key, uint64_t *out) {
    return gguf_kv_u64(gguf_kv_find(g, key), out);
}

tandem_err gguf_get_i64(const struct gguf *g, const char *key, int64_t *out) {
    return gguf_kv_i64(gguf_kv_find(g, key), out);
}

tandem_err gguf_get_f64(const struct gguf *g, const char *key, double *out) {
    return gguf_kv_f64(gguf_kv_find(g, key), out);
}

tandem_err gguf_get_bool(const struct gguf *g, const char *key, bool *out) {
    return gguf_kv_bool(gguf_kv_find(g, key), out);
}

tandem_err gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out) {
    return gguf_kv_str(gguf_kv_find(g, key), out);
}

tandem_err gguf_get_arr(const struct gguf *g, const char *key, enum gguf_type *elem,
                        uint64_t *count) {
    return gguf_kv_arr(gguf_kv_find(g, key), elem, count);
}
