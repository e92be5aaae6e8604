/* tokenizer.h: Gemma tokenizers (Gemma 3 SentencePiece-style "llama"/SPM, Gemma 4 "gemma4" BPE), the
 * per-token pieces, end-of-generation tests, a streaming UTF-8-safe detokenizer and the built-in chat
 * templates. Reproduces llama.cpp's llama-vocab.cpp token for token. Reading a GGUF file is src/io/gguf.c;
 * the public gemmac_tokenize()/gemmac_chat_render() wrappers live with the model handle. */
#ifndef GM_TOKENIZER_H
#define GM_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "gemmac.h"
#include "io/gguf.h"

typedef struct gm_tokenizer gm_tokenizer;

typedef enum gm_tok_kind {
    GM_TOK_SPM,          /* tokenizer.ggml.model "llama": bigram merges by score (Gemma 3 / 3n) */
    GM_TOK_BPE_GEMMA4,   /* tokenizer.ggml.model "gemma4": merges by rank over UTF-8 characters */
} gm_tok_kind;

/* GGUF token types (tokenizer.ggml.token_type). */
enum {
    GM_TOKTYPE_NORMAL = 1, GM_TOKTYPE_UNKNOWN = 2, GM_TOKTYPE_CONTROL = 3,
    GM_TOKTYPE_USER_DEFINED = 4, GM_TOKTYPE_UNUSED = 5, GM_TOKTYPE_BYTE = 6,
};

/* Everything a tokenizer is built from; gm_tokenizer_new copies it all (the desc may die afterwards). */
typedef struct gm_vocab_desc {
    gm_tok_kind kind;
    uint32_t n_tokens;
    const gm_str *tokens;                /* [n_tokens] token text as stored (▁ for space, "<0x0A>" bytes) */
    const float *scores;                 /* [n_tokens] or NULL (all 0) */
    const int32_t *token_types;          /* [n_tokens] GM_TOKTYPE_* or NULL (all normal) */
    uint64_t n_merges;
    const gm_str *merges;                /* [n_merges] "left right", BPE only; rank = index */
    int32_t bos, eos, eot, unk, pad;     /* -1 when absent; eot = <end_of_turn> / <turn|> */
    bool add_bos, add_space_prefix;
} gm_vocab_desc;

/* Builds a tokenizer. GEMMAC_ERR_INVALID_ARG for a NULL/inconsistent desc; GEMMAC_ERR_BAD_FILE for
 * vocabulary content llama.cpp also rejects or that would be unsafe: duplicate token texts, a BYTE token
 * that is not "<0xHH>" with two hex digits, a special id outside [0, n_tokens), add_bos without bos.
 * Like llama.cpp, an empty token text is stored as "[EMPTY_<id>]". */
gemmac_status gm_tokenizer_new(const gm_vocab_desc *d, gm_tokenizer **out, gm_error *err);

/* Reads the tokenizer.ggml.* keys: model ("llama" → SPM, "gemma4" → BPE), tokens (STRING array),
 * scores (FLOAT32 array of n_tokens, optional), token_type (INT32 array of n_tokens, optional), merges
 * (STRING array, required for gemma4), bos/eos/eot/unknown/padding ids (optional, each < n_tokens),
 * add_bos_token, add_space_prefix. Any other element type or count is GEMMAC_ERR_BAD_FILE. As llama.cpp:
 * SPM defaults add_bos = add_space_prefix = true unless the keys say otherwise; gemma4 always adds BOS;
 * a missing eot id is found by text ("<end_of_turn>", then "<turn|>"). */
gemmac_status gm_tokenizer_from_gguf(const gm_gguf *g, gm_tokenizer **out, gm_error *err);
void gm_tokenizer_free(gm_tokenizer *t);

struct gm_gguf_writer;
/* Writes t as the tokenizer.ggml.* keys llama.cpp's converter writes (tokenizer_write.c), the token list
 * padded with "[PADi]" to n_vocab rows (n_vocab >= the tokenizer's size). */
gemmac_status gm_tokenizer_write_gguf(const gm_tokenizer *t, struct gm_gguf_writer *w, int32_t n_vocab,
                                      gm_error *err);

