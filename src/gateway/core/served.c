/* served.c -- a model the gateway serves: its file's metadata, its
 * vocabulary and its chat template, loaded once at start and shared by
 * every instance of the model (its replicas and the placements a move goes
 * through). The gateway never loads weights: the file is read for its
 * metadata and tokenizer only. */
#include "gateway/core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The name clients use: the file name without directory and .gguf/.bin. */
static void default_name(char *out, size_t size, const char *path) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    snprintf(out, size, "%s", base);
    char *dot = strrchr(out, '.');
    if (dot && (!strcmp(dot, ".gguf") || !strcmp(dot, ".bin"))) *dot = '\0';
}

/* The vocabulary's spelling of a special token, for chat templates. */
static void token_text(const struct tokenizer *tok, int id, char *out, size_t size) {
    size_t length = 0;
    const char *piece = id >= 0 ? tokenizer_piece(tok, id, &length) : NULL;
    snprintf(out, size, "%.*s", piece ? (int)length : 0, piece ? piece : "");
}

/* The chat template: the one named, else the one the file's Jinja text
 * is recognised as, else plain. */
static int choose_template(struct gateway_served *s, char *err, size_t errlen) {
    struct gguf_string jinja;
    char message[64];
    if (s->model.chat_template)
        return tokenizer_chat_template_from_name(s->model.chat_template, &s->chat_template, err,
                                                 errlen);
    s->chat_template = TOKENIZER_CHAT_PLAIN;
    if (s->file->gguf && gguf_get_string(s->file->gguf, "tokenizer.chat_template", &jinja, message,
                                         sizeof(message)) == 0) {
        char *text = strndup(jinja.data, jinja.len);
        if (text) s->chat_template = tokenizer_chat_template_detect(text);
        free(text);
    }
    return 0;
}

int gateway_served_init(struct gateway_served *s, const struct gateway_model *model, char *err,
                        size_t errlen) {
    int failed;
    memset(s, 0, sizeof(*s));
    s->model = *model;
    if (model->name)
        snprintf(s->name, sizeof(s->name), "%s", model->name);
    else
        default_name(s->name, sizeof(s->name), model->path);
    if (model_load(&s->file, model->path, err, errlen)) return -1;
    if (model->tokenizer_path)
        failed = tokenizer_load_llama2c(&s->tokenizer, model->tokenizer_path,
                                        s->file->config.vocab_size, err, errlen);
    else if (s->file->gguf)
        failed = tokenizer_load_gguf(&s->tokenizer, s->file->gguf, err, errlen);
    else {
        snprintf(err, errlen, "%s is a llama2.c checkpoint: give its tokenizer", model->path);
        failed = 1;
    }
    if (failed) return -1;
    s->context_length = s->file->config.context_length;
    token_text(s->tokenizer, tokenizer_bos(s->tokenizer), s->bos_text, sizeof(s->bos_text));
    token_text(s->tokenizer, tokenizer_eos(s->tokenizer), s->eos_text, sizeof(s->eos_text));
    return choose_template(s, err, errlen);
}

void gateway_served_free(struct gateway_served *s) {
    tokenizer_free(s->tokenizer);
    model_free(s->file);
    s->tokenizer = NULL;
    s->file = NULL;
}

const struct gateway_served *gateway_served_find(const struct gateway_served *served, int n,
                                                 const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(served[i].name, name)) return &served[i];
    return NULL;
}
