/* plan.c: what one llama-server process allocates, computed from the GGUF
 * header alone.
 *
 * plan_model_open() reads the header once and keeps only the facts below
 * (per-layer heads, which layers are recurrent or sliding-window, tensor bytes
 * per layer); plan_model_footprint() is then pure arithmetic, so planning a
 * set of models under many settings costs microseconds.
 *
 * Each rule mirrors the pinned engine (llama.cpp b11434):
 * - Cells (llama-context.cpp): n_ctx is padded to 256; without a unified KV
 *   pool each of the n_seq slots gets PAD(n_ctx / n_seq, 256) cells.
 * - KV (llama-kv-cache.cpp): per attention layer, per stream (1 unified,
 *   else one per slot), cells x (row(type_k, k_dim x kv_heads) +
 *   row(type_v, v_dim x kv_heads)). Sliding-window layers (llama-kv-cache-
 *   iswa.cpp) hold PAD(min(cells, n_swa x (unified ? n_seq : 1) + n_ubatch),
 *   256) cells unless --swa-full.
 * - Recurrent state (llama-memory-recurrent.cpp, llama-hparams.cpp): per
 *   recurrent layer max(1, n_seq) rows of f32 conv state
 *   ((d_conv - 1) x (d_inner + 2 n_group d_state)) plus SSM state
 *   (d_state x d_inner).
 * - Weights (llama-model.cpp): -ngl N puts repeating layers
 *   [n_layer + 1 - N, n_layer) and, for N >= 1, the output layer on the GPU;
 *   token embeddings stay on the host; a model without output.weight uses a
 *   duplicate of the token embeddings as its output layer.
 * - Output buffer (llama-context.cpp output_reserve): f32 logits for every
 *   slot, plus embeddings when the engine runs the model in embeddings mode
 *   (the kev, laya and clef decision heads). It lives on the host.
 * - Compute buffer: no closed form exists (ggml-alloc reuses memory across
 *   the graph); compute_bytes() models its largest live set, see there. */
#include "plan/plan.h"

#include <stdio.h>
#include <string.h>

#include "gguf/ggml_types.h"
#include "gguf/gguf.h"
#include "base/hash.h"
#include "base/mem.h"

#define GGML_TYPE_F32 0
#define GGML_TYPE_F16 1
#define MIB (1024ull * 1024ull)

enum layer_kind { LAYER_ATTN, LAYER_SWA, LAYER_RECURRENT, LAYER_NONE };

struct layer {
    enum layer_kind kind;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint64_t weight_bytes; /* tensors named blk.<i>.* */
};

struct plan_model {
    char *path;
    char arch[64];
    char decision[32];
    char header_sha256[HASH_SHA256_HEX_LEN + 1];
    uint32_t n_layer, ctx_train, n_embd, n_embd_out, n_vocab;
    uint32_t ffn_width;       /* rows of blk.0.ffn_up (2 x n_ff for fused GLU) */
    uint32_t k_dim, v_dim;    /* per-head key and value widths */
    uint32_t n_swa;           /* sliding window, 0 = none */
    uint32_t ssm_conv, ssm_inner, ssm_state, ssm_group;
    bool encoder;             /* no KV cache: the whole prompt is one micro-batch */
    bool embeddings;          /* the engine runs it in embeddings mode */
    uint64_t input_bytes;     /* token embeddings (host) */
    uint64_t output_bytes;    /* output layer: output.weight, final norm, heads */
    bool tied_output;         /* no output.weight: the token embeddings serve */
    uint64_t n_params;        /* elements of every tensor */
    uint64_t weight_bytes;    /* data bytes of every tensor */
    struct layer *layers;
};

/* --- the defaults and small helpers ---------------------------------------- */

struct plan_settings plan_default_settings(void) {
    return (struct plan_settings){
        .ctx = 0,
        .ngl = PLAN_NGL_AUTO,
        .parallel = 1,
        .kv_unified = false,
        .type_k = GGML_TYPE_F16,
        .type_v = GGML_TYPE_F16,
        .flash_attn = false,
        .batch = 0,
        .ubatch = 0,
        .kv_offload = true,
        .swa_full = false,
        .gpu = true,
        .overhead = PLAN_OVERHEAD_DEFAULT,
    };
}

