/* synth.h: synthesizing GGUF models from JSON specs (`tandem gguf synth`). */
#ifndef TANDEM_SYNTH_H
#define TANDEM_SYNTH_H

#include <stddef.h>

#include "base/err.h"

/* Reads the JSON spec at spec_path (format: docs/inspect.md), builds the model it
 * describes and writes it atomically to out_path. Relative paths inside the spec
 * are taken from the spec's folder; ${VAR} expands from the environment.
 * Returns TANDEM_ERR_FORMAT for JSON that does not parse, TANDEM_ERR_INVAL for a
 * spec that is wrong (unknown field, bad type or shape, ...), or the writer's
 * error; err[errlen] then holds one line "SPEC: where: what". Nothing is
 * written at out_path on failure. */
tandem_err synth_write(const char *spec_path, const char *out_path, char *err, size_t errlen);

#endif
