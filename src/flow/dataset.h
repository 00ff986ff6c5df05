/* dataset.h: what a measuring command's --data names: a JSONL file (an eval
 * set, or an audit log where the command takes one), or the traffic a daemon
 * stored, "store:SINCE[:MODEL][@FILE]" (docs/eval.md, "Your own traffic").
 *
 * The store is FILE (a database, or a tandem.yaml: its store.path), else the
 * command's --config's store.path, else the default place,
 * <cache>/logs/store.db. Its requests of the last SINCE
 * (a duration: 30m, 24h, 7d), optionally only MODEL's, are written as an eval
 * set (serve/store's export: labels become gold answers) to a temporary file
 * and loaded leniently: a stored request that is not a valid case is skipped
 * and counted, not fatal. Requests kept without their bodies (store.bodies
 * off) cannot be replayed; a store that holds only such requests is an error
 * that says so. */
#ifndef TANDEM_DATASET_H
#define TANDEM_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "eval/evalset.h"
#include "serve/store.h"

/* The prefix of a store spec. */
#define DATASET_STORE_PREFIX "store:"

/* Whether data is a store spec ("store:..."), not a file. */
bool dataset_is_store(const char *data);

/* Finds the store: config_path's store.path, or the default path when
 * config_path is NULL, into out[cap]. Returns TANDEM_OK; TANDEM_ERR_FORMAT
 * when the config cannot be read or turns the store off; err says why. */
tandem_err dataset_store_path(const char *config_path, char *out, size_t cap, char *err,
                              size_t errlen);

/* Writes the store at path's cases chosen by o as JSONL lines into f (one
 * compact object per line). *exported and *skipped (outputs) count the
 * cases written and the requests without a body. Returns store_export's
 * errors, or TANDEM_ERR_IO when f cannot be written. */
tandem_err dataset_export(const char *path, const struct store_export_opts *o, FILE *f,
                          size_t *exported, size_t *skipped, char *err, size_t errlen);

/* What dataset_load reads besides data itself. */
struct dataset_opts {
    const char *config_path; /* the command's --config (a store's place), or NULL */
    bool audit_ok;           /* a file may be an audit log (evalset_load_any) */
    char *sha256;            /* optional output, HASH_SHA256_HEX_LEN + 1 bytes: the
                              * SHA-256 of the file, or of a store's export */
};

/* Loads data into a new set (*out, caller frees with evalset_free): a store
 * spec as above, else the file data through evalset_load_any when
 * o->audit_ok, else evalset_load. *skipped (output, optional) counts what was
 * left out (audit lines or stored requests). Returns the loaders' errors;
 * TANDEM_ERR_FORMAT for a bad spec or a store with no replayable request (err
 * says which); TANDEM_ERR_IO when the data cannot be hashed. */
tandem_err dataset_load(const char *data, const struct dataset_opts *o, struct evalset **out,
                        size_t *skipped, char *err, size_t errlen);

#endif