uint64_t plan_footprint_device_total(const struct plan_footprint *f, enum plan_device d) {
    uint64_t sum = 0;
    for (int p = 0; p < PLAN_PART_COUNT; p++)
        sum += f->bytes[d][p];
    return sum;
}

uint64_t plan_footprint_total(const struct plan_footprint *f) {
    return plan_footprint_device_total(f, PLAN_DEVICE_GPU) +
           plan_footprint_device_total(f, PLAN_DEVICE_HOST);
}

const char *plan_device_name(enum plan_device d) {
    return d == PLAN_DEVICE_GPU ? "gpu" : d == PLAN_DEVICE_HOST ? "host" : "?";
}

const char *plan_part_name(enum plan_part p) {
    static const char *names[PLAN_PART_COUNT] = {"weights", "kv",     "recurrent",
                                                 "compute", "output", "overhead"};
    return (unsigned)p < PLAN_PART_COUNT ? names[p] : "?";
}

const char *plan_source_name(enum plan_source s) {
    switch (s) {
    case PLAN_SOURCE_MODEL: return "model";
    case PLAN_SOURCE_MEASURED: return "measured";
    case PLAN_SOURCE_CONFIG: return "config";
    }
    return "?";
}

static uint32_t pad256(uint64_t n) {
    uint64_t p = (n + 255) / 256 * 256;
    return p > UINT32_MAX ? UINT32_MAX : (uint32_t)p;
}

static uint64_t row_bytes(uint32_t type, uint64_t n) {
    const struct ggml_type_info *t = ggml_type_get(type);
    return t ? n / t->block_size * t->type_size : 0;
}

/* --- reading the facts ------------------------------------------------------- */

/* "<arch>.<suffix>" as u32 into *out; returns whether it was present. */
static bool arch_u32(const struct gguf *g, const char *arch, const char *suffix, uint32_t *out) {
    char key[160];
    uint64_t v;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (gguf_get_u64(g, key, &v) != TANDEM_OK || v > UINT32_MAX)
        return false;
    *out = (uint32_t)v;
    return true;
}

/* A per-layer count stored either as a scalar or as an array of n_layer. */
static tandem_err arch_per_layer(const struct gguf *g, const char *arch, const char *suffix,
                                 uint32_t n_layer, uint32_t fallback, uint32_t *out,
                                 char *err, size_t errlen) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const struct gguf_kv *kv = gguf_kv_find(g, key);
    for (uint32_t i = 0; i < n_layer; i++)
        out[i] = fallback;
    if (!kv)
        return TANDEM_OK;
    uint64_t v;
    if (kv->type != GGUF_TYPE_ARRAY) {
        if (gguf_kv_u64(kv, &v) != TANDEM_OK || v > UINT32_MAX)
            goto bad;
        for (uint32_t i = 0; i < n_layer; i++)
            out[i] = (uint32_t)v;
        return TANDEM_OK;
    }
    if (kv->arr_count != n_layer)
        goto bad;
    for (uint32_t i = 0; i < n_layer; i++) {
        if (gguf_kv_arr_u64(kv, i, &v) != TANDEM_OK || v > UINT32_MAX)
            goto bad;
        out[i] = (uint32_t)v;
    }
    return TANDEM_OK;
bad:
    tandem_errmsg(err, errlen, "%s: expected an unsigned integer or an array of %u of them",
                  key, n_layer);
    return TANDEM_ERR_FORMAT;
}

static bool arch_in(const char *arch, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(arch, *list))
            return true;
    return false;
}

/* Architectures whose engine graph has no KV cache (llama_model::create_memory
 * returns no memory for them): encoders. */
static const char *const ENCODER_ARCHS[] = {
    "bert", "jina-bert-v2", "jina-bert-v3", "nomic-bert", "nomic-bert-moe", "neo-bert",
    "eurobert", "modern-bert", "gemma-embedding", "clef", NULL};

/* Hybrid architectures whose recurrent layers follow full_attention_interval. */
static const char *const HYBRID_ARCHS[] = {"qwen35", "qwen35moe", "qwen3next", NULL};

