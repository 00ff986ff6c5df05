/* qladder_cache.h: the quantization ladder's cache: keys from its inputs' hashes, and the
 * sidecar that records a built rung and its judgements.
 *
 * A key is the hex SHA-256 of a line that names every input of what it keys
 * (the source's hash, the type, the importance matrix's hash, the protected
 * tensors, the data's hash, the split, the gate's settings and the engine
 * build), so a rerun reuses exactly what its inputs match. Beside a built
 * file NAME, NAME.ladder.json holds {"build": KEY, "judged": {JKEY: figures}}. */
#ifndef TANDEM_QLADDER_CACHE_H
#define TANDEM_QLADDER_CACHE_H

#include <jansson.h>
#include <stddef.h>

#include "base/err.h"
#include "base/hash.h"

/* The key of a built rung: of the source's SHA-256 src_sha, the type, the
 * importance matrix's SHA-256 imatrix_sha (NULL: built without one), the
 * protect[n_protect] --tensor-type rules and the engine build, into out
 * (hex; "" when hashing failed). Borrows every input. */
void qladder_cache_build_key(const char *src_sha, const char *type, const char *imatrix_sha,
                             char *const *protect, size_t n_protect,
                             char out[HASH_SHA256_HEX_LEN + 1]);

/* What a judgement depends on, beside its build's key. */
struct qladder_judge_inputs {
    const char *src_sha;  /* the reference's SHA-256 (hex) */
    const char *data_sha; /* the cases' SHA-256 (hex) */
    unsigned seed;        /* the split's seed */
    double share;         /* the calibration share; 0 = every case judged */
    unsigned repeat;      /* sends per case */
    double margin;        /* a sure answer's margin */
};

/* The key of a judgement of the build keyed build, into out (hex; "" when
 * hashing failed). Borrows every input. */
void qladder_cache_judge_key(const char *build, const struct qladder_judge_inputs *in,
                             char out[HASH_SHA256_HEX_LEN + 1]);

/* The key of an importance matrix built from the calibration share share of
 * the cases data_sha, split with seed, for the source src_sha, into out. */
void qladder_cache_imatrix_key(const char *src_sha, const char *data_sha, unsigned seed,
                               double share, char out[HASH_SHA256_HEX_LEN + 1]);

/* The sidecar of the built file path when it records build and the file is
 * still readable: a new reference the caller releases with json_decref.
 * NULL when it is missing, unreadable or records another build. */
json_t *qladder_cache_load(const char *path, const char *build);

/* Writes j as path's sidecar, atomically. Returns TANDEM_OK, TANDEM_ERR_NOMEM,
 * or TANDEM_ERR_IO with err "SIDECAR: cannot write the cache (why)". */
tandem_err qladder_cache_save(const char *path, const json_t *j, char *err, size_t errlen);

#endif
