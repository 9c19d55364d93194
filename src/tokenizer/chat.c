/* chat.c -- chat templates: a list of {role, content} messages turned into
 * the prompt text a model family was trained on, exactly as the family's
 * Hugging Face Jinja template renders it, without a Jinja engine.
 *
 * The gateway picks the family from the GGUF's tokenizer.chat_template
 * (tokenizer_chat_template_detect) or from --chat-template NAME, formats the
 * request's messages here and tokenizes the text with
 * tokenizer_encode_special, so the control tokens the text spells ("<s>",
 * "<|im_start|>", ...) become single tokens. The formats themselves are
 * documented with enum tokenizer_chat_template in tokenizer.h; tools, tool
 * calls and tool results are chat_tools.c's, on top of these. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_internal.h"
#include "tokenizer/tokenizer.h"

enum chat_role { ROLE_SYSTEM = 0, ROLE_USER = 1, ROLE_ASSISTANT = 2 };

/* Indexed by enum chat_role. */
static const char *const role_names[] = {"system", "user", "assistant"};
static const char *const plain_role_names[] = {"System", "User", "Assistant"};

/* Indexed by enum tokenizer_chat_template. */
static const char *const template_names[] = {"plain",  "llama2",  "llama3",
                                             "chatml", "mistral", "zephyr"};
#define N_TEMPLATES (int)(sizeof(template_names) / sizeof(template_names[0]))

void chat_append_bytes(struct chat_text *t, const char *s, size_t n) {
    if (t->failed) return;
    if (t->cap - t->len < n + 1) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap - t->len < n + 1) cap *= 2;
        char *grown = realloc(t->data, cap);
        if (!grown) {
            t->failed = 1;
            return;
        }
        t->data = grown;
        t->cap = cap;
    }
    if (n) memcpy(t->data + t->len, s, n);
    t->len += n;
    t->data[t->len] = '\0';
}

/* NULL appends nothing: bos_text and eos_text may be NULL. */
void chat_append(struct chat_text *t, const char *s) {
    if (s) chat_append_bytes(t, s, strlen(s));
}

/* 1 if code point cp is whitespace to Python's str.isspace(): what
 * str.strip() and Jinja's trim filter remove. */
static int is_python_space(unsigned cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Decodes the UTF-8 character at s[0..n) into *cp. Returns its length, or 0
 * for bytes that do not start a well-formed character (which are never
 * whitespace, so stripping stops there). */
static size_t decode_char(const unsigned char *s, size_t n, unsigned *cp) {
    size_t len;
    unsigned value;
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if (s[0] >= 0xC2 && s[0] <= 0xDF) {
        len = 2;
        value = s[0] & 0x1Fu;
    } else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
        len = 3;
        value = s[0] & 0x0Fu;
    } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
        len = 4;
        value = s[0] & 0x07u;
    } else {
        return 0;
    }
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        value = (value << 6) | (s[i] & 0x3Fu);
    }
    *cp = value;
    return len;
}

void chat_strip_from(struct chat_text *t, size_t from) {
    if (t->failed || !t->data) return;
    const unsigned char *s = (const unsigned char *)t->data;
    size_t start = from, end = t->len, n;
    unsigned cp = 0;
    while (start < end && (n = decode_char(s + start, end - start, &cp)) != 0 &&
           is_python_space(cp))
        start += n;
    while (end > start) {
        /* The last character starts at the last byte that is not a
         * continuation byte (at most 3 back). */
        size_t begin = end - 1;
        while (begin > start && end - begin < 4 && (s[begin] & 0xC0) == 0x80) begin--;
        n = decode_char(s + begin, end - begin, &cp);
        if (n != end - begin || !is_python_space(cp)) break;
        end = begin;
    }
    memmove(t->data + from, t->data + start, end - start);
    t->len = from + (end - start);
    t->data[t->len] = '\0';
}

static int parse_role(const char *role) {
    for (int r = ROLE_SYSTEM; r <= ROLE_ASSISTANT; r++)
        if (strcmp(role, role_names[r]) == 0) return r;
    return -1;
}

static const char *content_of(const struct tokenizer_chat_message *message) {
    return message->content ? message->content : "";
}

/* ---- the families ---- */

static void format_plain(struct chat_text *t, const struct tokenizer_chat_message *messages,
                         const int *roles, int n, int add_generation_prompt) {
    for (int i = 0; i < n; i++) {
        chat_append(t, plain_role_names[roles[i]]);
        chat_append(t, ": ");
        chat_append(t, content_of(&messages[i]));
        chat_append(t, "\n");
    }
    if (add_generation_prompt) chat_append(t, "Assistant:");
}

/* Llama 2 chat: the system message goes inside the first [INST] block, and
 * the template strips the whole block content (system part included). */