/* Architectures with a standard sliding-window pattern: n of every group of
 * `period` layers are sliding, the last one dense (hparams.set_swa_pattern). */
struct swa_rule {
    const char *arch;
    uint32_t period;
};
static const struct swa_rule SWA_RULES[] = {
    {"gemma2", 2}, {"gemma3", 6}, {"cohere2", 4}, {"gemma3n", 5}, {NULL, 0}};

/* Decision heads the engine runs in embeddings mode (several outputs per
 * sequence, read from hidden states): kev, laya, clef. */
static const char *const EMBEDDING_DECISIONS[] = {"kev", "laya", "clef", NULL};

static tandem_err read_layer_kinds(const struct gguf *g, struct plan_model *m, char *err,
                                   size_t errlen) {
    uint32_t interval = 4, period = 0;
    bool hybrid = arch_in(m->arch, HYBRID_ARCHS);
    if (hybrid)
        arch_u32(g, m->arch, "full_attention_interval", &interval);
    for (const struct swa_rule *r = SWA_RULES; r->arch && m->n_swa; r++)
        if (!strcmp(r->arch, m->arch))
            period = r->period;
    arch_u32(g, m->arch, "attention.sliding_window_pattern", &period);
    if (hybrid && interval == 0) {
        tandem_errmsg(err, errlen, "%s.full_attention_interval: must be at least 1", m->arch);
        return TANDEM_ERR_FORMAT;
    }
    for (uint32_t i = 0; i < m->n_layer; i++) {
        struct layer *l = &m->layers[i];
        if (m->encoder)
            l->kind = LAYER_NONE;
        else if (hybrid && (i + 1) % interval != 0)
            l->kind = LAYER_RECURRENT;
        else if (m->n_swa && period && i % period < period - 1)
            l->kind = LAYER_SWA;
        else
            l->kind = LAYER_ATTN;
    }
    return TANDEM_OK;
}

/* Parses "blk.<n>." and returns n, or -1 for a tensor outside the blocks. */
static long block_of(struct gguf_str name) {
    if (name.len < 5 || memcmp(name.ptr, "blk.", 4))
        return -1;
    long n = 0;
    uint64_t i = 4;
    for (; i < name.len && name.ptr[i] >= '0' && name.ptr[i] <= '9' && n < 1000000; i++)
        n = n * 10 + (name.ptr[i] - '0');
    return i > 4 && i < name.len && name.ptr[i] == '.' ? n : -1;
}

static void read_tensor_bytes(const struct gguf *g, struct plan_model *m) {
    bool has_output = false;
    for (uint64_t i = 0; i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        long b = block_of(t->name);
        m->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        m->weight_bytes += t->size;
        if (b >= 0 && (uint64_t)b < m->n_layer)
            m->layers[b].weight_bytes += t->size;
        else if (gguf_str_eq(t->name, "token_embd.weight"))
            m->input_bytes += t->size;
        else {
            m->output_bytes += t->size;
            has_output |= gguf_str_eq(t->name, "output.weight");
        }
    }
    m->tied_output = !has_output && !m->encoder; /* TENSOR_DUPLICATED token embeddings */
}

static tandem_err read_str(const struct gguf *g, const char *key, char *out, size_t cap) {
    struct gguf_str s;
    tandem_err e = gguf_get_str(g, key, &s);
    if (e != TANDEM_OK)
        return e;
    if (s.len >= cap)
        return TANDEM_ERR_TOOBIG;
    memcpy(out, s.ptr, s.len);
    out[s.len] = '\0';
    return TANDEM_OK;
}

static tandem_err require_u32(const struct gguf *g, const char *arch, const char *suffix,
                              uint32_t *out, char *err, size_t errlen) {
    if (arch_u32(g, arch, suffix, out) && *out > 0)
        return TANDEM_OK;
    tandem_errmsg(err, errlen, "%s.%s: missing or not a positive 32-bit integer", arch, suffix);
    return TANDEM_ERR_FORMAT;
}

