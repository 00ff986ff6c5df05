/* test_helpers.c: small synthetic models for the planner's unit tests
 * (test_plan.c, test_place.c): 4 layers, 256 wide, 4 heads, 2 KV heads of
 * 64, FFN 512, 1000 tokens, every tensor a hole, so bytes are worked out by
 * hand. */
#include "test_helpers.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf_edit.h"

const char *write_model(const struct spec *sp) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/tandem-plan-%d.gguf", (int)getpid());
    struct gguf_edit *e;
    cr_assert_eq(gguf_edit_new(NULL, &e), TANDEM_OK);
    char spec[256], err[256] = "";
    const char *base[] = {"block_count=u32:4", "embedding_length=u32:256",
                          "context_length=u32:1024", "feed_forward_length=u32:512",
                          "attention.head_count=u32:4", "attention.head_count_kv=u32:2", NULL};
    snprintf(spec, sizeof spec, "general.architecture=str:%s", sp->arch);
    cr_assert_eq(gguf_edit_set_spec(e, spec, err, sizeof err), TANDEM_OK, "%s", err);
    for (int i = 0; base[i]; i++) {
        snprintf(spec, sizeof spec, "%s.%s", sp->arch, base[i]);
        cr_assert_eq(gguf_edit_set_spec(e, spec, err, sizeof err), TANDEM_OK, "%s", err);
    }
    for (int i = 0; sp->extra[i]; i++)
        cr_assert_eq(gguf_edit_set_spec(e, sp->extra[i], err, sizeof err), TANDEM_OK, "%s", err);
    static char tokens[N_VOCAB * 6 + 8];
    char *p = tokens;
    p += sprintf(p, "tokenizer.ggml.tokens=arr[str]:[");
    for (int i = 0; i < N_VOCAB; i++)
        p += sprintf(p, "%s\"%d\"", i ? "," : "", i);
    sprintf(p, "]");
    cr_assert_eq(gguf_edit_set_spec(e, tokens, err, sizeof err), TANDEM_OK, "%s", err);
    struct tensor_fill hole = {.kind = TENSOR_FILL_HOLE};
    int64_t embd[4] = {N_EMBD, N_VOCAB, 1, 1}, sq[4] = {N_EMBD, N_EMBD, 1, 1};
    cr_assert_eq(gguf_edit_add_tensor(e, "token_embd.weight", F16, 2, embd, &hole, err, sizeof err),
                 TANDEM_OK);
    for (int il = 0; il < 4; il++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", il);
        cr_assert_eq(gguf_edit_add_tensor(e, name, F16, 2, sq, &hole, err, sizeof err), TANDEM_OK);
    }
    if (sp->output)
        cr_assert_eq(gguf_edit_add_tensor(e, "output.weight", F16, 2, embd, &hole, err, sizeof err),
                     TANDEM_OK);
    cr_assert_eq(gguf_edit_write(e, path, err, sizeof err), TANDEM_OK, "%s", err);
    gguf_edit_free(e);
    return path;
}

struct plan_model *open_model(const struct spec *sp) {
    struct plan_model *m = NULL;
    char err[256] = "";
    const char *path = write_model(sp);
    cr_assert_eq(plan_model_open(path, &m, err, sizeof err), TANDEM_OK, "%s", err);
    unlink(path);
    return m;
}