static void format_llama2(struct chat_text *t, const struct tokenizer_chat_message *messages,
                          const int *roles, int n, const char *bos, const char *eos) {
    int first = roles[0] == ROLE_SYSTEM;
    for (int i = first; i < n; i++) {
        size_t from;
        if (roles[i] == ROLE_USER) {
            chat_append(t, bos);
            chat_append(t, "[INST] ");
            from = t->len;
            if (first && i == first) {
                chat_append(t, "<<SYS>>\n");
                chat_append(t, content_of(&messages[0]));
                chat_append(t, "\n<</SYS>>\n\n");
            }
            chat_append(t, content_of(&messages[i]));
            chat_strip_from(t, from);
            chat_append(t, " [/INST]");
        } else {
            chat_append(t, " ");
            from = t->len;
            chat_append(t, content_of(&messages[i]));
            chat_strip_from(t, from);
            chat_append(t, " ");
            chat_append(t, eos);
        }
    }
}

static void format_llama3(struct chat_text *t, const struct tokenizer_chat_message *messages,
                          const int *roles, int n, int add_generation_prompt, const char *bos) {
    chat_append(t, bos);
    for (int i = 0; i < n; i++) {
        chat_append(t, "<|start_header_id|>");
        chat_append(t, role_names[roles[i]]);
        chat_append(t, "<|end_header_id|>\n\n");
        size_t from = t->len;
        chat_append(t, content_of(&messages[i]));
        chat_strip_from(t, from);
        chat_append(t, "<|eot_id|>");
    }
    if (add_generation_prompt) chat_append(t, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void format_chatml(struct chat_text *t, const struct tokenizer_chat_message *messages,
                          const int *roles, int n, int add_generation_prompt) {
    for (int i = 0; i < n; i++) {
        chat_append(t, "<|im_start|>");
        chat_append(t, role_names[roles[i]]);
        chat_append(t, "\n");
        chat_append(t, content_of(&messages[i]));
        chat_append(t, "<|im_end|>\n");
    }
    if (add_generation_prompt) chat_append(t, "<|im_start|>assistant\n");
}

/* Mistral v0.2 ("v1" in Mistral's tokenizer naming): the system message is
 * prepended to the first user message. */
static void format_mistral(struct chat_text *t, const struct tokenizer_chat_message *messages,
                           const int *roles, int n, const char *bos, const char *eos) {
    int first = roles[0] == ROLE_SYSTEM;
    chat_append(t, bos);
    for (int i = first; i < n; i++) {
        if (roles[i] == ROLE_USER) {
            chat_append(t, " [INST] ");
            if (first && i == first) {
                chat_append(t, content_of(&messages[0]));
                chat_append(t, "\n\n");
            }
            chat_append(t, content_of(&messages[i]));
            chat_append(t, " [/INST]");
        } else {
            chat_append(t, " ");
            chat_append(t, content_of(&messages[i]));
            chat_append(t, eos);
        }
    }
}

static void format_zephyr(struct chat_text *t, const struct tokenizer_chat_message *messages,
                          const int *roles, int n, int add_generation_prompt, const char *eos) {
    for (int i = 0; i < n; i++) {
        chat_append(t, "<|");
        chat_append(t, role_names[roles[i]]);
        chat_append(t, "|>\n");
        chat_append(t, content_of(&messages[i]));
        chat_append(t, eos);
        chat_append(t, "\n");
    }
    if (add_generation_prompt) chat_append(t, "<|assistant|>\n");
}

/* ---- checks ---- */

/* Every family: each message has a known role, stored in roles[i]. */
static int parse_roles(const char *name, const struct tokenizer_chat_message *messages, int n,
                       int *roles, char *err, size_t errlen) {
    for (int i = 0; i < n; i++) {
        if (!messages[i].role) {
            snprintf(err, errlen, "chat template %s: message %d has no role", name, i);
            return -1;
        }
        roles[i] = parse_role(messages[i].role);
        if (roles[i] < 0) {
            snprintf(err, errlen,
                     "chat template %s: message %d has role '%.64s' (the roles are system, user "
                     "and assistant)",
                     name, i, messages[i].role);
            return -1;
        }
    }
    return 0;
}

/* Llama 2 and Mistral: what their templates' raise_exception enforces. */
static int check_alternation(const char *name, const int *roles, int n, char *err, size_t errlen) {
    int first = roles[0] == ROLE_SYSTEM;
    for (int i = first; i < n; i++) {
        int expected = (i - first) % 2 == 0 ? ROLE_USER : ROLE_ASSISTANT;
        if (roles[i] != expected) {
            snprintf(err, errlen,
                     "chat template %s: message %d has role '%s' where '%s' was expected (after "
                     "an optional first system message, user and assistant must alternate)",
                     name, i, role_names[roles[i]], role_names[expected]);
            return -1;
        }
    }
    return 0;
}

/* Writes the family's text for messages whose roles have been checked. */
static void format_messages(struct chat_text *t, enum tokenizer_chat_template family,
                            const struct tokenizer_chat_message *messages, const int *roles, int n,
                            int add_generation_prompt, const char *bos, const char *eos) {
    switch (family) {
    case TOKENIZER_CHAT_LLAMA2:
        format_llama2(t, messages, roles, n, bos, eos);
        break;
    case TOKENIZER_CHAT_LLAMA3:
        format_llama3(t, messages, roles, n, add_generation_prompt, bos);
        break;
    case TOKENIZER_CHAT_CHATML:
        format_chatml(t, messages, roles, n, add_generation_prompt);
        break;
    case TOKENIZER_CHAT_MISTRAL:
        format_mistral(t, messages, roles, n, bos, eos);
        break;
    case TOKENIZER_CHAT_ZEPHYR:
        format_zephyr(t, messages, roles, n, add_generation_prompt, eos);
        break;
    default:
        format_plain(t, messages, roles, n, add_generation_prompt);
        break;
    }
}

/* ---- public ---- */

static int contains(const char *text, const char *marker) {
    return strstr(text, marker) != NULL;
}

enum tokenizer_chat_template tokenizer_chat_template_detect(const char *jinja) {
    if (!jinja) return TOKENIZER_CHAT_PLAIN;
    /* Phi-4 (<|im_sep|>) and SmolVLM (<end_of_utterance>) use <|im_start|>
     * in formats of their own. */
    if (contains(jinja, "<|im_start|>"))
        return contains(jinja, "<|im_sep|>") || contains(jinja, "<end_of_utterance>")
                   ? TOKENIZER_CHAT_PLAIN
                   : TOKENIZER_CHAT_CHATML;
    if (contains(jinja, "[INST]"))
        return contains(jinja, "<<SYS>>") ? TOKENIZER_CHAT_LLAMA2 : TOKENIZER_CHAT_MISTRAL;
    if (contains(jinja, "<|start_header_id|>") && contains(jinja, "<|end_header_id|>"))
        return TOKENIZER_CHAT_LLAMA3;
    /* Phi-3 (<|end|>) and ChatGLM ([gMASK]) also have <|user|> and
     * <|assistant|> but end turns differently. */
    if (contains(jinja, "<|user|>") && contains(jinja, "<|assistant|>") &&
        !contains(jinja, "<|end|>") && !contains(jinja, "[gMASK]"))
        return TOKENIZER_CHAT_ZEPHYR;
    return TOKENIZER_CHAT_PLAIN;
}

int tokenizer_chat_template_from_name(const char *name, enum tokenizer_chat_template *out,
                                      char *err, size_t errlen) {
    for (int i = 0; i < N_TEMPLATES; i++) {
        if (name && strcmp(name, template_names[i]) == 0) {
            *out = (enum tokenizer_chat_template)i;
            return 0;
        }
    }
    char valid[128] = "";
    for (int i = 0; i < N_TEMPLATES; i++) {
        size_t used = strlen(valid);
        snprintf(valid + used, sizeof(valid) - used, "%s%s", i ? ", " : "", template_names[i]);
    }
    snprintf(err, errlen, "unknown chat template '%.64s' (valid names: %s)", name ? name : "(null)",
             valid);
    return -1;
}

const char *tokenizer_chat_template_name(enum tokenizer_chat_template family) {
    int i = (int)family;
    return i >= 0 && i < N_TEMPLATES ? template_names[i] : NULL;
}

int tokenizer_chat_template_writes_bos(enum tokenizer_chat_template family) {
    return family == TOKENIZER_CHAT_LLAMA2 || family == TOKENIZER_CHAT_LLAMA3 ||
           family == TOKENIZER_CHAT_MISTRAL;
}

int chat_start(enum tokenizer_chat_template family, int n, const char **name, int **roles,
               char **out, size_t *out_len, char *err, size_t errlen) {
    *name = tokenizer_chat_template_name(family);
    *out = NULL;
    *out_len = 0;
    *roles = NULL;
    if (!*name) {
        snprintf(err, errlen, "chat template: %d is not a template family", (int)family);
        return -1;
    }
    if (n < 1) {
        snprintf(err, errlen, "chat template %s: there are no messages", *name);
        return -1;
    }
    *roles = malloc((size_t)n * sizeof(**roles));
    if (!*roles) {
        snprintf(err, errlen, "chat template %s: out of memory for %d messages", *name, n);
        return -1;
    }
    return 0;
}

int tokenizer_chat_apply(enum tokenizer_chat_template family,
                         const struct tokenizer_chat_message *messages, int n,
                         int add_generation_prompt, const char *bos_text, const char *eos_text,
                         char **out, size_t *out_len, char *err, size_t errlen) {
    const char *name;
    int *roles;
    if (chat_start(family, n, &name, &roles, out, out_len, err, errlen)) return -1;
    if (parse_roles(name, messages, n, roles, err, errlen) != 0 ||
        ((family == TOKENIZER_CHAT_LLAMA2 || family == TOKENIZER_CHAT_MISTRAL) &&
         check_alternation(name, roles, n, err, errlen) != 0)) {
        free(roles);
        return -1;
    }
    struct chat_text t = {NULL, 0, 0, 0};
    chat_append_bytes(&t, "", 0); /* an empty prompt is still a string */
    format_messages(&t, family, messages, roles, n, add_generation_prompt, bos_text, eos_text);
    free(roles);
    if (t.failed) {
        free(t.data);
        snprintf(err, errlen, "chat template %s: out of memory formatting %d messages", name, n);
        return -1;
    }
    *out = t.data;
    *out_len = t.len;
    return 0;
}
