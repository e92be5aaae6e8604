/* membw.c: read bandwidth of this machine, the floor for memory-bound decoding: T threads each stream an
 * AVX2 sum over their own 256 MiB buffer, best of 3 passes. Build and run:
 *   gcc -O2 -mavx2 -pthread bench/membw.c -o build/membw && build/membw 1 && build/membw 2 */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { BYTES = 256 << 20 };

static volatile int g_sink; /* keeps the sums alive */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *reader(void *arg) {
    char *a = aligned_alloc(64, BYTES);
    memset(a, 1, BYTES);
    double best = 1e30;
    __m256i acc = _mm256_setzero_si256();
    for (int r = 0; r < 3; r++) {
        const double t0 = now();
        for (size_t i = 0; i < BYTES; i += 32) acc = _mm256_add_epi8(acc, _mm256_load_si256((const __m256i *)(a + i)));
        const double dt = now() - t0;
        best = dt < best ? dt : best;
    }
    g_sink = _mm256_extract_epi8(acc, 0);
    *(double *)arg = BYTES / best / 1e9;
    free(a);
    return NULL;
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 1;
    if (n < 1 || n > 256) return 2;
    pthread_t th[256];
    double gbs[256], total = 0;
    for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, reader, &gbs[i]);
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        total += gbs[i];
    }
    printf("%d thread(s): %.2f GB/s read\n", n, total);
    return 0;
}
