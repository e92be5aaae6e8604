/* request.c: see request.h. Validation order: size, UTF-8, depth (before cJSON sees the bytes), then the JSON
 * tree field by field. JSON null counts as absent. Every message names the field; user text never goes into a
 * message unescaped (the server escapes by building error bodies with cJSON). */
#include "request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

srv_limits srv_default_limits(void) {
    srv_limits l = {.max_body = 1u << 20, .max_depth = 64, .max_tokens_cap = 1 << 20, .max_messages = 1024,
                    .max_stop = 8, .max_stop_len = 256};
    return l;
}

bool srv_utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t k;
        unsigned min;
        if (c >= 0xC2 && c <= 0xDF) { k = 1; min = 0x80; }
        else if (c >= 0xE0 && c <= 0xEF) { k = 2; min = 0x800; }
        else if (c >= 0xF0 && c <= 0xF4) { k = 3; min = 0x10000; }
        else return false;
        if (n - i <= k) return false;
        unsigned cp = c & (0x3F >> k);
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += k + 1;
    }
    return true;
}

int32_t srv_json_depth(const char *s, size_t n, int32_t limit) {
    int32_t d = 0, max = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = false;
        } else if (c == '"') in_str = true;
        else if (c == '[' || c == '{') {
            if (++d > max) max = d;
            if (max > limit) return max;
        } else if ((c == ']' || c == '}') && d > 0) d--;
    }
    return max;
}

static bool fail(srv_error *e, int status, const char *type, const char *param, const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->param = param;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return false;
}
#define BAD(param, ...) fail(err, 400, "invalid_request_error", param, __VA_ARGS__)

static const cJSON *field(const cJSON *root, const char *name) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, name);
    return f && !cJSON_IsNull(f) ? f : NULL;
}

/* A number field in [lo, hi]; *present false when absent. integral: must be a whole number. */
static bool get_num(const cJSON *root, const char *name, double lo, double hi, bool integral, double *out,
                    bool *present, srv_error *err) {
    const cJSON *f = field(root, name);
    *present = f != NULL;
    if (!f) return true;
    if (!cJSON_IsNumber(f)) return BAD(name, "'%s' must be a number", name);
    double v = f->valuedouble;
    if (!isfinite(v) || v < lo || v > hi)
        return BAD(name, "'%s' must be %s in [%.9g, %.9g]", name, integral ? "an integer" : "a number", lo, hi);
    if (integral && v != floor(v)) return BAD(name, "'%s' must be an integer", name);
    *out = v;
    return true;
}

static bool get_bool(const cJSON *root, const char *name, bool *out, srv_error *err) {
    const cJSON *f = field(root, name);
    if (!f) return true;
    if (!cJSON_IsBool(f)) return BAD(name, "'%s' must be true or false", name);
    *out = cJSON_IsTrue(f);
    return true;
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* A message's content: a string, or an array of {"type":"text","text":...} parts (joined). */
static bool get_content(const cJSON *c, int32_t idx, char **out, srv_error *err) {
    if (!c || cJSON_IsNull(c)) {
        *out = dup_n("", 0);
        return *out ? true : fail(err, 500, "server_error", NULL, "out of memory");
    }
    if (cJSON_IsString(c)) {
        *out = dup_n(c->valuestring, strlen(c->valuestring));
        return *out ? true : fail(err, 500, "server_error", NULL, "out of memory");
    }
    if (!cJSON_IsArray(c)) return BAD("messages", "messages[%d].content must be a string or an array of text parts", idx);
    size_t total = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0)
            return BAD("messages", "messages[%d].content: only parts of type \"text\" are supported", idx);
        if (!cJSON_IsString(text)) return BAD("messages", "messages[%d].content: a text part needs a string 'text'", idx);
        total += strlen(text->valuestring);
    }
    char *s = malloc(total + 1);
    if (!s) return fail(err, 500, "server_error", NULL, "out of memory");
    size_t at = 0;
    cJSON_ArrayForEach(part, c) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t n = strlen(t);
        memcpy(s + at, t, n);
        at += n;
    }
    s[at] = '\0';
    *out = s;
    return true;
}

