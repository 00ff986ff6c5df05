/* nvml.h: NVIDIA's management library, loaded at run time with dlopen.
 *
 * tandem never links against NVML: a machine without an NVIDIA driver is a
 * normal "no GPU" machine, reported as TANDEM_ERR_NOTFOUND by nvml_new(). */
#ifndef TANDEM_NVML_H
#define TANDEM_NVML_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define NVML_DEFAULT_LIBRARY "libnvidia-ml.so.1"

struct nvml;

/* Loads NVML from library (NULL = NVML_DEFAULT_LIBRARY) and initialises it.
 * On success *out is a handle the caller frees with nvml_free().
 * Returns TANDEM_ERR_NOTFOUND when the library cannot be loaded (no driver),
 * TANDEM_ERR_UNSUPPORTED when it lacks a required symbol, TANDEM_ERR_IO when
 * nvmlInit fails, TANDEM_ERR_NOMEM. On failure *out is NULL and, when err is
 * not NULL, err[errlen] holds a one-line reason. */
tandem_err nvml_new(const char *library, struct nvml **out, char *err, size_t errlen);

/* Shuts NVML down and unloads it. nvml_free(NULL) is a no-op. */
void nvml_free(struct nvml *nvml);

/* Returns the number of NVIDIA devices NVML sees (0 on error). */
unsigned nvml_device_count(struct nvml *nvml);

struct nvml_device {
    char name[96];
    uint64_t total_bytes; /* framebuffer memory */
    uint64_t free_bytes;
    uint64_t used_bytes;
};

/* Fills *out for device index. Returns TANDEM_ERR_RANGE for a bad index,
 * TANDEM_ERR_IO when NVML reports an error. */
tandem_err nvml_device_get(struct nvml *nvml, unsigned index, struct nvml_device *out);

/* Writes the driver version string into out[cap]. Returns TANDEM_ERR_IO on failure. */
tandem_err nvml_driver_version(struct nvml *nvml, char *out, size_t cap);

/* Writes the GPU memory process pid uses on device index (NVML's per-process
 * accounting, which includes its CUDA context) into *out (output, bytes).
 * Returns TANDEM_ERR_NOTFOUND when the process holds no memory there,
 * TANDEM_ERR_UNSUPPORTED when the driver lacks the query, TANDEM_ERR_RANGE
 * for a bad index, TANDEM_ERR_TOOBIG past 256 processes, TANDEM_ERR_IO. */
tandem_err nvml_process_used_bytes(struct nvml *nvml, unsigned index, long pid, uint64_t *out);

#endif
