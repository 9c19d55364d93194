/* tokenize.c -- llama.cpp's POST /tokenize and POST /detokenize: text to an
 * served model's token ids and back, in the HTTP thread with the model's own
 * tokenizer (no runner is asked; DESIGN.md I7).
 *
 * llama.cpp's shapes (tools/server/README.md):
 *   /tokenize   {"content": text, "add_special": false, "parse_special":
 *               true, "with_pieces": false} -> {"tokens": [id, ...]}, or
 *               with with_pieces {"tokens": [{"id": id, "piece": p}, ...]}
 *               where p is a string when the piece is valid UTF-8 and else
 *               an array of its byte values;
 *   /detokenize {"tokens": [id, ...]} -> {"content": text}.
 * add_special puts a BOS first when the vocabulary asks for one (as a
 * completion's prompt gets it); parse_special turns the spelling of a
 * special token into that token. A piece is what llama.cpp's server shows
 * (common_token_to_piece, special tokens rendered): control and unknown
 * tokens give their spelling ("<s>"), every other token its bytes, an SPM
 * word its leading space ("▁the" is " the"). The content of /detokenize
 * is the pieces one after another, so an SPM text that got a space prefix
 * comes back with that one leading space, as from llama.cpp's server; its
 * bytes that are not UTF-8 (a character cut between token lists) become
 * U+FFFD, as does a NUL byte, so the answer is always valid JSON. A piece
 * holding a NUL byte is given as bytes. Both take "model" as the other
 * endpoints do; other fields are ignored, as llama.cpp does. */
#include "gateway/requests/requests.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* llama.cpp's token type numbers (struct tokenizer_entry's type) whose
 * piece is their spelling. */
#define TYPE_UNKNOWN 2
#define TYPE_CONTROL 3

/* 2^53: the largest range where a JSON number is an exact integer. */
#define EXACT_INTEGER 9007199254740992.0

/* ------------------------------ the body -------------------------------- */

/* The body as a JSON object; NULL with a 400. */
static cJSON *parse_object(const char *body, size_t length, struct openai_error *e) {
    if (!body || length == 0) {
        openai_refuse(e, NULL, "the request body is empty; expected a JSON object");
        return NULL;
    }
    cJSON *root = cJSON_ParseWithLength(body, length);
    if (!root)
        openai_refuse(e, NULL, "the request body is not valid JSON");
    else if (!cJSON_IsObject(root))
        openai_refuse(e, NULL, "the request body must be a JSON object");
    if (root && cJSON_IsObject(root)) return root;
    cJSON_Delete(root);
    return NULL;
}

/* An optional boolean member (default when absent or null); -1 with a 400. */
static int read_flag(const cJSON *root, const char *name, int fallback, int *out,
                     struct openai_error *e) {
    const cJSON *item = openai_member(root, name);
    *out = fallback;
    if (!item) return 0;
    if (!cJSON_IsBool(item)) return openai_refuse(e, name, "%s must be a boolean", name);
    *out = cJSON_IsTrue(item);
    return 0;
}

/* /detokenize's "tokens": an array of integers (the vocabulary's range is
 * checked once the model is known); -1 with a 400. */
static int check_tokens(const cJSON *tokens, struct openai_error *e) {
    if (!tokens) return openai_refuse(e, "tokens", "tokens is required: an array of token ids");
    if (!cJSON_IsArray(tokens))
        return openai_refuse(e, "tokens", "tokens must be an array of token ids");
    int i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, tokens) {
        double v = item->valuedouble;
        if (!cJSON_IsNumber(item) || v < -EXACT_INTEGER || v > EXACT_INTEGER ||
            (double)(long long)v != v)
            return openai_refuse(e, "tokens", "tokens[%d] must be an integer token id", i);
        i++;
    }
    return 0;
}

/* /tokenize's fields; -1 with a 400. */
static int read_tokenize(struct gateway_tokens_body *out, struct openai_error *e) {
    const cJSON *content = openai_member(out->root, "content");
    if (!content) return openai_refuse(e, "content", "content is required: the text to tokenize");
    if (!cJSON_IsString(content)) return openai_refuse(e, "content", "content must be a string");
    out->content = content->valuestring;
    if (read_flag(out->root, "add_special", 0, &out->add_special, e) ||
        read_flag(out->root, "parse_special", 1, &out->parse_special, e) ||
        read_flag(out->root, "with_pieces", 0, &out->with_pieces, e))
        return -1;
    return 0;
}

