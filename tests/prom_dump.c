/* prom_dump: a test helper (never installed) that prints a registry in the
 * text format, so tests/e2e/test_prom_format.py can check it with the
 * official Python parser. Each argument becomes a label value of a counter,
 * a gauge and a histogram series (i = its position, from 0):
 *   tandem_requests_total{model=ARG,route="/v1/x"}   i + 1
 *   tandem_resident_bytes{model=ARG}                 i + 0.5
 *   tandem_latency_seconds{model=ARG}                one observation of i * 0.3
 * plus tandem_up (no labels, 1) with a help text that needs escaping. */
#include <stdio.h>

#include "serve/prom.h"

int main(int argc, char **argv) {
    struct prom *p = prom_new();
    if (!p)
        return 1;
    const double bounds[] = {0.005, 0.1, 0.5, 1, 2.5};
    struct prom_metric *up =
        prom_register(p, PROM_GAUGE, "tandem_up", "1 while serving; a \\ backslash\nand a newline",
                      NULL, NULL, 0);
    struct prom_metric *req =
        prom_register(p, PROM_COUNTER, "tandem_requests_total", "Requests by \"model\" and route.",
                      (const char *[]){"model", "route", NULL}, NULL, 0);
    struct prom_metric *res = prom_register(p, PROM_GAUGE, "tandem_resident_bytes",
                                            "Resident bytes.", (const char *[]){"model", NULL},
                                            NULL, 0);
    struct prom_metric *lat =
        prom_register(p, PROM_HISTOGRAM, "tandem_latency_seconds", "Latency.",
                      (const char *[]){"model", NULL}, bounds, sizeof bounds / sizeof *bounds);
    tandem_err e = up && req && res && lat ? TANDEM_OK : TANDEM_ERR_NOMEM;
    if (!e)
        e = prom_set(up, NULL, 1);
    for (int i = 1; !e && i < argc; i++) {
        e = prom_add(req, (const char *[]){argv[i], "/v1/x"}, i);
        if (!e)
            e = prom_set(res, (const char *[]){argv[i]}, i - 0.5);
        if (!e)
            e = prom_observe(lat, (const char *[]){argv[i]}, (i - 1) * 0.3);
    }
    struct mem_buf b;
    mem_buf_init(&b, (size_t)1 << 24);
    if (!e)
        e = prom_render(p, &b);
    if (!e && b.len && fwrite(b.data, 1, b.len, stdout) != b.len)
        e = TANDEM_ERR_IO;
    mem_buf_deinit(&b);
    prom_free(p);
    if (e)
        fprintf(stderr, "prom_dump: %s\n", tandem_strerror(e));
    return e ? 1 : 0;
}
