/* error.h: the internal error record every fallible function fills: a status and a one-line detail.
 * Owns formatting of that detail; deciding what to do with it belongs to callers (CLI, server). */
#ifndef GM_ERROR_H
#define GM_ERROR_H

#include <stddef.h>

#include "gemmac.h"

typedef struct gm_error {
    gemmac_status status;
    char msg[512];                   /* "tensor blk.3.attn_q.weight: offset 0x1234 past end of file" */
} gm_error;

/* Records status and a printf-style message in err (err may be NULL); returns status so callers can
 * write `return gm_fail(err, GEMMAC_ERR_BAD_FILE, "...", ...);`. */
gemmac_status gm_fail(gm_error *err, gemmac_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

void gm_error_clear(gm_error *err);

/* Bytes from a file or a request as shown in a message: printable ASCII as is, every other byte (and \ and ')
 * as \xNN, cut with "..." past GM_SHOW_MAX characters. Returned by value: use .s in a printf argument. */
#define GM_SHOW_MAX 96
typedef struct gm_shown {
    char s[GM_SHOW_MAX + 8];
} gm_shown;
gm_shown gm_show(const char *bytes, size_t len);

#endif
