/* hash.c: SHA-256 of whole files through OpenSSL's EVP interface, read in
 * 1 MiB chunks so memory stays flat for multi-GB models; and a cache of
 * those digests ($TANDEM_CACHE/sha256/), keyed by the file's identity and
 * modification time, so a multi-GB model is hashed once, not per start. */
#include "base/hash.h"

#include <errno.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cache.h"
#include "base/mem.h"

#define CHUNK ((size_t)1 << 20)

static tandem_err digest_stream(FILE *f, EVP_MD_CTX *ctx, unsigned char *chunk) {
    size_t n;
    while ((n = fread(chunk, 1, CHUNK, f)) > 0)
        if (EVP_DigestUpdate(ctx, chunk, n) != 1)
            return TANDEM_ERR_IO;
    return ferror(f) ? TANDEM_ERR_IO : TANDEM_OK;
}

static void to_hex(const unsigned char md[32], char hex[HASH_SHA256_HEX_LEN + 1]) {
    for (unsigned i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

tandem_err hash_buffer_sha256(const void *data, size_t len, char hex[HASH_SHA256_HEX_LEN + 1]) {
    unsigned char md[32];
    unsigned int md_len = 0;
    if (EVP_Digest(len ? data : "", len, md, &md_len, EVP_sha256(), NULL) != 1 ||
        md_len != sizeof md)
        return TANDEM_ERR_IO;
    to_hex(md, hex);
    return TANDEM_OK;
}

tandem_err hash_sha256_pair(const void *a, size_t alen, const void *b, size_t blen,
                            unsigned char out[HASH_SHA256_LEN]) {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx)
        return TANDEM_ERR_NOMEM;
    unsigned int md_len = 0;
    bool ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
              (!alen || EVP_DigestUpdate(ctx, a, alen) == 1) &&
              (!blen || EVP_DigestUpdate(ctx, b, blen) == 1) &&
              EVP_DigestFinal_ex(ctx, out, &md_len) == 1 && md_len == HASH_SHA256_LEN;
    EVP_MD_CTX_free(ctx);
    return ok ? TANDEM_OK : TANDEM_ERR_IO;
}

tandem_err hash_file_sha256(const char *path, char hex[HASH_SHA256_HEX_LEN + 1], char *err,
                            size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        tandem_errmsg(err, errlen, "%s: %s", path, strerror(errno));
        return TANDEM_ERR_IO;
    }
    unsigned char *chunk = mem_alloc(CHUNK);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char md[32];
    unsigned int md_len = 0;
    tandem_err e = chunk && ctx ? TANDEM_OK : TANDEM_ERR_NOMEM;
    if (e == TANDEM_OK && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
        e = TANDEM_ERR_IO;
    if (e == TANDEM_OK)
        e = digest_stream(f, ctx, chunk);
    if (e == TANDEM_OK && (EVP_DigestFinal_ex(ctx, md, &md_len) != 1 || md_len != sizeof md))
        e = TANDEM_ERR_IO;
    if (e == TANDEM_OK)
        to_hex(md, hex);
    else
        tandem_errmsg(err, errlen, "%s: cannot hash: %s", path, tandem_strerror(e));
    EVP_MD_CTX_free(ctx);
    mem_free(chunk);
    fclose(f);
    return e;
}

/* The cache entry's name: a digest of what identifies this version of the
 * file (path, device, inode, size, modification time to the nanosecond). */
static tandem_err cache_entry(const char *path, const struct stat *st, char *out, size_t cap) {
    char id[PATH_MAX + 128], key[HASH_SHA256_HEX_LEN + 1], sub[HASH_SHA256_HEX_LEN + 16];
    int n = snprintf(id, sizeof id, "%s\n%llu\n%llu\n%lld\n%lld.%09ld", path,
                     (unsigned long long)st->st_dev, (unsigned long long)st->st_ino,
                     (long long)st->st_size, (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
    if (n < 0 || (size_t)n >= sizeof id || hash_buffer_sha256(id, (size_t)n, key) != TANDEM_OK)
        return TANDEM_ERR_TOOBIG;
    snprintf(sub, sizeof sub, "sha256/%s", key);
    return cache_path(out, cap, sub);
}

static bool read_entry(const char *entry, char hex[HASH_SHA256_HEX_LEN + 1]) {
    FILE *f = fopen(entry, "r");
    if (!f)
        return false;
    bool ok = fread(hex, 1, HASH_SHA256_HEX_LEN, f) == HASH_SHA256_HEX_LEN;
    fclose(f);
    hex[HASH_SHA256_HEX_LEN] = '\0';
    return ok && strspn(hex, "0123456789abcdef") == HASH_SHA256_HEX_LEN;
}

/* Writes hex to entry atomically (temp file, then rename); failures only
 * cost the next start a rehash. */
static void write_entry(const char *entry, const char hex[HASH_SHA256_HEX_LEN + 1]) {
    char dir[PATH_MAX], tmp[PATH_MAX + 16];
    if (cache_make_dir(dir, sizeof dir, "sha256") != TANDEM_OK)
        return;
    snprintf(tmp, sizeof tmp, "%s.tmp", entry);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    bool ok = fprintf(f, "%s\n", hex) > 0;
    if (fclose(f) != 0 || !ok || rename(tmp, entry) != 0)
        unlink(tmp);
}

tandem_err hash_file_sha256_cached(const char *path, char hex[HASH_SHA256_HEX_LEN + 1],
                                   bool *cached, char *err, size_t errlen) {
    struct stat st;
    char entry[PATH_MAX];
    *cached = false;
    if (stat(path, &st) != 0) {
        tandem_errmsg(err, errlen, "%s: %s", path, strerror(errno));
        return TANDEM_ERR_IO;
    }
    bool have_entry = cache_entry(path, &st, entry, sizeof entry) == TANDEM_OK;
    if (have_entry && read_entry(entry, hex))
        return *cached = true, TANDEM_OK;
    tandem_err e = hash_file_sha256(path, hex, err, errlen);
    if (e == TANDEM_OK && have_entry)
        write_entry(entry, hex);
    return e;
}