static tandem_err read_facts(const struct gguf *g, struct plan_model *m, char *err,
                             size_t errlen) {
    const char *a = m->arch;
    tandem_err e;
    if ((e = require_u32(g, a, "block_count", &m->n_layer, err, errlen)) ||
        (e = require_u32(g, a, "embedding_length", &m->n_embd, err, errlen)) ||
        (e = require_u32(g, a, "context_length", &m->ctx_train, err, errlen)))
        return e;
    if (m->n_layer > 4096) {
        tandem_errmsg(err, errlen, "%s.block_count: %u layers is implausible", a, m->n_layer);
        return TANDEM_ERR_FORMAT;
    }
    m->n_embd_out = m->n_embd;
    arch_u32(g, a, "embedding_length_out", &m->n_embd_out);
    arch_u32(g, a, "feed_forward_length", &m->ffn_width);
    const struct gguf_tensor *up = gguf_tensor_find(g, "blk.0.ffn_up.weight");
    if (up && up->ne[1] > 0 && up->ne[1] <= UINT32_MAX)
        m->ffn_width = (uint32_t)up->ne[1];
    arch_u32(g, a, "attention.sliding_window", &m->n_swa);
    arch_u32(g, a, "ssm.conv_kernel", &m->ssm_conv);
    arch_u32(g, a, "ssm.inner_size", &m->ssm_inner);
    arch_u32(g, a, "ssm.state_size", &m->ssm_state);
    arch_u32(g, a, "ssm.group_count", &m->ssm_group);
    enum gguf_type elem;
    uint64_t n_vocab = 0;
    gguf_get_arr(g, "tokenizer.ggml.tokens", &elem, &n_vocab);
    m->n_vocab = n_vocab > UINT32_MAX ? UINT32_MAX : (uint32_t)n_vocab;
    bool causal = true;
    char key[160];
    snprintf(key, sizeof key, "%s.attention.causal", a);
    gguf_get_bool(g, key, &causal);
    m->encoder = !causal || arch_in(a, ENCODER_ARCHS);
    m->embeddings = arch_in(m->decision, EMBEDDING_DECISIONS);

    m->layers = mem_calloc(m->n_layer, sizeof *m->layers);
    uint32_t *tmp = mem_alloc_array(m->n_layer, sizeof *tmp);
    if (!m->layers || !tmp) {
        mem_free(tmp);
        return TANDEM_ERR_NOMEM;
    }
    e = arch_per_layer(g, a, "attention.head_count", m->n_layer, 0, tmp, err, errlen);
    for (uint32_t i = 0; !e && i < m->n_layer; i++)
        m->layers[i].n_head = tmp[i];
    uint32_t head0 = m->n_layer ? m->layers[0].n_head : 0;
    if (!e)
        e = arch_per_layer(g, a, "attention.head_count_kv", m->n_layer, 0, tmp, err, errlen);
    for (uint32_t i = 0; !e && i < m->n_layer; i++)
        m->layers[i].n_head_kv = gguf_kv_find(g, key) || tmp[i] ? tmp[i] : m->layers[i].n_head;
    mem_free(tmp);
    if (e)
        return e;
    if (head0 == 0) {
        tandem_errmsg(err, errlen, "%s.attention.head_count: missing or zero", a);
        return TANDEM_ERR_FORMAT;
    }
    m->k_dim = m->v_dim = m->n_embd / head0;
    arch_u32(g, a, "attention.key_length", &m->k_dim);
    arch_u32(g, a, "attention.value_length", &m->v_dim);
    return read_layer_kinds(g, m, err, errlen);
}

tandem_err plan_model_open(const char *path, struct plan_model **out, char *err, size_t errlen) {
    *out = NULL;
    struct gguf *g = NULL;
    tandem_err e = gguf_open(path, &g, err, errlen);
    if (e != TANDEM_OK)
        return e;
    struct plan_model *m = mem_calloc(1, sizeof *m);
    if (!m || !(m->path = mem_strdup(path))) {
        e = TANDEM_ERR_NOMEM;
        goto done;
    }
    if (read_str(g, "general.architecture", m->arch, sizeof m->arch) != TANDEM_OK) {
        tandem_errmsg(err, errlen, "%s: general.architecture: missing or not a short string",
                      path);
        e = TANDEM_ERR_FORMAT;
        goto done;
    }
    char key[160];
    snprintf(key, sizeof key, "%s.decision.type", m->arch);
    read_str(g, key, m->decision, sizeof m->decision);
    char msg[256] = "";
    if ((e = read_facts(g, m, msg, sizeof msg)) != TANDEM_OK) {
        tandem_errmsg(err, errlen, "%s: %s", path, msg[0] ? msg : tandem_strerror(e));
        goto done;
    }
    read_tensor_bytes(g, m);
    uint64_t header = gguf_data_offset(g) < gguf_file_size(g) ? gguf_data_offset(g)
                                                               : gguf_file_size(g);
    e = hash_buffer_sha256(gguf_header_bytes(g), header, m->header_sha256);
done:
    gguf_free(g);
    if (e != TANDEM_OK)
        plan_model_free(m);
    else
        *out = m;
    return e;
}

