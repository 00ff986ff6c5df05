/* gguf_facts.h: the facts of a GGUF model as JSON, for `tandem inspect`. */
#ifndef TANDEM_GGUF_FACTS_H
#define TANDEM_GGUF_FACTS_H

#include <jansson.h>

#include "gguf/gguf.h"

/* Returns a new object of what g holds, the stable shape of docs/inspect.md:
 * file (path, copied), file_size, gguf_version, alignment, architecture,
 * name, file_type, parameters, tensor_count, tensor_bytes_by_type
 * ({TYPE: {count, bytes}}), layers, context_length, embedding_length,
 * feed_forward_length, vocab_size, attention {...}, recurrent {...},
 * experts {count, used}, chat_templates, decision, calibration, provenance,
 * and sha256 (null: the caller fills it when it hashes the file). A key
 * the file lacks is JSON null. NULL on allocation failure. The caller owns
 * the reference. */
json_t *gguf_facts_json(const struct gguf *g, const char *path);

#endif
