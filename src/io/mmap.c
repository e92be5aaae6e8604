/* mmap.c: gm_map_file / gm_map_release over POSIX open/fstat/mmap (see mmap.h).
 * Only regular files are mapped: devices and FIFOs (an endless /dev/random) are refused up front. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L   /* O_CLOEXEC, strerror_r (CMake defines _GNU_SOURCE) */
#endif
#include "io/mmap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* strerror is not guaranteed thread-safe; the GNU strerror_r returns a static or caller-buffer string. */
static const char *errno_str(int e, char *buf, size_t n) {
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
    return strerror_r(e, buf, n);
#else
    return strerror_r(e, buf, n) == 0 ? buf : "unknown error";
#endif
}

gemmac_status gm_map_file(const char *path, gm_map *out, gm_error *err) {
    char ebuf[128];
    if (!out) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_map_file: out is NULL");
    out->data = NULL;
    out->size = 0;
    if (!path || !*path) return gm_fail(err, GEMMAC_ERR_INVALID_ARG, "gm_map_file: empty path");

    int fd;
    do {
        fd = open(path, O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        int e = errno;
        return gm_fail(err, GEMMAC_ERR_IO, "%.300s: cannot open: %s", path, errno_str(e, ebuf, sizeof ebuf));
    }

    gemmac_status st = GEMMAC_OK;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        st = gm_fail(err, GEMMAC_ERR_IO, "%.300s: cannot stat: %s", path, errno_str(e, ebuf, sizeof ebuf));
        goto done;
    }
    if (S_ISDIR(sb.st_mode)) {
        st = gm_fail(err, GEMMAC_ERR_IO, "%.300s: is a directory, not a model file", path);
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = gm_fail(err, GEMMAC_ERR_IO, "%.300s: not a regular file", path);
        goto done;
    }
    if (sb.st_size <= 0) {
        st = gm_fail(err, GEMMAC_ERR_IO, "%.300s: file is empty", path);
        goto done;
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
        st = gm_fail(err, GEMMAC_ERR_IO, "%.300s: file of %llu bytes does not fit the address space", path,
                     (unsigned long long)sb.st_size);
        goto done;
    }
    void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        st = gm_fail(err, GEMMAC_ERR_IO, "%.300s: cannot map %llu bytes: %s", path,
                     (unsigned long long)sb.st_size, errno_str(e, ebuf, sizeof ebuf));
        goto done;
    }
    /* Weights are read front to back on the first forward pass: ask the kernel to start reading now rather
     * than fault page by page (advice only; its failure changes nothing). */
    (void)madvise(p, (size_t)sb.st_size, MADV_WILLNEED);
    out->data = p;
    out->size = (uint64_t)sb.st_size;

done:
    close(fd);
    return st;
}

void gm_map_advise_random(const void *p, uint64_t n) {
    const long page = sysconf(_SC_PAGESIZE);
    if (!p || !n || page <= 0) return;
    const uintptr_t lo = (uintptr_t)p & ~(uintptr_t)(page - 1);
    const uintptr_t hi = (uintptr_t)p + n;
    (void)madvise((void *)lo, hi - lo, MADV_RANDOM);
}

void gm_map_advise_pageout(const void *p, uint64_t n) {
#ifdef MADV_PAGEOUT
    const long page = sysconf(_SC_PAGESIZE);
    if (!p || page <= 0) return;
    const uintptr_t lo = ((uintptr_t)p + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
    const uintptr_t hi = ((uintptr_t)p + n) & ~(uintptr_t)(page - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_PAGEOUT);
#else
    (void)p, (void)n;
#endif
}

void gm_map_release(gm_map *m) {
    if (!m) return;
    if (m->data) munmap((void *)m->data, (size_t)m->size);
    m->data = NULL;
    m->size = 0;
}
