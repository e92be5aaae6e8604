/* error.c: status names and the detail-message helper declared in error.h. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *gemmac_status_str(gemmac_status status) {
    switch (status) {
    case GEMMAC_OK: return "ok";
    case GEMMAC_ERR_INVALID_ARG: return "invalid argument";
    case GEMMAC_ERR_IO: return "i/o error";
    case GEMMAC_ERR_BAD_FILE: return "malformed model file";
    case GEMMAC_ERR_UNSUPPORTED: return "unsupported";
    case GEMMAC_ERR_NO_MEMORY: return "out of memory";
    case GEMMAC_ERR_CONTEXT_FULL: return "context full";
    case GEMMAC_ERR_NOT_FOUND: return "not found";
    case GEMMAC_ERR_ABORTED: return "aborted";
    case GEMMAC_ERR_BACKEND: return "backend failure";
    case GEMMAC_ERR_BUFFER_TOO_SMALL: return "buffer too small";
    case GEMMAC_STATUS_LAST: break;
    }
    return "unknown status";
}

gemmac_status gm_fail(gm_error *err, gemmac_status status, const char *fmt, ...) {
    if (err) {
        err->status = status;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return status;
}

void gm_error_clear(gm_error *err) {
    if (err) {
        err->status = GEMMAC_OK;
        err->msg[0] = '\0';
    }
}

gm_shown gm_show(const char *bytes, size_t len) {
    gm_shown out;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (o + 4 > GM_SHOW_MAX) {
            memcpy(out.s + o, "...", 3);
            o += 3;
            break;
        }
        const unsigned char c = (unsigned char)bytes[i];
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
            out.s[o++] = (char)c;
        } else {
            static const char hex[] = "0123456789abcdef";
            out.s[o++] = '\\';
            out.s[o++] = 'x';
            out.s[o++] = hex[c >> 4];
            out.s[o++] = hex[c & 15];
        }
    }
    out.s[o] = '\0';
    return out;
}