static bool parse_messages(const cJSON *root, const srv_limits *lim, srv_request *out, srv_error *err) {
    const cJSON *m = field(root, "messages");
    if (!m) return BAD("messages", "'messages' is required");
    if (!cJSON_IsArray(m)) return BAD("messages", "'messages' must be an array");
    int n = cJSON_GetArraySize(m);
    if (n < 1) return BAD("messages", "'messages' must not be empty");
    if (n > lim->max_messages) return BAD("messages", "'messages' has %d entries; at most %d", n, lim->max_messages);
    out->msgs = calloc((size_t)n, sizeof *out->msgs);
    if (!out->msgs) return fail(err, 500, "server_error", NULL, "out of memory");
    const cJSON *msg;
    int32_t i = 0;
    cJSON_ArrayForEach(msg, m) {
        if (!cJSON_IsObject(msg)) return BAD("messages", "messages[%d] must be an object", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        if (!cJSON_IsString(role)) return BAD("messages", "messages[%d].role must be a string", i);
        const char *r = role->valuestring;
        if (!strcmp(r, "developer")) r = "system";
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))
            return BAD("messages", "messages[%d].role: unknown role (expected system, developer, user or assistant)", i);
        out->msgs[i].role = dup_n(r, strlen(r));
        out->n_msgs = i + 1;
        if (!out->msgs[i].role) return fail(err, 500, "server_error", NULL, "out of memory");
        if (!get_content(cJSON_GetObjectItemCaseSensitive(msg, "content"), i, &out->msgs[i].content, err)) return false;
        i++;
    }
    return true;
}

static bool parse_prompt(const cJSON *root, srv_request *out, srv_error *err) {
    const cJSON *p = field(root, "prompt");
    if (!p) return BAD("prompt", "'prompt' is required");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(cJSON_GetArrayItem(p, 0)))
        p = cJSON_GetArrayItem(p, 0);
    if (!cJSON_IsString(p)) return BAD("prompt", "'prompt' must be a string (or an array of one string)");
    out->prompt_len = strlen(p->valuestring);
    if (out->prompt_len == 0) return BAD("prompt", "'prompt' must not be empty");
    out->prompt = dup_n(p->valuestring, out->prompt_len);
    return out->prompt ? true : fail(err, 500, "server_error", NULL, "out of memory");
}

static bool parse_stop(const cJSON *root, const srv_limits *lim, srv_request *out, srv_error *err) {
    const cJSON *s = field(root, "stop");
    if (!s) return true;
    int n = cJSON_IsString(s) ? 1 : cJSON_IsArray(s) ? cJSON_GetArraySize(s) : -1;
    if (n < 0) return BAD("stop", "'stop' must be a string or an array of strings");
    if (n > lim->max_stop) return BAD("stop", "'stop' has %d strings; at most %d", n, lim->max_stop);
    if (n == 0) return true;
    out->stop = calloc((size_t)n, sizeof *out->stop);
    if (!out->stop) return fail(err, 500, "server_error", NULL, "out of memory");
    for (int i = 0; i < n; i++) {
        const cJSON *it = cJSON_IsString(s) ? s : cJSON_GetArrayItem(s, i);
        if (!cJSON_IsString(it)) return BAD("stop", "stop[%d] must be a string", i);
        size_t len = strlen(it->valuestring);
        if (len == 0) return BAD("stop", "stop[%d] must not be empty", i);
        if (len > (size_t)lim->max_stop_len) return BAD("stop", "stop[%d] is longer than %d bytes", i, lim->max_stop_len);
        if (!(out->stop[i] = dup_n(it->valuestring, len))) return fail(err, 500, "server_error", NULL, "out of memory");
        out->n_stop = i + 1;
    }
    return true;
}