int gateway_tokens_parse(const char *body, size_t length, int detokenize,
                         struct gateway_tokens_body *out, struct openai_error *e) {
    memset(out, 0, sizeof(*out));
    out->detokenize = detokenize;
    out->root = parse_object(body, length, e);
    if (!out->root) return -1;
    const cJSON *model = openai_member(out->root, "model");
    int rc = 0;
    if (model && !cJSON_IsString(model))
        rc = openai_refuse(e, "model", "model must be a string");
    else if (model)
        out->model = model->valuestring;
    if (rc == 0 && detokenize) {
        out->tokens = openai_member(out->root, "tokens");
        rc = check_tokens(out->tokens, e);
    } else if (rc == 0) {
        rc = read_tokenize(out, e);
    }
    if (rc) gateway_tokens_free(out);
    return rc;
}

void gateway_tokens_free(struct gateway_tokens_body *body) {
    cJSON_Delete(body->root);
    memset(body, 0, sizeof(*body));
}

/* ------------------------------ UTF-8 ----------------------------------- */

/* 1 if the bytes are valid UTF-8 without a NUL (a JSON string for cJSON
 * and for the client alike). */
static int utf8_text(const char *text, size_t length) {
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < length;) {
        int n = utf8_sequence(s + i, length - i);
        if (n < 0 || s[i] == '\0') return 0;
        i += (size_t)n;
    }
    return 1;
}

/* -------------------------------- JSON ---------------------------------- */

static int put(struct runner_buffer *out, const char *text) {
    return runner_buffer_append(out, text, strlen(text));
}

/* Appends the bytes as a JSON string: ill-formed UTF-8 and NUL become
 * U+FFFD, control characters are escaped. */
static int put_string(struct runner_buffer *out, const char *text, size_t length) {
    const unsigned char *s = (const unsigned char *)text;
    int rc = put(out, "\"");
    for (size_t i = 0; i < length && rc == 0;) {
        int n = utf8_sequence(s + i, length - i);
        char escaped[8];
        if (n < 0 || s[i] == '\0') {
            rc = put(out, "\xEF\xBF\xBD"); /* one for the ill-formed prefix, as the answers do */
            n = n < 0 ? -n : 1;
        } else if (s[i] == '"' || s[i] == '\\') {
            snprintf(escaped, sizeof(escaped), "\\%c", s[i]);
            rc = put(out, escaped);
        } else if (s[i] < 0x20) {
            snprintf(escaped, sizeof(escaped), "\\u%04x", s[i]);
            rc = put(out, escaped);
        } else {
            rc = runner_buffer_append(out, s + i, (size_t)n);
        }
        i += (size_t)n;
    }
    return rc ? rc : put(out, "\"");
}

/* Appends the bytes as llama.cpp's "piece": a string when they are valid
 * UTF-8, else the array of their values. */
static int put_piece(struct runner_buffer *out, const char *piece, size_t length) {
    if (utf8_text(piece, length)) return put_string(out, piece, length);
    int rc = put(out, "[");
    for (size_t i = 0; i < length && rc == 0; i++) {
        char number[8];
        snprintf(number, sizeof(number), "%s%u", i ? "," : "", (unsigned char)piece[i]);
        rc = put(out, number);
    }
    return rc ? rc : put(out, "]");
}

/* The buffer as a NUL-terminated string (the caller frees it), or NULL
 * (freed) when an append failed. */
static char *finish(struct runner_buffer *out, int rc) {
    if (rc == 0) rc = runner_buffer_append(out, "", 1);
    if (rc == 0) return (char *)out->data;
    runner_buffer_free(out);
    return NULL;
}

/* ---------------------------- the answers ------------------------------- */

/* What llama.cpp's server shows for a token: the spelling of a control or
 * unknown token, else its bytes. */
