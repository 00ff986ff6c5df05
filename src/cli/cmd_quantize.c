/* cmd_quantize.c: `tandem quantize`, a thin wrapper over the pinned engine's llama-quantize.
 *
 * It adds nothing to the quantization itself: it finds the tool that
 * scripts/build-engine.sh installs beside llama-server (engine_locate_tool),
 * refuses to overwrite the input, runs the tool from an argv array (no
 * shell) with its output passed through, and then checks that the result
 * parses as GGUF. For options beyond these, run llama-quantize directly.
 * With --ladder it hands over to cli_ladder (flow/qladder), which chooses the type. */
#include "cli/cmd_quantize.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli_ladder.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "version.h"

static void usage(FILE *f) {
    fprintf(f, "usage: tandem quantize IN.gguf OUT.gguf TYPE [--allow-requantize]\n"
               "       tandem quantize SRC.gguf --ladder [TYPES] --data SET.jsonl [options]\n"
               "\n"
               "The second form chooses the smallest quantization that keeps SRC's decisions\n"
               "and fits beside its partner: `tandem quantize --ladder --help` explains it.\n"
               "\n"
               "Runs the pinned engine's llama-quantize (installed beside llama-server by\n"
               "scripts/build-engine.sh) to write IN re-encoded as TYPE (Q8_0, Q4_0, Q4_K_M, ...;\n"
               "`llama-quantize --help` lists them) into OUT, then checks that OUT reads back\n"
               "as GGUF. Metadata, including a decision model's, is copied unchanged.\n"
               "\n"
               "  --allow-requantize  accept an already quantized IN (quality is then bounded by\n"
               "                      IN's, not by the original weights')\n"
               "  -h, --help\n");
}

int cmd_quantize_main(int argc, char **argv, const char *llama_server) {
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--ladder") || !strncmp(argv[i], "--ladder=", 9))
            return cli_ladder_main(argc, argv, llama_server);
    static const struct option opts[] = {
        {"allow-requantize", no_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    int c, requant = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'r': requant = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (argc - optind != 3) {
        fprintf(stderr, "tandem quantize: expected IN OUT TYPE\n");
        usage(stderr);
        return 2;
    }
    const char *in = argv[optind], *out = argv[optind + 1], *type = argv[optind + 2];
    struct stat si, so;
    if (stat(in, &si) != 0) {
        fprintf(stderr, "tandem quantize: %s: cannot read\n", in);
        return 1;
    }
    if (!strcmp(in, out) ||
        (stat(out, &so) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)) {
        fprintf(stderr, "tandem quantize: OUT must differ from IN\n");
        return 2;
    }
    char tool[4096];
    tandem_err e = engine_locate_tool(llama_server, TANDEM_ENGINE_BUILD, "llama-quantize", tool,
                                      sizeof tool);
    if (e != TANDEM_OK) {
        fprintf(stderr, "tandem quantize: %s: %s; scripts/build-engine.sh installs it beside "
                        "llama-server\n", tool,
                e == TANDEM_ERR_NOTFOUND ? "no executable llama-quantize" : tandem_strerror(e));
        return 1;
    }
    char *args[7];
    int n = 0;
    args[n++] = tool;
    if (requant)
        args[n++] = "--allow-requantize";
    args[n++] = (char *)in;
    args[n++] = (char *)out;
    args[n++] = (char *)type;
    args[n] = NULL;
    char err[512];
    int code;
    if (engine_run_tool(args, &code, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem quantize: %s\n", err);
        return 1;
    }
    if (code != 0) {
        fprintf(stderr, "tandem quantize: llama-quantize failed (exit status %d)\n", code);
        return 1;
    }
    struct gguf *g;
    if (gguf_open(out, &g, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem quantize: the output does not read back: %s\n", err);
        return 1;
    }
    gguf_free(g);
    printf("tandem quantize: wrote %s (%s)\n", out, type);
    return 0;
}