static bool parse_fields(const cJSON *root, srv_kind kind, const srv_limits *lim, srv_request *out, srv_error *err) {
    if (!cJSON_IsObject(root)) return BAD(NULL, "the request body must be a JSON object");
    const cJSON *model = field(root, "model");
    if (model) {
        if (!cJSON_IsString(model)) return BAD("model", "'model' must be a string");
        if (!(out->model = dup_n(model->valuestring, strlen(model->valuestring))))
            return fail(err, 500, "server_error", NULL, "out of memory");
    }
    if (kind == SRV_CHAT ? !parse_messages(root, lim, out, err) : !parse_prompt(root, out, err)) return false;
    if (!get_bool(root, "stream", &out->stream, err) || !get_bool(root, "ignore_eos", &out->ignore_eos, err))
        return false;
    const cJSON *so = field(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) return BAD("stream_options", "'stream_options' must be an object");
        if (!get_bool(so, "include_usage", &out->include_usage, err)) return false;
    }
    double v;
    bool has;
    const char *mt_name = field(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (!get_num(root, mt_name, 1, lim->max_tokens_cap, true, &v, &has, err)) return false;
    if (has) out->max_tokens = (int32_t)v;
    gemmac_sampler_params *sp = &out->sp;
    if (!get_num(root, "temperature", 0, 100, false, &v, &has, err)) return false;
    if (has) sp->temp = (float)v;
    if (!get_num(root, "top_p", 0, 1, false, &v, &has, err)) return false;
    if (has) sp->top_p = (float)v;
    if (!get_num(root, "top_k", 0, 1 << 20, true, &v, &has, err)) return false;
    if (has) sp->top_k = (int32_t)v;
    if (!get_num(root, "min_p", 0, 1, false, &v, &has, err)) return false;
    if (has) sp->min_p = (float)v;
    if (!get_num(root, "presence_penalty", -2, 2, false, &v, &has, err)) return false;
    if (has) sp->presence_penalty = (float)v;
    if (!get_num(root, "frequency_penalty", -2, 2, false, &v, &has, err)) return false;
    if (has) sp->frequency_penalty = (float)v;
    if (!get_num(root, "repeat_penalty", 0, 100, false, &v, &has, err)) return false;
    if (has && v <= 0) return BAD("repeat_penalty", "'repeat_penalty' must be greater than 0");
    if (has) sp->repeat_penalty = (float)v;
    if (!get_num(root, "repeat_last_n", -1, 1 << 20, true, &v, &has, err)) return false;
    if (has) sp->repeat_last_n = (int32_t)v;
    if (!get_num(root, "seed", -1, 9007199254740991.0, true, &v, &has, err)) return false;
    if (has) sp->seed = v < 0 ? GEMMAC_SEED_RANDOM : (uint64_t)v;
    if (!get_num(root, "n", 1, 1, true, &v, &has, err)) return BAD("n", "'n' must be 1 (one choice per request)");
    const cJSON *lp = field(root, "logprobs");
    if (lp && !cJSON_IsFalse(lp) && !(kind == SRV_COMPLETION && cJSON_IsNumber(lp) && lp->valuedouble == 0))
        return BAD("logprobs", "'logprobs' is not supported");
    const cJSON *tools = field(root, "tools");
    if (tools && !(cJSON_IsArray(tools) && cJSON_GetArraySize(tools) == 0))
        return BAD("tools", "'tools' is not supported");
    const cJSON *rf = field(root, "response_format");
    if (rf) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(rf, "type");
        if (!cJSON_IsObject(rf) || !cJSON_IsString(t) || strcmp(t->valuestring, "text") != 0)
            return BAD("response_format", "only response_format {\"type\": \"text\"} is supported");
    }
    return parse_stop(root, lim, out, err);
}

bool srv_parse_request(srv_kind kind, const char *body, size_t len, const srv_limits *lim, srv_request *out,
                       srv_error *err) {
    srv_limits dl = srv_default_limits();
    if (!lim) lim = &dl;
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    out->kind = kind;
    out->max_tokens = -1;
    out->sp = gemmac_sampler_default_params();
    if (len > lim->max_body)
        return fail(err, 413, "invalid_request_error", NULL, "the request body is larger than %zu bytes", lim->max_body);
    if (len == 0 || !body) return BAD(NULL, "the request body is empty (expected a JSON object)");
    if (!srv_utf8_valid(body, len)) return BAD(NULL, "the request body is not valid UTF-8");
    if (srv_json_depth(body, len, lim->max_depth) > lim->max_depth)
        return BAD(NULL, "the JSON is nested deeper than %d levels", lim->max_depth);
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) return BAD(NULL, "the request body is not valid JSON");
    bool ok = parse_fields(root, kind, lim, out, err);
    cJSON_Delete(root);
    if (ok) { /* \u escapes can make what the raw bytes were not: check the decoded strings too */
        for (int32_t i = 0; ok && i < out->n_msgs; i++)
            if (!srv_utf8_valid(out->msgs[i].content, strlen(out->msgs[i].content)))
                ok = BAD("messages", "messages[%d].content is not valid UTF-8", i);
        if (ok && out->prompt && !srv_utf8_valid(out->prompt, out->prompt_len))
            ok = BAD("prompt", "'prompt' is not valid UTF-8");
        for (int32_t i = 0; ok && i < out->n_stop; i++)
            if (!srv_utf8_valid(out->stop[i], strlen(out->stop[i]))) ok = BAD("stop", "stop[%d] is not valid UTF-8", i);
    }
    if (!ok) {
        srv_request_free(out);
        out->kind = kind;
    }
    return ok;
}

void srv_request_free(srv_request *r) {
    if (!r) return;
    for (int32_t i = 0; i < r->n_msgs; i++) {
        free(r->msgs[i].role);
        free(r->msgs[i].content);
    }
    free(r->msgs);
    free(r->prompt);
    free(r->model);
    for (int32_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    memset(r, 0, sizeof *r);
}
