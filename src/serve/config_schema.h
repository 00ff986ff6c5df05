/* config_schema.h: tandem.yaml's keys (the tables config.c walks a file by).
 * Internal to serve/config*.c: the public interface is config.h. */
#ifndef TANDEM_CONFIG_SCHEMA_H
#define TANDEM_CONFIG_SCHEMA_H

#include <libfyaml.h>
#include <stdbool.h>

#include "serve/config.h"
#include "serve/config_walk.h"

/* Stores the defaults the tables give (the numbers, sizes and durations of
 * the top-level sections) into c; what has no row (listen, node.id) is
 * config.c's. False after recording an error for a default its own field
 * refuses (a bug in a table). */
bool config_schema_defaults(struct config_walk *w, struct config *c);

/* Walks the document's root mapping into c: every section, model and
 * pipeline, each value checked on its own (the checks across sections are
 * config.c's). False after recording the first error in w; c then holds what
 * was read, for config_free. */
bool config_schema_walk(struct config_walk *w, struct fy_node *root, struct config *c);

/* Every table of the schema, ending with NULL (borrowed, static): for tests
 * that check each row's range, words and default. */
const struct config_field *const *config_schema_tables(void);

#endif