void plan_model_free(struct plan_model *m) {
    if (!m)
        return;
    mem_free(m->layers);
    mem_free(m->path);
    mem_free(m);
}

const char *plan_model_path(const struct plan_model *m) { return m->path; }
const char *plan_model_arch(const struct plan_model *m) { return m->arch; }
const char *plan_model_decision_type(const struct plan_model *m) { return m->decision; }
uint32_t plan_model_n_layer(const struct plan_model *m) { return m->n_layer; }
uint32_t plan_model_ctx_train(const struct plan_model *m) { return m->ctx_train; }
bool plan_model_is_encoder(const struct plan_model *m) { return m->encoder; }
const char *plan_model_header_sha256(const struct plan_model *m) { return m->header_sha256; }
uint64_t plan_model_n_params(const struct plan_model *m) { return m->n_params; }
uint64_t plan_model_weight_bytes(const struct plan_model *m) { return m->weight_bytes; }

/* --- the arithmetic ------------------------------------------------------------ */

void plan_model_resolve(const struct plan_model *m, const struct plan_settings *s,
                        struct plan_settings *out) {
    *out = *s;
    if (out->ctx == 0)
        out->ctx = m->ctx_train;
    if (out->parallel == 0)
        out->parallel = 1;
    if (out->batch == 0)
        out->batch = m->encoder ? out->ctx : 2048;
    if (out->ubatch == 0)
        out->ubatch = m->encoder ? out->batch : 512;
    if (!m->encoder && out->batch > out->ctx)
        out->batch = out->ctx; /* causal attention: the batch is limited by the context */
    if (m->embeddings && out->batch > out->ubatch)
        out->batch = out->ubatch; /* embeddings mode processes one micro-batch at a time */
    if (out->ubatch > out->batch)
        out->ubatch = out->batch;
    if (!out->gpu)
        out->ngl = 0;
    else if (out->ngl != PLAN_NGL_AUTO && (uint32_t)out->ngl > m->n_layer + 1)
        out->ngl = (int32_t)m->n_layer + 1;
    if (out->overhead == PLAN_OVERHEAD_DEFAULT)
        out->overhead = out->gpu ? PLAN_GPU_OVERHEAD_BYTES : 0;
}

/* Cells per stream and the number of streams (llama-context.cpp). */
static void cells(const struct plan_settings *s, uint32_t *per_stream, uint32_t *streams) {
    uint32_t n_ctx = pad256(s->ctx);
    if (s->kv_unified) {
        *per_stream = n_ctx;
        *streams = 1;
    } else {
        *per_stream = pad256(n_ctx / s->parallel);
        *streams = s->parallel;
    }
}

static bool layer_on_gpu(const struct plan_model *m, const struct plan_settings *s, uint32_t il) {
    uint32_t start = (uint32_t)s->ngl >= m->n_layer + 1 ? 0 : m->n_layer + 1 - (uint32_t)s->ngl;
    return s->gpu && s->ngl > 0 && il >= start;
}

static void add_weights(const struct plan_model *m, const struct plan_settings *s,
                        struct plan_footprint *f) {
    uint64_t *host = &f->bytes[PLAN_DEVICE_HOST][PLAN_PART_WEIGHTS];
    uint64_t *gpu = &f->bytes[PLAN_DEVICE_GPU][PLAN_PART_WEIGHTS];
    for (uint32_t il = 0; il < m->n_layer; il++) {
        bool on_gpu = layer_on_gpu(m, s, il);
        f->n_layer_gpu += on_gpu;
        *(on_gpu ? gpu : host) += m->layers[il].weight_bytes;
    }
    /* The output layer follows ngl >= 1; a tied output is a second copy of
     * the token embeddings on the GPU, and the same mapped bytes on the host. */
    if (s->gpu && s->ngl >= 1)
        *gpu += m->output_bytes + (m->tied_output ? m->input_bytes : 0);
    else
        *host += m->output_bytes;
    *host += m->input_bytes;
}

