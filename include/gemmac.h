/* gemmac.h: the one public header of libgemmac, an inference engine for Gemma models.
 * Owns the library's contract: opaque handles, parameters with defaults, status codes, callbacks.
 * The library never prints, exits or aborts; every failure is a status plus a message on the handle
 * (or in the caller's buffer when no handle exists yet). No global state: all state hangs off handles. */
#ifndef GEMMAC_H
#define GEMMAC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define GEMMAC_API __attribute__((visibility("default")))
#else
#define GEMMAC_API
#endif

/* ==== Status codes (append only; numbers never change) ==== */
typedef enum gemmac_status {
    GEMMAC_OK = 0,
    GEMMAC_ERR_INVALID_ARG = 1,      /* a caller-supplied argument is out of range */
    GEMMAC_ERR_IO = 2,               /* a file could not be opened, mapped or read */
    GEMMAC_ERR_BAD_FILE = 3,         /* a model file is malformed (the message names field and offset) */
    GEMMAC_ERR_UNSUPPORTED = 4,      /* valid, but not supported: architecture, tensor type, ... */
    GEMMAC_ERR_NO_MEMORY = 5,        /* an allocation failed */
    GEMMAC_ERR_CONTEXT_FULL = 6,     /* no room left in the KV cache of a sequence */
    GEMMAC_ERR_NOT_FOUND = 7,        /* a key or tensor the caller asked for is absent */
    GEMMAC_ERR_ABORTED = 8,          /* a callback asked to stop */
    GEMMAC_ERR_BACKEND = 9,          /* the compute backend failed */
    GEMMAC_ERR_BUFFER_TOO_SMALL = 10,/* an output buffer is too small; the needed size is reported */
    GEMMAC_STATUS_LAST               /* never returned */
} gemmac_status;

/* A static English description of a status code; never NULL. */
GEMMAC_API const char *gemmac_status_str(gemmac_status status);

typedef int32_t gemmac_token;

/* ==== Model ==== */
typedef struct gemmac_model gemmac_model;

/* Called during loading with progress in [0, 1]. Return false to abort the load (GEMMAC_ERR_ABORTED). */
typedef bool (*gemmac_progress_fn)(float progress, void *user_data);

typedef struct gemmac_model_params {
    gemmac_progress_fn progress;     /* may be NULL */
    void *progress_user_data;
} gemmac_model_params;

GEMMAC_API gemmac_model_params gemmac_model_default_params(void);

/* Loads a model file (weights are memory-mapped, not copied). On failure *out is NULL and a one-line message
 * that names the file is written to err (if non-NULL). */
GEMMAC_API gemmac_status gemmac_model_load(const char *path, const gemmac_model_params *params,
                                           gemmac_model **out, char *err, size_t err_size);
GEMMAC_API void gemmac_model_free(gemmac_model *model);

typedef struct gemmac_model_info {
    const char *arch;                /* "gemma3", ... */
    const char *name;                /* general.name, or "" */
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    int32_t n_ctx_train, sliding_window;
    uint64_t n_params;               /* elements in all tensors */
    uint64_t weight_bytes;           /* bytes of all tensors as stored */
    uint64_t step_weight_bytes;      /* bytes of weights one decoding step reads: all but the tables only looked up
                                        row by row (per-layer embeddings; the token embedding when the output head
                                        has its own matrix); of a mixture of experts the n_expert_used chosen */
    uint64_t kv_pos_bytes_full;      /* f16 K+V bytes per position over the layers with full attention */
    uint64_t kv_pos_bytes_sliding;   /* the same over sliding-window layers (they keep sliding_window positions) */
    gemmac_token bos, eos, eot;      /* -1 when absent */
    bool has_tokenizer;              /* false: a Hugging Face directory without tokenizer.json (token ids only) */
} gemmac_model_info;

GEMMAC_API void gemmac_model_get_info(const gemmac_model *model, gemmac_model_info *info);

