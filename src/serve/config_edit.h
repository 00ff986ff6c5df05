/* config_edit.h: rewrites values of a pipeline's verdict in tandem.yaml text.
 *
 * `tandem eval --apply` writes suggested thresholds into the user's own file:
 * only the values it sets change, and every other byte (comments, order,
 * quoting, blank lines) stays as written. A key that is missing is added as
 * a new line in the block it belongs to, at that block's indentation. */
#ifndef TANDEM_CONFIG_EDIT_H
#define TANDEM_CONFIG_EDIT_H

#include <stddef.h>

#include "base/err.h"

/* One value under pipelines.<name>.verdict: section NULL sets verdict.<key>
 * (e.g. "min_confidence"); section "thresholds" sets verdict.thresholds.<key>.
 * text is the YAML value as it should appear, e.g. "\">= 0.8734\"" or "0.23". */
struct config_edit_value {
    const char *section;
    const char *key;
    const char *text;
};

/* Applies the n values to the verdict of pipeline in the YAML text[0..len)
 * of file name (used in messages) and returns the new text in *out
 * (NUL-terminated, *out_len bytes; caller frees with mem_free()). Keys and
 * values must be plain identifiers and scalars. Returns TANDEM_ERR_FORMAT
 * (err[errlen]: the YAML does not parse, the pipeline is missing, or a block
 * on the way is in flow style or not a mapping, "name:line: path: reason"),
 * or TANDEM_ERR_NOMEM; *out is NULL on failure. */
tandem_err config_edit_verdict(const char *name, const char *text, size_t len,
                               const char *pipeline, const struct config_edit_value *values,
                               size_t n, char **out, size_t *out_len, char *err, size_t errlen);

#endif
