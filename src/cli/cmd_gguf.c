/* cmd_gguf.c: `tandem gguf set IN OUT key=type:value...`, `tandem gguf rm IN OUT
 * key...`, `tandem gguf dump FILE` and `tandem gguf synth SPEC.json OUT`. Edits
 * and synthesis go through gguf_edit (atomic write, verified by reopening);
 * dump prints every key/value and tensor info as JSON, which the tests compare
 * with the Python gguf package; synth is synth.c. Formats: docs/inspect.md. */
#include "cli/cmd_gguf.h"

#include <stdio.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/gguf_edit.h"
#include "gguf/gguf_json.h"
#include "gguf/synth.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem gguf set IN.gguf OUT.gguf KEY=TYPE:VALUE...\n"
            "       tandem gguf rm  IN.gguf OUT.gguf KEY...\n"
            "       tandem gguf dump FILE.gguf\n"
            "       tandem gguf synth SPEC.json OUT.gguf\n"
            "\n"
            "set   writes OUT as a copy of IN with keys added or changed; TYPE is one of\n"
            "      u8 i8 u16 i16 u32 i32 u64 i64 f32 f64 bool str,\n"
            "      file (VALUE is a path; the key becomes a string with its contents), or\n"
            "      arr[T] (VALUE is a JSON array of T), e.g.\n"
            "        llama.context_length=u32:4096  tokenizer.chat_template.systemone=file:t.jinja\n"
            "rm    writes OUT as a copy of IN without the named keys\n"
            "dump  prints every key/value and tensor info of FILE as JSON\n"
            "synth writes a model described by a JSON spec: keys copied from other GGUFs,\n"
            "      keys set as above, arrays edited, and tensors filled with seeded random\n"
            "      values, constants or holes (sparse); see docs/inspect.md\n"
            "\n"
            "OUT is written atomically (temporary file, then rename) and verified; tensor\n"
            "data is copied unchanged, realigned if general.alignment changes. OUT may be IN.\n");
}

static int open_or_report(const char *path, struct gguf **g) {
    char err[1024];
    if (gguf_open(path, g, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    return 0;
}

/* set and rm: argv = {verb, IN, OUT, item...}. */
static int edit_main(int argc, char **argv, int remove) {
    if (argc < 4) {
        usage(stderr);
        return 2;
    }
    struct gguf *g;
    if (open_or_report(argv[1], &g))
        return 1;
    struct gguf_edit *edit = NULL;
    char err[1024] = "out of memory";
    tandem_err e = gguf_edit_new(g, &edit);
    for (int i = 3; e == TANDEM_OK && i < argc; i++)
        e = remove ? gguf_edit_remove(edit, argv[i], err, sizeof err)
                   : gguf_edit_set_spec(edit, argv[i], err, sizeof err);
    if (e == TANDEM_OK)
        e = gguf_edit_write(edit, argv[2], err, sizeof err);
    if (e != TANDEM_OK)
        fprintf(stderr, "tandem gguf %s: %s\n", argv[0], err);
    gguf_edit_free(edit);
    gguf_free(g);
    return e == TANDEM_OK ? 0 : 1;
}

static int dump_main(int argc, char **argv) {
    if (argc != 2) {
        usage(stderr);
        return 2;
    }
    struct gguf *g;
    if (open_or_report(argv[1], &g))
        return 1;
    json_t *dump = gguf_json_dump(g);
    int ok = dump && json_dumpf(dump, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER) == 0;
    printf("\n");
    if (!ok)
        fprintf(stderr, "tandem gguf dump: out of memory\n");
    json_decref(dump);
    gguf_free(g);
    return ok ? 0 : 1;
}

static int synth_main(int argc, char **argv) {
    if (argc != 3) {
        usage(stderr);
        return 2;
    }
    char err[2048];
    if (synth_write(argv[1], argv[2], err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    return 0;
}

int cmd_gguf_main(int argc, char **argv, const char *llama_server) {
    (void)llama_server;
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "set"))
        return edit_main(argc - 1, argv + 1, 0);
    if (!strcmp(argv[1], "rm"))
        return edit_main(argc - 1, argv + 1, 1);
    if (!strcmp(argv[1], "dump"))
        return dump_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "synth"))
        return synth_main(argc - 1, argv + 1);
    fprintf(stderr, "tandem gguf: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
