/* replay.c: runs a libFuzzer target's LLVMFuzzerTestOneInput once on every
 * file of the directories (or files) given, in name order, without
 * libFuzzer: `make fuzz-replay` links it with each tests/fuzz/fuzz_<name>.c
 * and the normal build's objects (gcc), `make asan` with the instrumented
 * ones, and replays tests/fuzz/corpus/<name>/. A target reports a broken
 * invariant by aborting, so a replay that returns is a pass.
 * Usage: replay_<name> DIR|FILE... ; exit status 0, or 2 when an argument
 * cannot be read. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Runs the target on the bytes of path. Returns 0, or -1 when it cannot be read. */
static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        uint8_t *grown = n == cap ? realloc(buf, cap *= 2) : buf;
        if (!grown)
            free(buf);
        buf = grown;
    }
    int bad = ferror(f) || !buf;
    fclose(f);
    if (!bad) {
        /* an exact-size copy, so that ASan sees a read past the input */
        uint8_t *exact = malloc(n ? n : 1);
        if (exact) {
            memcpy(exact, buf, n);
            LLVMFuzzerTestOneInput(exact, n);
        }
        free(exact);
        bad = !exact;
    }
    free(buf);
    return bad ? -1 : 0;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int not_hidden(const struct dirent *e) { return e->d_name[0] != '.'; }

/* Replays every regular file of dir; *count gets how many. Returns 0 or -1. */
static int replay_dir(const char *dir, size_t *count) {
    struct dirent **names;
    int n = scandir(dir, &names, not_hidden, by_name);
    if (n < 0)
        return -1;
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (rc == 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            rc = replay_file(path);
            *count += rc == 0;
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        struct stat st;
        size_t count = 0;
        int rc = stat(argv[i], &st) != 0        ? -1
                 : S_ISDIR(st.st_mode)          ? replay_dir(argv[i], &count)
                 : (count = 1, replay_file(argv[i]));
        if (rc) {
            fprintf(stderr, "%s: cannot read %s\n", argv[0], argv[i]);
            return 2;
        }
        printf("%s: %zu input(s) from %s replayed\n", argv[0], count, argv[i]);
    }
    return 0;
}
