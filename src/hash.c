/* hash.c: SHA-256 of whole files through OpenSSL's EVP interface, read in
 * 1 MiB chunks so memory stays flat for multi-GB models. */
#include "hash.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "mem.h"

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
