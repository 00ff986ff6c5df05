/* jstr.c: JSON strings from text that may not be valid UTF-8.
 *
 * jansson refuses invalid UTF-8, so the text is tried as it is first (the
 * common case costs no copy) and only a refused one is sanitized into a
 * scratch buffer. This is the one place outside text becomes JSON lossily:
 * the GGUF dump, the audit log and MCP messages all go through it. */
#include "base/jstr.h"

#include "base/mem.h"
#include "base/utf8.h"

json_t *jstr_lossy(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    if (j)
        return j;
    char *copy = mem_alloc_array(n + 1, 3); /* each bad byte grows to 3 */
    if (!copy)
        return NULL;
    size_t len = utf8_sanitize(s, n, copy);
    j = json_stringn(copy, len);
    mem_free(copy);
    return j;
}