/* A Hugging Face tokenizer.json (src/tok/tokenizer_json.c). path is the file or the directory holding it;
 * tokenizer_config.json, special_tokens_map.json and generation_config.json next to it, when present, give
 * bos / eos / pad (texts, else ids) and add_bos_token; a present side file that does not parse is an error
 * naming it. Accepted: model.type "BPE" (vocab, merges as "a b" or ["a", "b"], byte_fallback, unk_token),
 * added_tokens (special → control, others → user-defined, as the GGUF converter), the normalizer
 * Replace(" ", "▁") (optionally after Prepend("▁")), the pre_tokenizer none / Split(" ") / Split into newline
 * runs. kind_hint is GM_TOK_SPM (Gemma 3 / 3n: merges become scores, see the .c) or GM_TOK_BPE_GEMMA4 when
 * the caller knows the model family, or GM_TOK_KIND_AUTO: Gemma 4 when the pre_tokenizer splits newline runs
 * or the vocabulary has <|turn> / <turn|>, else SPM. Defaults as from GGUF: gemma4 always adds BOS; SPM adds
 * it unless tokenizer_config.json says add_bos_token false (or, without one, the post_processor template does
 * not start with bos); eot is <end_of_turn> or <turn|> by text, else generation_config's second eos id.
 * GEMMAC_ERR_BAD_FILE for malformed content (not JSON, no model, ids not 0..n-1 or repeated, duplicate
 * texts, merges naming unknown tokens), GEMMAC_ERR_UNSUPPORTED for valid files of another kind (Unigram,
 * WordPiece, other normalizers); messages start with the file name. */
#define GM_TOK_KIND_AUTO (-1)
#define GM_TOKJSON_MAX_BYTES (64u << 20)   /* a real Gemma tokenizer.json is ~33 MB */
#define GM_TOKJSON_MAX_VALUES (1u << 22)   /* JSON values (262144 tokens + 514906 merges ≈ 1.9 M) */
#define GM_TOKJSON_MAX_DEPTH 32
gemmac_status gm_tokenizer_from_hf_json(const char *path, int kind_hint, gm_tokenizer **out, gm_error *err);
/* The same over len bytes of tokenizer.json text, without side files; name is used in messages. */
gemmac_status gm_tokenizer_from_hf_json_text(const char *text, size_t len, const char *name, int kind_hint,
                                             gm_tokenizer **out, gm_error *err);

/* Tokenizes len bytes (any bytes: invalid UTF-8 and NULs are fine). flags: GEMMAC_TOKENIZE_ADD_BOS
 * prepends bos when the vocabulary asks for it (add_bos); GEMMAC_TOKENIZE_PARSE_SPECIAL matches control
 * tokens ("<start_of_turn>", "<bos>") in the text. User-defined tokens ("\n\n", "<|channel>") are matched
 * in both modes, as in llama.cpp. Writes min(cap, needed) ids; *n_out gets the number needed;
 * GEMMAC_ERR_BUFFER_TOO_SMALL when cap < needed. out may be NULL when cap == 0. Text longer than
 * GM_TOK_MAX_TEXT bytes is GEMMAC_ERR_INVALID_ARG. Cost is O(len log len) for any text (1 MiB of one
 * character: ~0.1-0.3 s); memory up to ~40 bytes per input byte for a single huge line. A tokenizer is
 * immutable once built: any number of threads may call gm_tokenize on it at once. */
#define GM_TOK_MAX_TEXT ((size_t)1 << 24)  /* 16 MiB */
gemmac_status gm_tokenize(const gm_tokenizer *t, const char *text, size_t len, int flags, gemmac_token *out,
                          size_t cap, size_t *n_out);

/* The decoded bytes of a token, as llama.cpp's token_to_piece(special = false): ▁ → space for normal
 * tokens, <0xNN> → that byte, user-defined tokens as written, control/unknown/unused tokens → "".
 * Not NUL-terminated in general (a byte piece may be "\0"); *len gets its length (len may be NULL).
 * NULL for an id outside [0, n_tokens). */
const char *gm_token_piece(const gm_tokenizer *t, gemmac_token id, size_t *len);
/* The token's text as stored in the vocabulary (for diagnostics); NULL when out of range. */
const char *gm_token_text(const gm_tokenizer *t, gemmac_token id, size_t *len);
/* The id of a token with exactly this text, or -1. */
gemmac_token gm_token_find(const gm_tokenizer *t, const char *text, size_t len);

