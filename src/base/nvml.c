/* nvml.c: the only place that knows NVML.
 *
 * The library is opened with dlopen and the handful of entry points tandem uses
 * are resolved by name; NVML's own types are mirrored here (they are part of its
 * stable C ABI), so no NVIDIA header is needed to build. */
#include "base/nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "base/mem.h"

typedef int nvml_ret;          /* nvmlReturn_t; 0 = NVML_SUCCESS */
typedef void *nvml_device_t;   /* nvmlDevice_t */
struct nvml_memory {           /* nvmlMemory_t */
    unsigned long long total, free, used;
};

struct nvml_process_v2 {       /* nvmlProcessInfo_v2_t */
    unsigned pid;
    unsigned long long used;   /* bytes; NVML_VALUE_NOT_AVAILABLE = ~0ull */
    unsigned gpu_instance, compute_instance;
};

#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_MAX_PROCESSES 256

struct nvml {
    void *lib;
    /* optional (older drivers lack it): per-process memory */
    nvml_ret (*processes)(nvml_device_t, unsigned *, struct nvml_process_v2 *);
    nvml_ret (*init)(void);
    nvml_ret (*shutdown)(void);
    nvml_ret (*count)(unsigned *);
    nvml_ret (*handle)(unsigned, nvml_device_t *);
    nvml_ret (*name)(nvml_device_t, char *, unsigned);
    nvml_ret (*memory)(nvml_device_t, struct nvml_memory *);
    nvml_ret (*driver)(char *, unsigned);
};

/* Resolves each symbol into its slot; returns the first missing name or NULL. */
static const char *resolve(struct nvml *n) {
    struct { void **slot; const char *sym; } table[] = {
        {(void **)&n->init, "nvmlInit_v2"},
        {(void **)&n->shutdown, "nvmlShutdown"},
        {(void **)&n->count, "nvmlDeviceGetCount_v2"},
        {(void **)&n->handle, "nvmlDeviceGetHandleByIndex_v2"},
        {(void **)&n->name, "nvmlDeviceGetName"},
        {(void **)&n->memory, "nvmlDeviceGetMemoryInfo"},
        {(void **)&n->driver, "nvmlSystemGetDriverVersion"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!(*table[i].slot = dlsym(n->lib, table[i].sym)))
            return table[i].sym;
    return NULL;
}

tandem_err nvml_new(const char *library, struct nvml **out, char *err, size_t errlen) {
    *out = NULL;
    if (!library)
        library = NVML_DEFAULT_LIBRARY;
    struct nvml *n = mem_calloc(1, sizeof *n);
    if (!n)
        return TANDEM_ERR_NOMEM;
    n->lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        tandem_errmsg(err, errlen, "%s not found (no NVIDIA driver)", library);
        mem_free(n);
        return TANDEM_ERR_NOTFOUND;
    }
    const char *missing = resolve(n);
    *(void **)&n->processes = dlsym(n->lib, "nvmlDeviceGetComputeRunningProcesses_v2");
    tandem_err e = TANDEM_OK;
    if (missing) {
        tandem_errmsg(err, errlen, "%s lacks %s", library, missing);
        e = TANDEM_ERR_UNSUPPORTED;
    } else if (n->init() != 0) {
        tandem_errmsg(err, errlen, "%s: nvmlInit_v2 failed", library);
        e = TANDEM_ERR_IO;
    }
    if (e != TANDEM_OK) {
        dlclose(n->lib);
        mem_free(n);
        return e;
    }
    *out = n;
    return TANDEM_OK;
}

void nvml_free(struct nvml *nvml) {
    if (!nvml)
        return;
    nvml->shutdown();
    dlclose(nvml->lib);
    mem_free(nvml);
}

unsigned nvml_device_count(struct nvml *nvml) {
    unsigned count = 0;
    return nvml->count(&count) == 0 ? count : 0;
}

tandem_err nvml_device_get(struct nvml *nvml, unsigned index, struct nvml_device *out) {
    if (index >= nvml_device_count(nvml))
        return TANDEM_ERR_RANGE;
    nvml_device_t dev;
    struct nvml_memory m;
    memset(out, 0, sizeof *out);
    if (nvml->handle(index, &dev) != 0 || nvml->memory(dev, &m) != 0 ||
        nvml->name(dev, out->name, sizeof out->name) != 0)
        return TANDEM_ERR_IO;
    out->name[sizeof out->name - 1] = '\0';
    out->total_bytes = m.total;
    out->free_bytes = m.free;
    out->used_bytes = m.used;
    return TANDEM_OK;
}

tandem_err nvml_driver_version(struct nvml *nvml, char *out, size_t cap) {
    if (cap == 0 || cap > 1024 || nvml->driver(out, (unsigned)cap) != 0)
        return TANDEM_ERR_IO;
    out[cap - 1] = '\0';
    return TANDEM_OK;
}

tandem_err nvml_process_used_bytes(struct nvml *nvml, unsigned index, long pid, uint64_t *out) {
    *out = 0;
    nvml_device_t dev;
    if (!nvml->processes)
        return TANDEM_ERR_UNSUPPORTED;
    if (nvml->handle(index, &dev) != 0)
        return TANDEM_ERR_RANGE;
    struct nvml_process_v2 *list = mem_alloc_array(NVML_MAX_PROCESSES, sizeof *list);
    if (!list)
        return TANDEM_ERR_NOMEM;
    unsigned n = NVML_MAX_PROCESSES;
    nvml_ret rc = nvml->processes(dev, &n, list);
    tandem_err e = rc == NVML_ERROR_INSUFFICIENT_SIZE ? TANDEM_ERR_TOOBIG
                   : rc != 0                          ? TANDEM_ERR_IO
                                                      : TANDEM_ERR_NOTFOUND;
    for (unsigned i = 0; rc == 0 && i < n && i < NVML_MAX_PROCESSES; i++)
        if ((long)list[i].pid == pid && list[i].used != ~0ull) {
            *out = list[i].used;
            e = TANDEM_OK;
        }
    mem_free(list);
    return e;
}
