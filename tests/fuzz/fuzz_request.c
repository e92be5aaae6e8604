/* fuzz_request.c: libFuzzer target for the server's request parser (server/request.c): arbitrary bytes as a
 * chat (first byte even) or completion body; the parser must accept or reject without crashing, and what it
 * accepts must hold its invariants (valid UTF-8 strings, ranges). The error message goes through the JSON
 * error formatter, which must always produce a body.
 *   CC=clang cmake -B build-server-fuzz -DGEMMAC_FUZZ=ON -DGEMMAC_TESTS=OFF && cmake --build build-server-fuzz
 *   build-server-fuzz/fuzz_request -max_len=8192 -dict=... -runs=1000000 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format.h"
#include "request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const srv_kind kind = (data[0] & 1) ? SRV_COMPLETION : SRV_CHAT;
    srv_limits lim = srv_default_limits();
    lim.max_body = 64 << 10;
    srv_request r;
    srv_error e;
    if (srv_parse_request(kind, (const char *)data + 1, size - 1, &lim, &r, &e)) {
        if (kind == SRV_CHAT) {
            if (r.n_msgs < 1 || !r.msgs) abort();
            for (int32_t i = 0; i < r.n_msgs; i++)
                if (!srv_utf8_valid(r.msgs[i].content, strlen(r.msgs[i].content))) abort();
        } else if (!r.prompt || !srv_utf8_valid(r.prompt, r.prompt_len)) abort();
        if (r.max_tokens != -1 && (r.max_tokens < 1 || r.max_tokens > lim.max_tokens_cap)) abort();
        if (r.sp.top_k < 0 || !(r.sp.top_p >= 0 && r.sp.top_p <= 1) || r.n_stop > lim.max_stop) abort();
        srv_request_free(&r);
    } else {
        if (e.status < 400 || e.status > 599 || !e.message[0]) abort();
        char *body = srv_fmt_error(e.message, e.type ? e.type : "invalid_request_error", e.param, e.status);
        if (!body) abort();
        free(body);
    }
    return 0;
}
