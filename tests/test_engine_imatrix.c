/* Unit tests for engine_imatrix: the chunk chosen for a text, and the reason
 * picked out of llama-imatrix's logs (an abort with ggml's debugger
 * backtrace after it, copied from a real run of b11434; an exit with an
 * error line; plain output). The run itself is covered end to end by
 * tests/e2e/test_imatrix.py. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/engine_imatrix.h"

Test(engine_imatrix, chunk_fits_two_in_the_text_and_the_training_context) {
    cr_expect_eq(engine_imatrix_chunk(8678, 8192), 512);
    cr_expect_eq(engine_imatrix_chunk(8678, 0), 512, "unknown training context");
    cr_expect_eq(engine_imatrix_chunk(8678, 256), 256);
    cr_expect_eq(engine_imatrix_chunk(1000, 8192), 500, "two chunks need 1000 tokens");
    cr_expect_eq(engine_imatrix_chunk(1001, 8192), 500);
    cr_expect_eq(engine_imatrix_chunk(32, 8192), 16);
    cr_expect_eq(engine_imatrix_chunk(31, 8192), 0, "below two chunks of 16");
    cr_expect_eq(engine_imatrix_chunk(0, 512), 0);
    cr_expect_eq(engine_imatrix_chunk(100000, 8), 0, "a context below the smallest chunk");
}

/* The end of a real log: kev-tiny with -c 512 and the default -b 2048. */
static const char ABORT_LOG[] =
    "0.00.659.016 W embeddings enabled: setting n_batch = n_ubatch = 512\n"
    "0.00.665.737 I compute_imatrix: tokenizing the input ..\n"
    "/root/.cache/tandem/engine/b11434/src/tools/imatrix/imatrix.cpp:1477: "
    "GGML_ASSERT(params.n_ctx == n_seq * n_ctx) failed\n"
    "0.00.680.418 I compute_imatrix: tokenization took 17.177 ms\n"
    "[New LWP 23814]\n"
    "[Thread debugging using libthread_db enabled]\n"
    "Using host libthread_db library \"/lib/x86_64-linux-gnu/libthread_db.so.1\".\n"
    "0x00007fe8faef1c17 in __GI___wait4 (pid=23862, stat_loc=0x0, options=0, usage=0x0) at "
    "../sysdeps/unix/sysv/linux/wait4.c:30\n"
    "30\t../sysdeps/unix/sysv/linux/wait4.c: No such file or directory.\n"
    "#0  0x00007fe8faef1c17 in __GI___wait4 (pid=23862) at wait4.c:30\n"
    "30\tin ../sysdeps/unix/sysv/linux/wait4.c\n"
    "#1  0x00005596c45899eb in ggml_print_backtrace ()\n"
    "#4  0x00005596c3ff3078 in main ()\n"
    "[Inferior 1 (process 23812) detached]\n";

Test(engine_imatrix, the_assert_line_is_the_reason_not_the_backtrace) {
    char why[256];
    engine_log_reason(ABORT_LOG, strlen(ABORT_LOG), why, sizeof why);
    cr_expect_str_eq(why, "imatrix.cpp:1477: GGML_ASSERT(params.n_ctx == n_seq * n_ctx) failed");
}

Test(engine_imatrix, an_error_line_loses_its_timestamp) {
    static const char log[] =
        "0.00.066.933 I compute_imatrix: computing over 0 chunks\n"
        "0.00.066.934 E compute_imatrix: you need at least 1024 tokens for a context of 512 "
        "tokens\n"
        "0.00.066.935 E compute_imatrix: the data file you provided tokenizes to only 900 "
        "tokens\r\n"
        "\n   \n";
    char why[256];
    engine_log_reason(log, strlen(log), why, sizeof why);
    cr_expect_str_eq(why, "compute_imatrix: the data file you provided tokenizes to only 900 "
                          "tokens");
}

Test(engine_imatrix, without_an_error_line_the_last_line_is_taken) {
    static const char log[] = "loading model\nsomething odd happened\n#0 0x1 in main ()\n";
    char why[64];
    engine_log_reason(log, strlen(log), why, sizeof why);
    cr_expect_str_eq(why, "something odd happened");
    engine_log_reason("", 0, why, sizeof why);
    cr_expect_str_eq(why, "");
    engine_log_reason(log, strlen(log), why, 8);
    cr_expect_str_eq(why, "somethi", "cut to the buffer");
}

Test(engine_imatrix, the_log_file_is_read_from_its_end) {
    char path[] = "/tmp/tandem-imatrix-log-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    for (int i = 0; i < 20000; i++) /* far more than the tail that is read */
        fprintf(f, "0.00.000.%03d I line %d\n", i % 1000, i);
    fputs(ABORT_LOG, f);
    fclose(f);
    char why[256];
    engine_log_file_reason(path, why, sizeof why);
    cr_expect_str_eq(why, "imatrix.cpp:1477: GGML_ASSERT(params.n_ctx == n_seq * n_ctx) failed");
    unlink(path);
    engine_log_file_reason("/nonexistent/log", why, sizeof why);
    cr_expect_str_eq(why, "");
}