/* Cells per stream of a sliding-window layer (llama-kv-cache-iswa.cpp). */
static uint64_t swa_cells(const struct plan_model *m, const struct plan_settings *s,
                          uint32_t per_stream) {
    if (!m->n_swa || s->swa_full)
        return per_stream;
    uint64_t want = (uint64_t)m->n_swa * (s->kv_unified ? s->parallel : 1) + s->ubatch;
    return pad256(want < per_stream ? want : per_stream);
}

static void add_kv(const struct plan_model *m, const struct plan_settings *s,
                   struct plan_footprint *f) {
    uint32_t per_stream, streams;
    cells(s, &per_stream, &streams);
    uint64_t n_swa = swa_cells(m, s, per_stream);
    for (uint32_t il = 0; il < m->n_layer; il++) {
        const struct layer *l = &m->layers[il];
        if ((l->kind != LAYER_ATTN && l->kind != LAYER_SWA) || l->n_head_kv == 0)
            continue;
        uint64_t row = row_bytes(s->type_k, (uint64_t)m->k_dim * l->n_head_kv) +
                       row_bytes(s->type_v, (uint64_t)m->v_dim * l->n_head_kv);
        uint64_t n = l->kind == LAYER_SWA ? n_swa : per_stream;
        bool gpu = s->kv_offload && layer_on_gpu(m, s, il);
        f->bytes[gpu ? PLAN_DEVICE_GPU : PLAN_DEVICE_HOST][PLAN_PART_KV] += row * n * streams;
    }
}

static void add_recurrent(const struct plan_model *m, const struct plan_settings *s,
                          struct plan_footprint *f) {
    uint64_t conv = m->ssm_conv ? m->ssm_conv - 1 : 0;
    uint64_t r = conv * ((uint64_t)m->ssm_inner + 2ull * m->ssm_group * m->ssm_state);
    uint64_t state = (uint64_t)m->ssm_state * m->ssm_inner;
    uint64_t rows = s->parallel ? s->parallel : 1;
    for (uint32_t il = 0; il < m->n_layer; il++) {
        if (m->layers[il].kind != LAYER_RECURRENT)
            continue;
        bool gpu = s->kv_offload && layer_on_gpu(m, s, il);
        f->bytes[gpu ? PLAN_DEVICE_GPU : PLAN_DEVICE_HOST][PLAN_PART_RECURRENT] +=
            (r + state) * 4 * rows;
    }
}

/* Scores of the widest attention layer: u x cells x heads f32. */
static uint64_t max_scores(const struct plan_model *m, uint64_t u, uint64_t n_kv,
                           uint64_t n_kv_swa) {
    uint64_t best = 0;
    for (uint32_t il = 0; il < m->n_layer; il++) {
        const struct layer *l = &m->layers[il];
        uint64_t cells = m->encoder ? u : l->kind == LAYER_SWA ? n_kv_swa : n_kv;
        if (l->kind == LAYER_RECURRENT)
            continue;
        if (u * cells * l->n_head * 4 > best)
            best = u * cells * l->n_head * 4;
    }
    return best;
}

static bool has_kind(const struct plan_model *m, enum layer_kind kind) {
    for (uint32_t il = 0; il < m->n_layer; il++)
        if (m->layers[il].kind == kind)
            return true;
    return false;
}

/* The worst-case graph buffer for a micro-batch of u tokens over n_kv cells
 * per stream. The graph's inputs (the attention masks, f32 without flash
 * attention, f16 with it) live throughout; on top of them the peak is the
 * larger of two phases:
 * - a layer: without flash attention the u x n_kv x heads f32 score matrix,
 *   plus FFN activations (2 x u x ffn width) and residual-stream copies;
 * - the output head: f32 logits for every output row (u rows in embeddings
 *   mode, one per slot otherwise) plus residual-stream copies.
 * The residual multipliers (2.4 and 8 hidden widths in a layer, 5 in the
 * head, 8 KiB per token without flash attention) were fitted to the pinned
 * engine's CPU buffers; docs/planner-accuracy.md checks the whole formula
 * against every measured case. */
