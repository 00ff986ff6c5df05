/* test_helpers.h: synthetic models shared by the planner's unit tests. */
#ifndef TANDEM_TEST_HELPERS_H
#define TANDEM_TEST_HELPERS_H

#include <stdbool.h>

#include "plan/plan.h"

#define F16 1
#define N_VOCAB 1000
#define N_EMBD 256

struct spec {
    const char *arch;
    const char *extra[8]; /* more "key=type:value" specs */
    bool output;          /* add output.weight (else tied) */
};

/* Writes a model: 4 layers, 256 wide, 4 heads, 2 KV heads of 64, FFN 512,
 * 1000 tokens; tensors are holes. Returns the path (static buffer). */
const char *write_model(const struct spec *sp);

/* write_model, opened by the planner and unlinked; the caller frees it. */
struct plan_model *open_model(const struct spec *sp);

#endif