/* Writes a multi-line human-readable description (hyper-parameters, tensors by type, tokenizer, memory
 * plan for n_ctx tokens) into buf; returns the length it needs (like snprintf). */
GEMMAC_API size_t gemmac_model_describe(const gemmac_model *model, int32_t n_ctx, char *buf, size_t size);

/* ==== Tokenizer ==== */
enum {
    GEMMAC_TOKENIZE_ADD_BOS = 1,       /* prepend <bos> if the model's vocabulary asks for it */
    GEMMAC_TOKENIZE_PARSE_SPECIAL = 2, /* text like "<start_of_turn>" becomes its special token */
};

/* Tokenizes len bytes of text (need not be valid UTF-8). Writes at most cap ids; *n_out gets the count
 * needed. GEMMAC_ERR_BUFFER_TOO_SMALL when cap < *n_out. A model without a tokenizer (a Hugging Face
 * directory without tokenizer.json) takes token ids only: tokenize and token_piece return
 * GEMMAC_ERR_UNSUPPORTED and gemmac_detok_new returns NULL. */
GEMMAC_API gemmac_status gemmac_tokenize(const gemmac_model *model, const char *text, size_t len, int flags,
                                         gemmac_token *tokens, size_t cap, size_t *n_out);

/* The raw text of one token (byte tokens give their byte, control tokens give ""). NULL-safe length out. */
GEMMAC_API gemmac_status gemmac_token_piece(const gemmac_model *model, gemmac_token token, const char **piece,
                                            size_t *len);
GEMMAC_API bool gemmac_token_is_eog(const gemmac_model *model, gemmac_token token);

/* Streaming detokenizer: turns ids into text that is always whole UTF-8 sequences. */
typedef struct gemmac_detok gemmac_detok;
GEMMAC_API gemmac_detok *gemmac_detok_new(const gemmac_model *model);
/* Appends the text of token; writes the newly completed UTF-8 text to out (NUL-terminated), its length to
 * *n_out. out needs at least 64 bytes plus the longest piece; GEMMAC_ERR_BUFFER_TOO_SMALL otherwise. */
GEMMAC_API gemmac_status gemmac_detok_push(gemmac_detok *d, gemmac_token token, char *out, size_t cap,
                                           size_t *n_out);
/* Flushes what is pending (an incomplete sequence becomes U+FFFD). */
GEMMAC_API gemmac_status gemmac_detok_flush(gemmac_detok *d, char *out, size_t cap, size_t *n_out);
GEMMAC_API void gemmac_detok_free(gemmac_detok *d);

/* ==== Chat templates (built in per model family; no template code from the file is run) ==== */
typedef struct gemmac_chat_msg {
    const char *role;                /* "system", "user", "assistant" (or "model") */
    const char *content;
} gemmac_chat_msg;

/* Renders messages with the model's chat format; with add_generation_prompt, ends with the model-turn
 * opener. Writes a NUL-terminated string; *n_out gets the length needed (without NUL). */
GEMMAC_API gemmac_status gemmac_chat_render(const gemmac_model *model, const gemmac_chat_msg *msgs, size_t n_msgs,
                                            bool add_generation_prompt, char *out, size_t cap, size_t *n_out);

/* Threads: a loaded model is read-only, so any number of threads may tokenize, render templates and
 * detokenize (each with its own gemmac_detok) on it at once; a context (and a sampler) is used by one
 * thread at a time. */

/* ==== Context: KV cache + compute state for one or many sequences ==== */
typedef struct gemmac_ctx gemmac_ctx;

/* f16 halves the cache; f32 keeps keys and values exact (reference comparisons); q8_0 (int8 with an f16 scale per
 * 32 values, llama.cpp's -ctk q8_0) takes 17/32 of f16's bytes, so batched decoding at long context, bound by
 * reading the cache, goes faster; it needs head sizes that are multiples of 32 (up to 1024). */
