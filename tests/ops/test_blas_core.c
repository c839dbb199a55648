/* The CPU GEMM runs OpenBLAS's kernels for this CPU's vector units, not the SSE3 fallback a
 * dynamic OpenBLAS picks for a CPU it cannot name (ops/cpu/matmul.c), unless the user chose
 * (OPENBLAS_CORETYPE). (The GEMM's results are checked against naive loops in test_kernels.) */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <strings.h>

#include "dt_config.h"
#include "ops/kernels.h"

#if DT_HAVE_OPENBLAS
Test(blas_core, kernels_fit_the_cpu) {
    /* One GEMM through the library (which links its OpenBLAS set-up into this program). */
    float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4];
    dt_local la = {.data = a, .dtype = DT_F32, .ndim = 2, .shape = {2, 2}}, lb = la, lc = la;
    lb.data = b, lc.data = c;
    cr_assert_eq(dt_cpu_matmul(&la, &lb, 0, &lc), DT_OK);
    cr_assert(c[0] == 19 && c[1] == 22 && c[2] == 43 && c[3] == 50);
    /* The GEMM's OpenBLAS as the library loaded it (a test links it only through the library). */
    char *(*openblas_get_corename)(void) =
        (char *(*)(void))dlsym(RTLD_DEFAULT, "openblas_get_corename");
    if (!openblas_get_corename) cr_skip_test("this OpenBLAS does not choose kernels at load");
    if (getenv("OPENBLAS_CORETYPE")) cr_skip_test("OPENBLAS_CORETYPE chose the kernels");
    __builtin_cpu_init();
    const char *core = openblas_get_corename();
    cr_log_info("OpenBLAS kernels: %s", core);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        cr_assert(strcasecmp(core, "Prescott") && strcasecmp(core, "Core2") &&
                      strcasecmp(core, "Nehalem") && strcasecmp(core, "Sandybridge"),
                  "a CPU with AVX2 and FMA runs OpenBLAS's %s kernels", core);
}
#else
Test(blas_core, kernels_fit_the_cpu) {
    cr_skip_test("built without OpenBLAS");
}
#endif