static const char *token_piece(const struct tokenizer *tok, int id, size_t *length) {
    struct tokenizer_entry entry;
    if (tokenizer_token_entry(tok, id, &entry) == 0 &&
        (entry.type == TYPE_CONTROL || entry.type == TYPE_UNKNOWN)) {
        *length = entry.text_len;
        return entry.text;
    }
    return tokenizer_token_bytes(tok, id, length);
}

/* The content's ids ((*ids)[*n], free() it); -1 when memory runs out. */
static int encode(const struct tokenizer *tok, const struct gateway_tokens_body *body, int **ids,
                  int *n) {
    char err[256];
    size_t length = strlen(body->content);
    int max_ids = tokenizer_max_ids(length);
    int add_bos = body->add_special && tokenizer_adds_bos(tok);
    *ids = malloc((size_t)(max_ids > 0 ? max_ids : 1) * sizeof(int));
    if (!*ids) return -1;
    int rc = body->parse_special ? tokenizer_encode_special(tok, body->content, length, add_bos,
                                                            *ids, max_ids, n, err, sizeof(err))
                                 : tokenizer_encode(tok, body->content, length, add_bos, *ids,
                                                    max_ids, n, err, sizeof(err));
    if (rc == 0) return 0;
    free(*ids);
    *ids = NULL;
    return -1;
}

/* Appends one token of /tokenize's answer. */
static int put_token(struct runner_buffer *out, const struct tokenizer *tok, int id, int first,
                     int with_pieces) {
    char text[48];
    snprintf(text, sizeof(text), "%s%s%d", first ? "" : ",", with_pieces ? "{\"id\":" : "", id);
    if (put(out, text)) return -1;
    if (!with_pieces) return 0;
    size_t length;
    const char *piece = token_piece(tok, id, &length);
    if (put(out, ",\"piece\":") || put_piece(out, piece, length)) return -1;
    return put(out, "}");
}

static char *tokenize_json(const struct tokenizer *tok, const struct gateway_tokens_body *body,
                           struct openai_error *e) {
    int *ids, n = 0;
    if (encode(tok, body, &ids, &n)) {
        openai_out_of_memory(e);
        return NULL;
    }
    struct runner_buffer out = {0};
    int rc = put(&out, "{\"tokens\":[");
    for (int i = 0; i < n && rc == 0; i++)
        rc = put_token(&out, tok, ids[i], i == 0, body->with_pieces);
    free(ids);
    char *json = finish(&out, rc ? rc : put(&out, "]}"));
    if (!json) openai_out_of_memory(e);
    return json;
}

/* -1 with a 400 naming the first id outside the vocabulary. */
static int check_vocabulary(const struct tokenizer *tok, const cJSON *tokens,
                            struct openai_error *e) {
    int vocab = tokenizer_vocab_size(tok), i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, tokens) {
        if (item->valuedouble < 0 || item->valuedouble >= vocab)
            return openai_refuse(e, "tokens", "tokens[%d] is %.0f, outside the vocabulary (0..%d)",
                                 i, item->valuedouble, vocab - 1);
        i++;
    }
    return 0;
}

static char *detokenize_json(const struct tokenizer *tok, const struct gateway_tokens_body *body,
                             struct openai_error *e) {
    if (check_vocabulary(tok, body->tokens, e)) return NULL;
    struct runner_buffer text = {0}, out = {0};
    const cJSON *item;
    int rc = 0;
    cJSON_ArrayForEach(item, body->tokens) {
        size_t length;
        const char *piece = token_piece(tok, (int)item->valuedouble, &length);
        if (rc == 0 && length) rc = runner_buffer_append(&text, piece, length);
    }
    if (rc == 0) rc = put(&out, "{\"content\":");
    if (rc == 0) rc = put_string(&out, (const char *)text.data, text.length);
    runner_buffer_free(&text);
    char *json = finish(&out, rc ? rc : put(&out, "}"));
    if (!json) openai_out_of_memory(e);
    return json;
}

char *gateway_tokens_answer(const struct gateway_served *served,
                            const struct gateway_tokens_body *body, struct openai_error *e) {
    if (body->detokenize) return detokenize_json(served->tokenizer, body, e);
    return tokenize_json(served->tokenizer, body, e);
}