typedef enum gemmac_kv_type { GEMMAC_KV_F16 = 0, GEMMAC_KV_F32 = 1, GEMMAC_KV_Q8_0 = 2 } gemmac_kv_type;

typedef struct gemmac_ctx_params {
    int32_t n_ctx;                   /* positions per sequence (0: the model's training length, capped at 4096) */
    int32_t n_seq_max;               /* sequences that may be live at once (default 1) */
    int32_t n_batch;                 /* most tokens in one decode call (default 512) */
    int32_t n_threads;               /* 0: all cores */
    gemmac_kv_type type_kv;          /* element type of cached keys and values (default f16) */
    int32_t n_gpu_layers;            /* layers on the GPU (llama.cpp's -ngl): 0 (default) = the CPU backend,
                                        -1 or >= the model's layers = everything on the CUDA backend (device 0);
                                        partial offload is refused for now */
} gemmac_ctx_params;

GEMMAC_API gemmac_ctx_params gemmac_ctx_default_params(void);
GEMMAC_API gemmac_status gemmac_ctx_new(gemmac_model *model, const gemmac_ctx_params *params, gemmac_ctx **out,
                                        char *err, size_t err_size);
GEMMAC_API void gemmac_ctx_free(gemmac_ctx *ctx);
/* The detail message of the last failed call on ctx ("" if none). */
GEMMAC_API const char *gemmac_ctx_last_error(const gemmac_ctx *ctx);
GEMMAC_API int32_t gemmac_ctx_n_ctx(const gemmac_ctx *ctx);
/* Sequences the context holds at once (its n_seq_max). */
GEMMAC_API int32_t gemmac_ctx_n_seq_max(const gemmac_ctx *ctx);

/* A batch: n_tokens tokens, each with its position and the sequence it belongs to. Tokens of one sequence
 * appear in position order, continuing that sequence's cache. logits[i] asks for token i's logits:
 * 0 none, GEMMAC_LOGITS_TOP only its GEMMAC_TOP_LOGITS best (gemmac_ctx_top_logits: a GPU context then copies
 * 2 KB instead of the whole row, 1 MB for Gemma's vocabulary), any other value the whole row (gemmac_ctx_logits). */
#define GEMMAC_LOGITS_FULL 1
#define GEMMAC_LOGITS_TOP 2
#define GEMMAC_TOP_LOGITS 256
typedef struct gemmac_batch {
    int32_t n_tokens;
    const gemmac_token *token;       /* [n_tokens] */
    const int32_t *pos;              /* [n_tokens] */
    const int32_t *seq_id;           /* [n_tokens], each in [0, n_seq_max) */
    const int8_t *logits;            /* [n_tokens]; NULL: only the last token */
} gemmac_batch;

/* Evaluates a batch (any number of tokens; split internally by n_batch). */
GEMMAC_API gemmac_status gemmac_ctx_decode(gemmac_ctx *ctx, const gemmac_batch *batch);
/* Logits [n_vocab] of the i-th token of the last batch; NULL if it did not ask for logits, or asked for only its
 * best (GEMMAC_LOGITS_TOP) from a context that selects them on its device. */
GEMMAC_API const float *gemmac_ctx_logits(const gemmac_ctx *ctx, int32_t i);
/* The best logits of the i-th token of the last batch (asked for with GEMMAC_LOGITS_TOP or as a whole row): sets
 * *ids and *logits to min(GEMMAC_TOP_LOGITS, n_vocab) ids and values ordered by (value desc, id asc), values read
 * as the sampler reads them (NaN as -inf, +inf as FLT_MAX), and returns that count; -1 when the token has no
 * logits. Valid until the next decode. gemmac_sampler_sample_top samples from them. */
GEMMAC_API int32_t gemmac_ctx_top_logits(gemmac_ctx *ctx, int32_t i, const gemmac_token **ids, const float **logits);
struct gemmac_sampler;
/* What gemmac_batch.logits should ask for of a token that sampler s will sample: GEMMAC_LOGITS_TOP when s picks
 * from a row's best exactly what it would pick from the whole row (gemmac_sampler_top_exact), else
 * GEMMAC_LOGITS_FULL. */
