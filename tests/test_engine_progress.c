/* Unit tests for engine_progress: the phase follows the engine's log
 * markers (appended between polls, as a child writes them), and the weights'
 * fraction is real file-backed resident memory: this test process itself
 * plays the child, mapping and touching a file of the model's size. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/engine_progress.h"

#define FILE_BYTES (16u << 20)

static void append(const char *path, const char *text) {
    FILE *f = fopen(path, "a");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
}

Test(engine_progress, phases_follow_the_log_and_the_fraction_the_mapped_pages) {
    char log[] = "/tmp/tandem-progress-log-XXXXXX", model[] = "/tmp/tandem-progress-model-XXXXXX";
    int lfd = mkstemp(log), mfd = mkstemp(model);
    cr_assert(lfd >= 0 && mfd >= 0);
    close(lfd);
    cr_assert_eq(ftruncate(mfd, FILE_BYTES), 0);
    struct engine_progress *p = engine_progress_new(getpid(), log, FILE_BYTES);
    cr_assert(p);
    struct engine_progress_sample s;
    append(log, "llama_model_loader: loaded meta data\n");
    cr_assert_not(engine_progress_poll(p, 0.05, &s), "no change yet");
    cr_assert_eq(s.phase, ENGINE_PHASE_SPAWN);
    cr_assert_lt(s.fraction, 0);

    append(log, "load_tensors: loading model tensors, this can take a while... (load_mode = mmap)\n");
    cr_assert(engine_progress_poll(p, 0.05, &s));
    cr_assert_eq(s.phase, ENGINE_PHASE_WEIGHTS);
    cr_assert_lt(s.fraction, 0.05, "nothing mapped yet: %f", s.fraction);

    unsigned char *w = mmap(NULL, FILE_BYTES, PROT_READ, MAP_SHARED, mfd, 0);
    cr_assert_neq(w, MAP_FAILED);
    volatile unsigned sum = 0;
    for (size_t i = 0; i < FILE_BYTES / 2; i += 4096)
        sum += w[i];
    cr_assert(engine_progress_poll(p, 0.05, &s));
    cr_assert(s.fraction > 0.4 && s.fraction < 0.6, "half the pages touched: %f", s.fraction);
    for (size_t i = FILE_BYTES / 2; i < FILE_BYTES; i += 4096)
        sum += w[i];
    cr_assert(engine_progress_poll(p, 0.05, &s));
    cr_assert_gt(s.fraction, 0.9, "all touched: %f", s.fraction);
    cr_assert_not(engine_progress_poll(p, 0.05, &s), "no move past the step");

    append(log, "llama_context: constructing llama_context\n");
    cr_assert(engine_progress_poll(p, 0.05, &s));
    cr_assert_eq(s.phase, ENGINE_PHASE_WARMUP);
    cr_assert_eq(s.fraction, 1);
    engine_progress_ready(p, &s);
    cr_assert_eq(s.phase, ENGINE_PHASE_READY);
    cr_assert_str_eq(engine_phase_name(s.phase), "ready");
    cr_assert_geq(s.elapsed_ms, 0);
    engine_progress_free(p);
    engine_progress_free(NULL);
    munmap(w, FILE_BYTES);
    close(mfd);
    unlink(model);
    unlink(log);
}

Test(engine_progress, a_gone_child_keeps_its_phase_and_an_unknown_fraction) {
    char log[] = "/tmp/tandem-progress-log-XXXXXX";
    close(mkstemp(log));
    append(log, "load_tensors: loading\n");
    struct engine_progress *p = engine_progress_new(999999999, log, FILE_BYTES);
    struct engine_progress_sample s;
    cr_assert(engine_progress_poll(p, 0.05, &s));
    cr_assert_eq(s.phase, ENGINE_PHASE_WEIGHTS);
    cr_assert_lt(s.fraction, 0);
    engine_progress_free(p);
    unlink(log);
}
