/* gguf_json.h: GGUF metadata as JSON values (jansson), for `tandem inspect --json`
 * and `tandem gguf dump`. */
#ifndef TANDEM_GGUF_JSON_H
#define TANDEM_GGUF_JSON_H

#include <jansson.h>

#include "gguf/gguf.h"

/* Returns a new JSON string for s. Bytes that are not valid UTF-8 become
 * U+FFFD, as Python's decode(errors="replace") does. NULL on allocation failure.
 * The caller owns the reference (json_decref). */
json_t *gguf_json_str(struct gguf_str s);

/* Returns kv's value as a new JSON value: integers as integers (UINT64 above
 * INT64_MAX as a decimal string), floats as reals (null when not finite),
 * BOOL as true/false, STRING as a string, ARRAY as an array of its elements.
 * NULL on allocation failure. The caller owns the reference. */
json_t *gguf_json_value(const struct gguf_kv *kv);

/* Returns every fact of the file as one new JSON object:
 *   {"version", "alignment", "data_offset", "file_size",
 *    "kv": [{"key", "type", "elem_type"?, "value"}...],
 *    "tensors": [{"name", "type", "shape": [ne0..], "offset", "size"}...]}
 * where tensor offsets are absolute file offsets. NULL on allocation failure. */
json_t *gguf_json_dump(const struct gguf *g);

#endif