GEMMAC_API int8_t gemmac_ctx_logits_for(const gemmac_ctx *ctx, const struct gemmac_sampler *s);
/* Samples the i-th token of the last batch with s: from the whole row when the context holds it, else from the
 * row's best (gemmac_sampler_sample_top); the token is not accepted. -1 when the token has no logits. */
GEMMAC_API gemmac_token gemmac_ctx_sample(gemmac_ctx *ctx, int32_t i, struct gemmac_sampler *s);
/* Removes positions >= pos0 of a sequence from the cache (pos0 = 0 empties it). */
GEMMAC_API gemmac_status gemmac_ctx_seq_truncate(gemmac_ctx *ctx, int32_t seq_id, int32_t pos0);
/* Next position of a sequence (= the number of positions it holds). */
GEMMAC_API int32_t gemmac_ctx_seq_len(const gemmac_ctx *ctx, int32_t seq_id);
/* Makes sequence dst a copy of sequence src (its cache and length; a shared prompt decoded once). */
GEMMAC_API gemmac_status gemmac_ctx_seq_copy(gemmac_ctx *ctx, int32_t src, int32_t dst);
/* The measured bandwidth of a copy within the memory the context computes in (device memory for -ngl all), in
 * GB/s of bytes read plus written; 0 when unknown. For benchmarks: takes a moment and waits for the device. */
GEMMAC_API double gemmac_ctx_copy_gbps(gemmac_ctx *ctx);

/* ==== Sampler (llama.cpp's names and defaults) ==== */
typedef struct gemmac_sampler gemmac_sampler;

typedef struct gemmac_sampler_params {
    float temp;                      /* 0.8; <= 0 is greedy */
    int32_t top_k;                   /* 40; <= 0 keeps all */
    float top_p;                     /* 0.95; 1 keeps all */
    float min_p;                     /* 0.05; 0 keeps all */
    float repeat_penalty;            /* 1.0 (off) */
    int32_t repeat_last_n;           /* 64; 0 off, -1 the whole context */
    float presence_penalty;          /* 0 */
    float frequency_penalty;         /* 0 */
    uint64_t seed;                   /* GEMMAC_SEED_RANDOM picks one from the clock */
} gemmac_sampler_params;

#define GEMMAC_SEED_RANDOM UINT64_MAX

GEMMAC_API gemmac_sampler_params gemmac_sampler_default_params(void);
/* NULL on an invalid parameter (negative temp is allowed: greedy) or out of memory. */
GEMMAC_API gemmac_sampler *gemmac_sampler_new(const gemmac_sampler_params *params, int32_t n_vocab);
/* Picks a token from logits [n_vocab] (not modified): penalties, then top-k, top-p, min-p, temperature, and
 * a draw from the seeded generator (PCG32). NaN logits count as -inf. The token is not accepted: call
 * gemmac_sampler_accept with it. */
GEMMAC_API gemmac_token gemmac_sampler_sample(gemmac_sampler *s, const float *logits);
/* Whether sampling from a row's n best logits (gemmac_ctx_top_logits: ordered by (value desc, id asc), NaN read as
 * -inf, +inf as FLT_MAX) with gemmac_sampler_sample_top gives exactly the token gemmac_sampler_sample gives on the
 * whole row, drawing from the generator exactly as often. Depends on the parameters and on the current history, so
 * ask before each token. True iff s is not NULL, n >= 1, and
 *   - the penalties can only lower logits (repeat_penalty >= 1, frequency_penalty >= 0, presence_penalty >= 0), or
 *     they touch no token now (neutral, repeat_last_n == 0, or an empty history), and
 *   - k + P <= n, where P is the number of distinct tokens in the penalty window (0 when the penalties touch
 *     nothing) and k is 1 when greedy (temp <= 0), else top_k, which must be in [1, min(n_vocab - 1, 4096)]
 *     (top_k <= 0 or >= n_vocab keeps every token, and top-p's softmax then needs the whole row).
 * Why: at least k of the n best are unpenalised and keep their logits, and every token outside the n best is at most
 * the n-th best before the penalties, which only lower it; so the k best after the penalties, in order, are among the
 * n best. */
