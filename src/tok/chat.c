/* chat.c: the built-in Gemma chat templates (Gemma 3/3n and Gemma 4), written as code so no template text
 * from a model file is ever executed (reliability.md §1.6 point 7). Formats only; tokenizing the result
 * (with PARSE_SPECIAL, without ADD_BOS) is the caller's. Choices are documented in tokenizer.h. */
#include "tok/tokenizer.h"

#include <string.h>

typedef struct sbuf {
    char *out;
    size_t cap, n;                 /* n counts every byte, written or not */
} sbuf;

static void put(sbuf *b, const char *s, size_t len) {
    if (b->n < b->cap) {
        size_t room = b->cap - b->n;
        memcpy(b->out + b->n, s, len < room ? len : room);
    }
    b->n += len;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Jinja's `| trim` (ASCII whitespace only). */
static void put_trimmed(sbuf *b, const char *s, size_t len) {
    while (len && is_ws(s[0])) {
        s++;
        len--;
    }
    while (len && is_ws(s[len - 1])) len--;
    put(b, s, len);
}

typedef enum { ROLE_SYSTEM, ROLE_USER, ROLE_MODEL, ROLE_BAD } role_t;

static role_t role_of(const char *r) {
    if (!r) return ROLE_BAD;
    if (!strcmp(r, "system") || !strcmp(r, "developer")) return ROLE_SYSTEM;
    if (!strcmp(r, "user")) return ROLE_USER;
    if (!strcmp(r, "assistant") || !strcmp(r, "model")) return ROLE_MODEL;
    return ROLE_BAD;
}

/* System texts waiting for a user turn: msgs[from, to) are all system messages. */
static void put_systems(sbuf *b, const gemmac_chat_msg *msgs, size_t from, size_t to, bool trailing_sep) {
    for (size_t j = from; j < to; j++) {
        if (j > from) puts_(b, "\n\n");
        puts_(b, msgs[j].content);
    }
    if (trailing_sep) puts_(b, "\n\n");
}

/* Gemma 3: no system turn; system text (as given) + "\n\n" opens the next user turn (several are joined by
 * "\n\n"). System text that a model turn or the end follows instead gets a user turn of its own, so nothing
 * is dropped (HF's template only folds a leading system message and drops it when no user turn follows). */
static void render_gemma3(sbuf *b, const gemmac_chat_msg *msgs, size_t n, bool gen) {
    puts_(b, "<bos>");
    size_t pending = n;  /* first waiting system message, n when none */
    for (size_t i = 0; i <= n; i++) {
        role_t r = i < n ? role_of(msgs[i].role) : ROLE_BAD;
        if (r == ROLE_SYSTEM) {
            if (pending == n) pending = i;
            continue;
        }
        if (pending < n && r != ROLE_USER) {
            puts_(b, "<start_of_turn>user\n");
            put_systems(b, msgs, pending, i, false);
            puts_(b, "<end_of_turn>\n");
            pending = n;
        }
        if (i == n) break;
        puts_(b, r == ROLE_USER ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
        if (pending < n) {
            put_systems(b, msgs, pending, i, true);
            pending = n;
        }
        put_trimmed(b, msgs[i].content, strlen(msgs[i].content));
        puts_(b, "<end_of_turn>\n");
    }
    if (gen) puts_(b, "<start_of_turn>model\n");
}

static const char *find(const char *p, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(p + i, needle, k)) return p + i;
    return NULL;
}

/* Gemma 4's strip_thinking macro for earlier model turns: split on "<channel|>", keep of each part what
 * precedes "<|channel>", join, trim. Pass 0 finds the first and last kept non-whitespace byte; pass 1
 * writes what lies between them. */
static void put_without_thinking(sbuf *b, const char *s) {
    const char *first = NULL, *last = NULL;
    for (int pass = 0; pass < 2 && (pass == 0 || first); pass++) {
        for (const char *p = s;;) {
            const char *c = strstr(p, "<channel|>");
            size_t part = c ? (size_t)(c - p) : strlen(p);
            const char *o = find(p, part, "<|channel>");
            size_t keep = o ? (size_t)(o - p) : part;
            for (const char *x = p; x < p + keep; x++) {
                if (pass == 1) {
                    if (x >= first && x <= last) put(b, x, 1);
                } else if (!is_ws(*x)) {
                    if (!first) first = x;
                    last = x;
                }
            }
            if (!c) break;
            p = c + strlen("<channel|>");
        }
    }
}

static void render_gemma4(sbuf *b, const gemmac_chat_msg *msgs, size_t n, bool gen) {
    puts_(b, "<bos>");
    for (size_t i = 0; i < n; i++) {
        role_t r = role_of(msgs[i].role);
        puts_(b, r == ROLE_SYSTEM ? "<|turn>system\n" : r == ROLE_USER ? "<|turn>user\n" : "<|turn>model\n");
        if (r == ROLE_MODEL)
            put_without_thinking(b, msgs[i].content);
        else
            put_trimmed(b, msgs[i].content, strlen(msgs[i].content));
        puts_(b, "<turn|>\n");
    }
    if (gen) puts_(b, "<|turn>model\n");
}

gemmac_status gm_chat_render(gm_chat_format fmt, const gemmac_chat_msg *msgs, size_t n, bool add_generation_prompt,
                             char *out, size_t cap, size_t *n_out) {
    if (n_out) *n_out = 0;
    if (!n_out || (n && !msgs) || (cap && !out)) return GEMMAC_ERR_INVALID_ARG;
    if (fmt != GM_CHAT_GEMMA3 && fmt != GM_CHAT_GEMMA4) return GEMMAC_ERR_INVALID_ARG;
    for (size_t i = 0; i < n; i++)
        if (role_of(msgs[i].role) == ROLE_BAD || !msgs[i].content) return GEMMAC_ERR_INVALID_ARG;
    sbuf b = {out, cap, 0};
    if (fmt == GM_CHAT_GEMMA3)
        render_gemma3(&b, msgs, n, add_generation_prompt);
    else
        render_gemma4(&b, msgs, n, add_generation_prompt);
    *n_out = b.n;
    if (cap < b.n + 1) {
        if (cap) out[cap - 1] = '\0';
        return GEMMAC_ERR_BUFFER_TOO_SMALL;
    }
    out[b.n] = '\0';
    return GEMMAC_OK;
}
