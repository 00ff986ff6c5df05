/* hash.h: content hashes of model files (OpenSSL's libcrypto does the maths). */
#ifndef TANDEM_HASH_H
#define TANDEM_HASH_H

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

#define HASH_SHA256_HEX_LEN 64

/* Streams the file at path through SHA-256 and writes the lowercase hex digest
 * into hex[HASH_SHA256_HEX_LEN + 1]. Reads the whole file (minutes for many GB).
 * Returns TANDEM_ERR_IO (err[errlen] names the file and the reason) or
 * TANDEM_ERR_NOMEM. */
tandem_err hash_file_sha256(const char *path, char hex[HASH_SHA256_HEX_LEN + 1], char *err,
                            size_t errlen);

/* Like hash_file_sha256, through a cache of digests under $TANDEM_CACHE/sha256/
 * keyed by the file's path, device, inode, size and modification time (a
 * changed file is hashed again). *cached (output) says whether the digest came
 * from the cache. A cache that cannot be written only costs a rehash later.
 * Returns hash_file_sha256's errors, or TANDEM_ERR_IO when path cannot be
 * stat'ed. */
tandem_err hash_file_sha256_cached(const char *path, char hex[HASH_SHA256_HEX_LEN + 1],
                                   bool *cached, char *err, size_t errlen);

/* Writes the lowercase hex SHA-256 of data[len] into hex[HASH_SHA256_HEX_LEN + 1].
 * data is borrowed (may be NULL when len is 0). Returns TANDEM_ERR_IO when
 * libcrypto fails. */
tandem_err hash_buffer_sha256(const void *data, size_t len, char hex[HASH_SHA256_HEX_LEN + 1]);

#define HASH_SHA256_LEN 32

/* Writes the SHA-256 of a[alen] followed by b[blen] (both borrowed; either
 * may be NULL when its length is 0) into out[HASH_SHA256_LEN], raw bytes.
 * Returns TANDEM_ERR_IO when libcrypto fails, TANDEM_ERR_NOMEM. */
tandem_err hash_sha256_pair(const void *a, size_t alen, const void *b, size_t blen,
                            unsigned char out[HASH_SHA256_LEN]);

#endif
