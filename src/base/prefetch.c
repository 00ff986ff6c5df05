/* prefetch.c: page-cache readahead of whole files on a detached thread, and
 * the two helpers that measure it (drop one file's pages, count them).
 *
 * The thread owns its copy of the path and exits when the file has been
 * read; nothing waits for it. posix_fadvise(WILLNEED) alone may return
 * before the pages arrive (or be ignored by some filesystems), so the
 * thread also reads the file in 4 MiB blocks: the pages are resident when it
 * ends. */
#include "base/prefetch.h"

#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/host.h"
#include "base/mem.h"

#define BLOCK (4u << 20)

static void *read_ahead(void *arg) {
    char *path = arg;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    char *buf = fd >= 0 ? mem_alloc(BLOCK) : NULL;
    if (buf) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
        while (read(fd, buf, BLOCK) > 0)
            ;
    }
    mem_free(buf);
    if (fd >= 0)
        close(fd);
    mem_free(path);
    return NULL;
}

tandem_err prefetch_start(const char *path, uint64_t margin) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return TANDEM_ERR_IO;
    struct host_memory mem = {0};
    if (host_memory_read(&mem) != TANDEM_OK || mem.available_bytes < (uint64_t)st.st_size + margin)
        return TANDEM_ERR_TOOBIG;
    char *copy = mem_strdup(path);
    if (!copy)
        return TANDEM_ERR_NOMEM;
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, read_ahead, copy);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        mem_free(copy);
        return TANDEM_ERR_SPAWN;
    }
    return TANDEM_OK;
}

tandem_err prefetch_drop(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return TANDEM_ERR_IO;
    int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return rc == 0 ? TANDEM_OK : TANDEM_ERR_IO;
}

tandem_err prefetch_resident(const char *path, uint64_t *resident, uint64_t *size) {
    *resident = *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        return TANDEM_ERR_IO;
    }
    *size = (uint64_t)st.st_size;
    if (!st.st_size) {
        close(fd);
        return TANDEM_OK;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return TANDEM_ERR_IO;
    long page = sysconf(_SC_PAGESIZE);
    size_t pages = ((size_t)st.st_size + (size_t)page - 1) / (size_t)page;
    unsigned char *vec = mem_alloc(pages);
    tandem_err e = vec && mincore(map, (size_t)st.st_size, vec) == 0 ? TANDEM_OK : TANDEM_ERR_IO;
    for (size_t i = 0; e == TANDEM_OK && i < pages; i++)
        *resident += (vec[i] & 1) ? (uint64_t)page : 0;
    if (*resident > *size)
        *resident = *size;
    mem_free(vec);
    munmap(map, (size_t)st.st_size);
    return e;
}