/* End of generation: eos, eot, and <|tool_response> when the vocabulary has it (Gemma 4). */
bool gm_token_is_eog(const gm_tokenizer *t, gemmac_token id);

uint32_t gm_tokenizer_n_tokens(const gm_tokenizer *t);
gm_tok_kind gm_tokenizer_kind(const gm_tokenizer *t);
gemmac_token gm_tokenizer_bos(const gm_tokenizer *t);   /* -1 when absent */
gemmac_token gm_tokenizer_eos(const gm_tokenizer *t);
gemmac_token gm_tokenizer_eot(const gm_tokenizer *t);
bool gm_tokenizer_add_bos(const gm_tokenizer *t);
/* The longest piece in bytes; a detok buffer of GM_DETOK_SLACK + 3 × this never is too small. */
size_t gm_tokenizer_max_piece(const gm_tokenizer *t);

/* ---- Streaming detokenizer ----
 * Pieces are concatenated and only complete UTF-8 sequences are emitted; a character split across byte
 * tokens is held back until it is whole. Invalid sequences become U+FFFD (one per maximal invalid
 * subpart, as Python's errors="replace"). The tokenizer must outlive the detokenizer. */
typedef struct gm_detok gm_detok;
#define GM_DETOK_SLACK 64  /* out needs cap >= GM_DETOK_SLACK + 3 × the piece length to never be short */
gm_detok *gm_detok_new(const gm_tokenizer *t);   /* NULL on out of memory */
/* Appends token id's piece and writes the newly completed text to out, NUL-terminated; *n_out gets its
 * length (without NUL). GEMMAC_ERR_INVALID_ARG for an out-of-range id; GEMMAC_ERR_BUFFER_TOO_SMALL when
 * cap is less than the needed length + 1 (*n_out gets the needed length; nothing is consumed, so the
 * call can be repeated with a larger buffer). */
gemmac_status gm_detok_push(gm_detok *d, gemmac_token id, char *out, size_t cap, size_t *n_out);
/* Emits what is pending (an incomplete sequence becomes U+FFFD) and resets the state. Needs cap >= 4. */
gemmac_status gm_detok_flush(gm_detok *d, char *out, size_t cap, size_t *n_out);
void gm_detok_free(gm_detok *d);

/* ---- Built-in chat templates (no template code from the file is run) ----
 * GM_CHAT_GEMMA3 (Gemma 3 / 3n):
 *     <bos><start_of_turn>user\n{system}\n\n{text}<end_of_turn>\n<start_of_turn>model\n{text}<end_of_turn>\n
 *   There is no system turn: system text (as given) + "\n\n" is prepended to the next user turn; system
 *   text followed by a model turn or by nothing gets a user turn of its own (HF's template drops it).
 * GM_CHAT_GEMMA4:
 *     <bos><|turn>system\n{system}<turn|>\n<|turn>user\n{text}<turn|>\n<|turn>model\n{text}<turn|>\n
 *   A system/developer message becomes a system turn in place.
 * Roles: "system" (also "developer"), "user", "assistant" (or "model", rendered "model"); anything else
 * is GEMMAC_ERR_INVALID_ARG. Turn texts are trimmed of ASCII whitespace (the HF templates' `| trim`);
 * Gemma 4 earlier model turns lose their <|channel>…<channel|> thought channels, as the HF template does.
 * add_generation_prompt appends "<start_of_turn>model\n" / "<|turn>model\n" (thinking off; we do NOT append
 * the empty thought channel "<|channel>thought\n<channel|>" that the large-model Gemma 4 template adds).
 * The rendered text begins with "<bos>": tokenize it with GEMMAC_TOKENIZE_PARSE_SPECIAL and WITHOUT
 * GEMMAC_TOKENIZE_ADD_BOS, or the prompt starts with two BOS tokens.
 * Writes a NUL-terminated string; *n_out gets the length needed without NUL; GEMMAC_ERR_BUFFER_TOO_SMALL
 * when cap < *n_out + 1 (out may be NULL when cap == 0). */
typedef enum gm_chat_format { GM_CHAT_GEMMA3, GM_CHAT_GEMMA4 } gm_chat_format;
gemmac_status gm_chat_render(gm_chat_format fmt, const gemmac_chat_msg *msgs, size_t n, bool add_generation_prompt,
                             char *out, size_t cap, size_t *n_out);

#endif
