/* quant_dispatch.c: picks the fast CPU kernels of each tensor element type once per process: detects the
 * ISA (lowered by GEMMAC_ISA=scalar|avx2|avx512) and builds one table per ISA, the reference filling every
 * entry a SIMD file leaves empty (but vec_dot_x4 and vec_dot_4xn, which stay NULL: callers then use vec_dot per
 * column, vec_dot_x4 per row).
 * AVX-512 tables take the VNNI x4 kernels where the CPU has them (GEMMAC_VNNI=0 keeps the others). Kernel bodies live in quant_avx2.c / quant_avx512.c and kernels/ref. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define GM_X86 1
#endif

/* Written once under pthread_once, read-only afterwards. */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static gm_isa g_hw_isa;                                 /* the best ISA the hardware and OS run */
static gm_isa g_isa;                                    /* g_hw_isa, lowered by GEMMAC_ISA */
static gm_type_cpu g_tables[3][GM_TYPE_COUNT];          /* [isa][type] */

static gm_isa detect_hw_isa(void) {
#ifdef GM_X86
    /* __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 state (XGETBV). */
    __builtin_cpu_init();
    unsigned eax, ebx, ecx, edx;
    const int f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c)) return GM_ISA_SCALAR;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return GM_ISA_AVX512;
    return GM_ISA_AVX2;
#else
    return GM_ISA_SCALAR;
#endif
}

static void init_once(void) {
    g_hw_isa = detect_hw_isa();
    g_isa = g_hw_isa;
    const char *env = getenv("GEMMAC_ISA");
    if (env) {
        gm_isa want = g_hw_isa;
        if (strcmp(env, "scalar") == 0) want = GM_ISA_SCALAR;
        else if (strcmp(env, "avx2") == 0) want = GM_ISA_AVX2;
        else if (strcmp(env, "avx512") == 0) want = GM_ISA_AVX512;
        if (want < g_isa) g_isa = want; /* only ever lower; unknown values are ignored */
    }
    for (int isa = GM_ISA_SCALAR; isa <= GM_ISA_AVX512; ++isa) {
        gm_type_cpu *tab = g_tables[isa];
#ifdef GM_X86
        if (isa >= GM_ISA_AVX2 && isa <= (int)g_hw_isa) gm_quant_fill_avx2(tab);
        if (isa >= GM_ISA_AVX512 && isa <= (int)g_hw_isa) {
            gm_quant_fill_avx512(tab);
            const char *vnni = getenv("GEMMAC_VNNI"); /* "0": keep the AVX-512 kernels without VNNI (tests) */
            if (__builtin_cpu_supports("avx512vnni") && !(vnni && strcmp(vnni, "0") == 0)) gm_quant_fill_avx512_vnni(tab);
        }
#endif
        for (int t = 0; t < GM_TYPE_COUNT; ++t) {
            const gm_type_traits *tr = gm_type_traits_of(t);
            if (!tr) continue;
            if (!tab[t].dequantize) tab[t].dequantize = tr->dequantize;
            if (!tab[t].quantize) tab[t].quantize = tr->quantize_act ? tr->quantize_act : tr->quantize;
            if (!tab[t].vec_dot) tab[t].vec_dot = tr->vec_dot;
        }
    }
}

gm_isa gm_cpu_isa(void) {
    pthread_once(&g_once, init_once);
    return g_isa;
}

const char *gm_isa_name(gm_isa isa) {
    switch (isa) {
    case GM_ISA_SCALAR: return "scalar";
    case GM_ISA_AVX2: return "avx2";
    case GM_ISA_AVX512: return "avx512";
    }
    return "unknown";
}

/* NULL also for a type with no reference kernels at all (unknown numbers, q2_K, q3_K). The activation
 * types q8_1 / q8_K have conversions but no vec_dot of their own (their vec_dot entry is NULL). */
const gm_type_cpu *gm_cpu_kernels_isa(gm_type t, gm_isa isa) {
    pthread_once(&g_once, init_once);
    if ((int)isa < GM_ISA_SCALAR || isa > g_hw_isa || (int)t < 0 || t >= GM_TYPE_COUNT) return NULL;
    const gm_type_cpu *k = &g_tables[isa][t];
    return k->dequantize ? k : NULL;
}

const gm_type_cpu *gm_cpu_kernels(gm_type t) { return gm_cpu_kernels_isa(t, gm_cpu_isa()); }
