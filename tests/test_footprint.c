/* Unit tests for footprint: the engine's buffer-size lines, llama-server argv
 * to settings, and the cache round trip. The log lines are verbatim from the
 * pinned engine (b11434, CPU) at -lv 4 --no-log-timestamps --no-log-prefix,
 * plus CUDA forms as the engine prints them. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/footprint.h"
#include "gguf/ggml_types.h"

#define MIB(x) ((uint64_t)((x) * 1048576.0 + 0.5))

static const char CPU_LOG[] =
    "load_tensors: loading model tensors, this can take a while... (mmap = true)\n"
    "load_tensors:   CPU_Mapped model buffer size =  2573.56 MiB\n"
    "llama_context:        CPU  output buffer size =     0.95 MiB\n"
    "llama_kv_cache:        CPU KV buffer size =    64.00 MiB\n"
    "llama_kv_cache: size =   64.00 MiB (  2048 cells,   8 layers,  1/1 seqs), K (f16):   32.00 MiB\n"
    "llama_memory_recurrent:        CPU RS buffer size =    50.25 MiB\n"
    "sched_reserve:        CPU compute buffer size =   518.02 MiB\n";

Test(footprint, parses_cpu_buffer_lines) {
    struct footprint_measure m;
    cr_assert_eq(footprint_parse_log(CPU_LOG, strlen(CPU_LOG), &m), TANDEM_OK);
    cr_expect_eq(m.bytes[PLAN_DEVICE_HOST][PLAN_PART_WEIGHTS], MIB(2573.56));
    cr_expect_eq(m.bytes[PLAN_DEVICE_HOST][PLAN_PART_OUTPUT], MIB(0.95));
    cr_expect_eq(m.bytes[PLAN_DEVICE_HOST][PLAN_PART_KV], MIB(64)); /* summary not added */
    cr_expect_eq(m.bytes[PLAN_DEVICE_HOST][PLAN_PART_RECURRENT], MIB(50.25));
    cr_expect_eq(m.bytes[PLAN_DEVICE_HOST][PLAN_PART_COMPUTE], MIB(518.02));
    cr_expect(m.seen[PLAN_PART_KV] && !m.seen[PLAN_PART_OVERHEAD]);
    cr_expect(!footprint_measure_has_gpu(&m));
}

Test(footprint, splits_gpu_and_host_buffers) {
    static const char log[] = "load_tensors:        CUDA0 model buffer size =  2077.00 MiB\n"
                              "load_tensors:   CPU_Mapped model buffer size =   497.00 MiB\n"
                              "llama_context:  CUDA_Host  output buffer size =     0.95 MiB\n"
                              "llama_kv_cache:      CUDA0 KV buffer size =   256.00 MiB\n"
                              "sched_reserve:      CUDA0 compute buffer size =   530.00 MiB\n"
                              "sched_reserve:  CUDA_Host compute buffer size =    21.01 MiB\n";
    struct footprint_measure m;
    cr_assert_eq(footprint_parse_log(log, strlen(log), &m), TANDEM_OK);
    cr_expect_eq(m.bytes[PLAN_DEVICE_GPU][PLAN_PART_WEIGHTS], MIB(2077));
    cr_expect_eq(m.bytes[PLAN_DEVICE_HOST][PLAN_PART_WEIGHTS], MIB(497));
    cr_expect_eq(m.bytes[PLAN_DEVICE_HOST][PLAN_PART_OUTPUT], MIB(0.95));
    cr_expect_eq(m.bytes[PLAN_DEVICE_GPU][PLAN_PART_COMPUTE], MIB(530));
    cr_expect_eq(m.bytes[PLAN_DEVICE_HOST][PLAN_PART_COMPUTE], MIB(21.01));
    cr_expect(footprint_measure_has_gpu(&m));
}

Test(footprint, ignores_lines_that_are_not_buffers) {
    static const char log[] = "main: model buffer size = unknown\n"
                              "CPU compute buffer size = -5 MiB\n"
                              "CPU weird buffer size = 5 MiB\n"
                              "no newline at the end CPU KV buffer size = 3.00";
    struct footprint_measure m;
    cr_expect_eq(footprint_parse_log(log, strlen(log), &m), TANDEM_ERR_NOTFOUND);
    cr_expect_eq(footprint_parse_log("", 0, &m), TANDEM_ERR_NOTFOUND);
}