GEMMAC_API bool gemmac_sampler_top_exact(const gemmac_sampler *s, int32_t n);
/* Picks a token from n candidates: logits[i] is token ids[i]'s logit (NaN as -inf), in any order; ids outside
 * [0, n_vocab) are skipped and ids must not repeat. Runs gemmac_sampler_sample's chain (penalties from the same
 * history, top-k, top-p, min-p, temperature, the draw from the same generator) over the candidates as if every other
 * token were absent. When gemmac_sampler_top_exact(s, n) holds and the candidates are the row's n best, the token
 * and the generator's state afterwards are exactly gemmac_sampler_sample's on the whole row; otherwise it is an
 * approximation (top-p and the temperature's softmax see only the candidates). NULL arguments, n < 1 or no valid id
 * give token 0. The token is not accepted: call gemmac_sampler_accept with it. */
GEMMAC_API gemmac_token gemmac_sampler_sample_top(gemmac_sampler *s, const gemmac_token *ids, const float *logits,
                                                  int32_t n);
/* Records a token as part of the history the penalties look at (prompt tokens and sampled ones); ids
 * outside the vocabulary are ignored. */
GEMMAC_API void gemmac_sampler_accept(gemmac_sampler *s, gemmac_token token);
/* Forgets the history and re-seeds: a fixed seed then replays the same sequence. */
GEMMAC_API void gemmac_sampler_reset(gemmac_sampler *s);
GEMMAC_API void gemmac_sampler_free(gemmac_sampler *s);

/* ==== Writing GGUF files: synthetic models and conversion ==== */
typedef struct gemmac_write_params {
    const char *type;                /* "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k", "q4_k_m" (llama.cpp's
                                        type choice per tensor: norms f32, embeddings and fallbacks as it does) */
    uint64_t seed;                   /* synth: the weights are a function of (preset, type, seed) */
    const char *tokenizer_from;      /* a GGUF whose tokenizer.* keys are copied, padded with [PADn] tokens to the
                                        model's vocabulary; NULL: a placeholder vocabulary (<pad> <eos> <bos> <unk>,
                                        256 byte tokens, [PADn]) */
    int32_t n_threads;               /* 0: all cores */
    gemmac_progress_fn progress;     /* may be NULL; fraction of the bytes written */
    void *progress_user_data;
} gemmac_write_params;

GEMMAC_API gemmac_write_params gemmac_write_default_params(void);
/* Writes a GGUF with random weights and the exact tensor shapes and metadata of a released model size
 * ("gemma3-270m", ...; the list is in the error message of an unknown name). */
GEMMAC_API gemmac_status gemmac_synth(const char *preset, const char *path, const gemmac_write_params *params,
                                      char *err, size_t err_size);
/* Converts a Hugging Face checkpoint directory (config.json + safetensors) to GGUF with llama.cpp's
 * converter's names and metadata. */
GEMMAC_API gemmac_status gemmac_convert(const char *hf_dir, const char *path, const gemmac_write_params *params,
                                        char *err, size_t err_size);
/* The resident memory running the model with a context of n_ctx tokens (one sequence, batches of n_batch)
 * is planned to take: weights the forward pass touches (not the per-layer embedding table, read a row per
 * token), the f16 KV cache of the layers that own one, and activations. */
GEMMAC_API uint64_t gemmac_model_plan_bytes(const gemmac_model *model, int32_t n_ctx, int32_t n_batch);

#ifdef __cplusplus
}
#endif
#endif /* GEMMAC_H */
