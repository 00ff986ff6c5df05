/* Unit tests for nvml: a machine without NVIDIA's library is a normal "no
 * GPU" result, and a library lacking NVML's symbols is refused by name.
 * (This CI machine has no GPU; the device path is exercised on GPU hosts by
 * `tandem doctor`.) */
#include <criterion/criterion.h>
#include <string.h>

#include "base/nvml.h"

Test(nvml, missing_library_is_notfound) {
    struct nvml *n = (struct nvml *)1;
    char why[256] = "";
    cr_expect_eq(nvml_new("libnvidia-ml-absent.so.1", &n, why, sizeof why), TANDEM_ERR_NOTFOUND);
    cr_expect_null(n);
    cr_expect(strstr(why, "libnvidia-ml-absent.so.1 not found"), "%s", why);
}

Test(nvml, library_without_nvml_symbols_is_unsupported) {
    struct nvml *n;
    char why[256] = "";
    cr_expect_eq(nvml_new("libm.so.6", &n, why, sizeof why), TANDEM_ERR_UNSUPPORTED);
    cr_expect_null(n);
    cr_expect(strstr(why, "lacks nvmlInit_v2"), "%s", why);
}

Test(nvml, free_null_is_noop) {
    nvml_free(NULL);
}