Test(footprint, reads_llama_server_argv) {
    char *argv[] = {"-m", "/m.gguf", "--host", "127.0.0.1", "-c", "8192", "-ngl", "0",
                    "-np", "4", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "-b", "512",
                    "-ub", "256", "--no-repack", "-lv", "4", "--swa-full"};
    struct plan_settings s;
    const char *model;
    cr_assert_eq(footprint_settings_from_argv(sizeof argv / sizeof argv[0], argv, &s, &model, NULL,
                                              0),
                 TANDEM_OK);
    uint32_t q8;
    ggml_type_find("q8_0", &q8);
    cr_expect_str_eq(model, "/m.gguf");
    cr_expect_eq(s.ctx, 8192);
    cr_expect_eq(s.ngl, 0);
    cr_expect_eq(s.parallel, 4);
    cr_expect(!s.kv_unified); /* an explicit -np splits the pool */
    cr_expect_eq(s.type_k, q8);
    cr_expect_eq(s.type_v, q8);
    cr_expect(s.flash_attn && s.swa_full);
    cr_expect_eq(s.batch, 512);
    cr_expect_eq(s.ubatch, 256);
}

Test(footprint, engine_defaults_without_flags) {
    struct plan_settings s;
    const char *model;
    cr_assert_eq(footprint_settings_from_argv(0, NULL, &s, &model, NULL, 0), TANDEM_OK);
    cr_expect_null(model);
    cr_expect_eq(s.parallel, 4);
    cr_expect(s.kv_unified && s.flash_attn);
}

Test(footprint, rejects_bad_engine_values) {
    char err[128] = "";
    struct plan_settings s;
    const char *model;
    char *bad_type[] = {"-ctk", "q9_9"};
    cr_expect_eq(footprint_settings_from_argv(2, bad_type, &s, &model, err, sizeof err),
                 TANDEM_ERR_INVAL);
    cr_expect(strstr(err, "-ctk") && strstr(err, "q9_9"), "%s", err);
    char *bad_ctx[] = {"-c", "8k"};
    cr_expect_eq(footprint_settings_from_argv(2, bad_ctx, &s, &model, err, sizeof err),
                 TANDEM_ERR_INVAL);
    char *missing[] = {"-c"};
    cr_expect_eq(footprint_settings_from_argv(1, missing, &s, &model, err, sizeof err),
                 TANDEM_ERR_INVAL);
}

Test(footprint, cache_round_trip) {
    setenv("TANDEM_CACHE", "/tmp/fpt", 1);
    struct footprint_measure m, back;
    cr_assert_eq(footprint_parse_log(CPU_LOG, strlen(CPU_LOG), &m), TANDEM_OK);
    m.process_bytes = 123456789;
    const char *key = "0000000000000000000000000000000000000000000000000000000000000abc";
    cr_assert_eq(footprint_store(key, "engine=b1", "/m.gguf", &m, NULL, 0), TANDEM_OK);
    cr_assert_eq(footprint_load(key, &back, NULL, 0), TANDEM_OK);
    cr_expect_eq(memcmp(back.bytes, m.bytes, sizeof m.bytes), 0);
    cr_expect_eq(memcmp(back.seen, m.seen, sizeof m.seen), 0);
    cr_expect_eq(back.process_bytes, m.process_bytes);
    cr_expect_eq(footprint_load("ffff", &back, NULL, 0), TANDEM_ERR_NOTFOUND);
}

Test(footprint, damaged_entry_is_a_format_error) {
    setenv("TANDEM_CACHE", "/tmp/fpt", 1);
    struct footprint_measure ok = {0};
    cr_assert_eq(footprint_store("good", "x", "/m.gguf", &ok, NULL, 0), TANDEM_OK); /* makes the dir */
    FILE *f = fopen("/tmp/fpt/footprints/bad.json", "w");
    cr_assert_not_null(f);
    fputs("{\"measured\": ", f);
    fclose(f);
    char err[256] = "";
    struct footprint_measure m;
    cr_expect_eq(footprint_load("bad", &m, err, sizeof err), TANDEM_ERR_FORMAT);
    cr_expect(strstr(err, "bad.json"), "%s", err);
}

Test(footprint, apply_marks_measured_parts) {
    struct footprint_measure m;
    cr_assert_eq(footprint_parse_log(CPU_LOG, strlen(CPU_LOG), &m), TANDEM_OK);
    struct plan_footprint f = {0};
    f.bytes[PLAN_DEVICE_GPU][PLAN_PART_OVERHEAD] = 7;
    footprint_apply(&m, &f);
    cr_expect_eq(f.bytes[PLAN_DEVICE_HOST][PLAN_PART_COMPUTE], MIB(518.02));
    cr_expect_eq(f.source[PLAN_PART_COMPUTE], PLAN_SOURCE_MEASURED);
    cr_expect_eq(f.bytes[PLAN_DEVICE_GPU][PLAN_PART_OVERHEAD], 7);
    cr_expect_eq(f.source[PLAN_PART_OVERHEAD], PLAN_SOURCE_MODEL);
}