static uint64_t compute_bytes(const struct plan_model *m, const struct plan_settings *s) {
    uint32_t per_stream, streams;
    cells(s, &per_stream, &streams);
    uint64_t u = s->ubatch;
    uint64_t n_kv = m->encoder ? u : per_stream;
    uint64_t n_kv_swa = swa_cells(m, s, per_stream);
    uint64_t mask_elt = s->flash_attn ? 2 : 4;
    uint64_t inputs = 0;
    if (m->encoder || has_kind(m, LAYER_ATTN))
        inputs += u * n_kv * mask_elt;
    if (!m->encoder && has_kind(m, LAYER_SWA))
        inputs += u * n_kv_swa * mask_elt;
    uint64_t hidden = u * m->n_embd * 4, ffn = u * m->ffn_width * 4;
    uint64_t layer = s->flash_attn ? 2 * ffn + 8 * hidden
                                   : max_scores(m, u, n_kv, n_kv_swa) + 2 * ffn + hidden * 12 / 5;
    uint64_t outputs = m->embeddings ? u : (s->parallel < u ? s->parallel : u);
    uint64_t head = m->encoder ? 0
                               : outputs * m->n_vocab * 4 + 5 * hidden +
                                     (s->flash_attn ? 0 : 8192 * u);
    return inputs + (layer > head ? layer : head);
}

static uint64_t output_bytes(const struct plan_model *m, const struct plan_settings *s) {
    uint64_t per_output = m->n_vocab + (m->embeddings && !m->encoder ? m->n_embd_out : 0);
    return per_output * 4 * s->parallel;
}

tandem_err plan_model_footprint(const struct plan_model *m, const struct plan_settings *in,
                                struct plan_footprint *f) {
    memset(f, 0, sizeof *f);
    struct plan_settings s;
    plan_model_resolve(m, in, &s);
    if (s.ngl == PLAN_NGL_AUTO || s.parallel == 0 || s.ctx == 0)
        return TANDEM_ERR_INVAL;
    uint32_t per_stream, streams;
    cells(&s, &per_stream, &streams);
    f->n_ctx = per_stream * streams;
    f->n_ctx_slot = s.kv_unified ? per_stream / s.parallel : per_stream;
    f->n_ubatch = s.ubatch;
    f->ngl = s.ngl;
    add_weights(m, &s, f);
    if (!m->encoder) {
        add_kv(m, &s, f);
        add_recurrent(m, &s, f);
    }
    bool gpu_compute = s.gpu && s.ngl > 0;
    f->bytes[gpu_compute ? PLAN_DEVICE_GPU : PLAN_DEVICE_HOST][PLAN_PART_COMPUTE] =
        compute_bytes(m, &s);
    f->bytes[PLAN_DEVICE_HOST][PLAN_PART_OUTPUT] = output_bytes(m, &s);
    f->bytes[PLAN_DEVICE_GPU][PLAN_PART_OVERHEAD] = s.gpu ? s.overhead : 0;
    f->source[PLAN_PART_OVERHEAD] =
        in->overhead == PLAN_OVERHEAD_DEFAULT ? PLAN_SOURCE_MODEL : PLAN_SOURCE_CONFIG;
    return TANDEM_OK;
}

bool plan_settings_equal(const struct plan_settings *a, const struct plan_settings *b) {
    return a->ctx == b->ctx && a->ngl == b->ngl && a->parallel == b->parallel &&
           a->kv_unified == b->kv_unified && a->type_k == b->type_k && a->type_v == b->type_v &&
           a->flash_attn == b->flash_attn && a->batch == b->batch && a->ubatch == b->ubatch &&
           a->kv_offload == b->kv_offload && a->swa_full == b->swa_full && a->gpu == b->gpu &&
           a->threads == b->threads && a->no_warmup == b->no_warmup && a->overhead == b->overhead;
}
