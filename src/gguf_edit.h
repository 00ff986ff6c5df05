/* gguf_edit.h: writes a new GGUF from an existing one with key/values added,
 * changed or removed.
 *
 * Edits are collected on a handle, then gguf_edit_write() streams the result:
 * header, key/values (source order, changed values in place, new keys last),
 * tensor infos with offsets recomputed for the output's alignment, and tensor
 * data copied from the source mapping. The output appears atomically: it is
 * written to a temporary file beside it, synced, then renamed. */
#ifndef TANDEM_GGUF_EDIT_H
#define TANDEM_GGUF_EDIT_H

#include <stddef.h>

#include "err.h"
#include "gguf.h"

struct gguf_edit;

/* Starts an edit of src, which is borrowed and must outlive the handle.
 * Returns TANDEM_ERR_NOMEM; on success the caller frees *out with gguf_edit_free(). */
tandem_err gguf_edit_new(const struct gguf *src, struct gguf_edit **out);

/* Releases the edit. gguf_edit_free(NULL) is a no-op. */
void gguf_edit_free(struct gguf_edit *edit);

/* Adds or replaces a key from a "key=type:value" spec, as `tandem gguf set` takes:
 *   type  u8 i8 u16 i16 u32 i32 u64 i64 f32 f64 bool str
 *         file        the value is a path; the key becomes a string holding that file's bytes
 *         arr[T]      the value is a JSON array of T (any type above but file and arr)
 * e.g. "llama.context_length=u32:4096", "tokenizer.chat_template.systemone=file:t.jinja",
 * "x.labels=arr[str]:[\"A\",\"B\"]". A later spec for the same key wins.
 * Returns TANDEM_ERR_INVAL (err[errlen] says what is wrong with the spec),
 * TANDEM_ERR_IO for an unreadable file, TANDEM_ERR_NOMEM. */
tandem_err gguf_edit_set_spec(struct gguf_edit *edit, const char *spec, char *err, size_t errlen);

/* Marks key for removal. Returns TANDEM_ERR_NOTFOUND (with err) when the source
 * has no such key, TANDEM_ERR_NOMEM. */
tandem_err gguf_edit_remove(struct gguf_edit *edit, const char *key, char *err, size_t errlen);

/* Writes the edited file to path atomically and verifies it by reopening it.
 * Returns TANDEM_ERR_INVAL for an edited general.alignment that is not a u32
 * power of two, TANDEM_ERR_IO (err says which step failed), the reader's error
 * when the result does not parse back, TANDEM_ERR_NOMEM.
 * On failure no file appears at path and an existing one is left untouched. */
tandem_err gguf_edit_write(const struct gguf_edit *edit, const char *path, char *err, size_t errlen);

#endif
