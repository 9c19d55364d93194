/* chat_tools.c -- tool calling in the chat templates: the tools, the
 * assistant's calls and the tools' results written into the prompt in
 * each family's own format (documented with tokenizer_chat_apply_tools in
 * tokenizer.h), the format in which each family's model writes calls, and
 * reading calls back from generated text.
 *
 * LLAMA3 and MISTRAL are written here turn by turn. CHATML and lockstep's
 * own convention (PLAIN, LLAMA2, ZEPHYR) only change what the turns say,
 * so they are lowered: the tools go into the system message, calls into
 * the assistant's content, a run of results into one user message, and
 * tokenizer_chat_apply formats the result. A conversation without tools,
 * calls or results goes straight to tokenizer_chat_apply. */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_internal.h"
#include "tokenizer/tokenizer.h"

enum tool_role { ROLE_SYSTEM = 0, ROLE_USER = 1, ROLE_ASSISTANT = 2, ROLE_TOOL = 3 };

/* Indexed by enum tool_role. */
static const char *const role_names[] = {"system", "user", "assistant", "tool"};

/* Indexed by enum tokenizer_chat_template. */
static const struct tokenizer_tool_format tool_formats[] = {
    [TOKENIZER_CHAT_PLAIN] = {"<tool_call>", 0, "", "<tool_call>", "</tool_call>", "\n", "",
                              "arguments"},
    [TOKENIZER_CHAT_LLAMA2] = {"<tool_call>", 0, "", "<tool_call>", "</tool_call>", "\n", "",
                               "arguments"},
    [TOKENIZER_CHAT_LLAMA3] = {"{\"name\"", 1, "", "", "", "; ", "", "parameters"},
    [TOKENIZER_CHAT_CHATML] = {"<tool_call>", 0, "", "<tool_call>\n", "\n</tool_call>", "\n", "",
                               "arguments"},
    [TOKENIZER_CHAT_MISTRAL] = {"[TOOL_CALLS]", 0, "[TOOL_CALLS] [", "", "", ", ", "]",
                                "arguments"},
    [TOKENIZER_CHAT_ZEPHYR] = {"<tool_call>", 0, "", "<tool_call>", "</tool_call>", "\n", "",
                               "arguments"},
};
#define N_FORMATS (int)(sizeof(tool_formats) / sizeof(tool_formats[0]))

/* Llama 3.1 may put this token before a call (it decodes to "" in a
 * stream, but a caller may spell it out). */
static const char python_tag[] = "<|python_tag|>";

/* What the formatters need of one tokenizer_chat_apply_tools call. */
struct chat_request {
    enum tokenizer_chat_template family;
    const char *name;                              /* the family's name, for messages */
    const struct tokenizer_chat_message *messages; /* (n) */
    const int *roles;                              /* enum tool_role of each message (n) */
    int n;
    const struct tokenizer_chat_tool *tools; /* (n_tools) */
    int n_tools;
    int add_generation_prompt;
    const char *bos, *eos; /* bos_text and eos_text */
};

static const char *content_of(const struct tokenizer_chat_message *message) {
    return message->content ? message->content : "";
}

static int has_calls(const struct tokenizer_chat_message *message) {
    return message->n_tool_calls > 0;
}

/* ---- JSON pieces ---- */

/* JSON text re-spaced as json.dumps writes it, or as a JSON string when
 * it is not JSON (what tojson gives a string). */
static void put_json_or_string(struct chat_text *t, const char *text) {
    if (chat_json_write(t, text, strlen(text), CHAT_JSON_INLINE) != 0)
        chat_json_string(t, text, strlen(text));
}

static void put_string(struct chat_text *t, const char *s) {
    chat_json_string(t, s, strlen(s));
}

/* {"type": "function", "function": {"name": ..., "description": ...,
 * "parameters": ...}} in style; its parameters were checked. */
static void put_tool(struct chat_text *t, const struct tokenizer_chat_tool *tool,
                     enum chat_json_style style) {
    struct chat_text raw = {NULL, 0, 0, 0};
    chat_append(&raw, "{\"type\":\"function\",\"function\":{\"name\":");
    put_string(&raw, tool->name);
    if (tool->description) {
        chat_append(&raw, ",\"description\":");
        put_string(&raw, tool->description);
    }
    if (tool->parameters) {
        chat_append(&raw, ",\"parameters\":");
        chat_append(&raw, tool->parameters);
    }
    chat_append(&raw, "}}");
    if (raw.failed || chat_json_write(t, raw.data, raw.len, style) != 0) t->failed = 1;
    free(raw.data);
}

/* {"name": NAME, "KEY": ARGUMENTS -- without the closing brace. */
static void put_call_head(struct chat_text *t, const struct tokenizer_tool_call *call,
                          const char *key) {
    chat_append(t, "{\"name\": ");
    put_string(t, call->name);
    chat_append(t, ", \"");
    chat_append(t, key);
    chat_append(t, "\": ");
    put_json_or_string(t, call->arguments ? call->arguments : "{}");
}

/* ---- LLAMA3: Llama 3.1's JSON tool calling ---- */

static const char llama3_preamble[] = "Environment: ipython\n"
                                      "Cutting Knowledge Date: December 2023\n"
                                      "Today Date: 26 Jul 2024\n\n";
static const char llama3_instructions[] =
    "Given the following functions, please respond with a JSON for a function call with its "
    "proper arguments that best answers the given prompt.\n\nRespond in the format {\"name\": "
    "function name, \"parameters\": dictionary of argument name and its value}.Do not use "
    "variables.\n\n";

static void llama3_header(struct chat_text *t, const char *role) {
    chat_append(t, "<|start_header_id|>");
    chat_append(t, role);
    chat_append(t, "<|end_header_id|>\n\n");
}

static void append_stripped(struct chat_text *t, const char *s) {
    size_t from = t->len;
    chat_append(t, s);
    chat_strip_from(t, from);
}

static void llama3_message(struct chat_text *t, const struct tokenizer_chat_message *m, int role) {
    if (role == ROLE_TOOL) {
        llama3_header(t, "ipython");
        put_string(t, content_of(m));
    } else if (has_calls(m)) {
        llama3_header(t, "assistant");
        for (int j = 0; j < m->n_tool_calls; j++) {
            if (j) chat_append(t, "; ");
            put_call_head(t, &m->tool_calls[j], "parameters");
            chat_append(t, "}");
        }
    } else {
        llama3_header(t, role_names[role]);
        append_stripped(t, content_of(m));
    }
    chat_append(t, "<|eot_id|>");
}

/* The system turn and the first user message with the tools; returns the
 * index of the first message left. */
static int llama3_tools(struct chat_text *t, const struct chat_request *r) {
    int first = r->roles[0] == ROLE_SYSTEM;
    llama3_header(t, "system");
    chat_append(t, llama3_preamble);
    if (first) append_stripped(t, content_of(&r->messages[0]));
    chat_append(t, "<|eot_id|>");
    llama3_header(t, "user");
    chat_append(t, llama3_instructions);
    for (int k = 0; k < r->n_tools; k++) {
        put_tool(t, &r->tools[k], CHAT_JSON_INDENT);
        chat_append(t, "\n\n");
    }
    append_stripped(t, content_of(&r->messages[first]));
    chat_append(t, "<|eot_id|>");
    return first + 1;
}

static void format_llama3(struct chat_text *t, const struct chat_request *r) {
    chat_append(t, r->bos);
    int i = r->n_tools > 0 ? llama3_tools(t, r) : 0;
    for (; i < r->n; i++) llama3_message(t, &r->messages[i], r->roles[i]);
    if (r->add_generation_prompt) llama3_header(t, "assistant");
}

/* ---- MISTRAL: v0.3's tool blocks in the v0.2 layout ---- */

static void mistral_tools(struct chat_text *t, const struct chat_request *r) {
    chat_append(t, "[AVAILABLE_TOOLS] [");
    for (int k = 0; k < r->n_tools; k++) {
        if (k) chat_append(t, ", ");
        put_tool(t, &r->tools[k], CHAT_JSON_INLINE);
    }
    chat_append(t, "][/AVAILABLE_TOOLS]");
}

static void mistral_calls(struct chat_text *t, const struct tokenizer_chat_message *m,
                          const char *eos) {
    chat_append(t, "[TOOL_CALLS] [");
    for (int j = 0; j < m->n_tool_calls; j++) {
        if (j) chat_append(t, ", ");
        put_call_head(t, &m->tool_calls[j], "arguments");
        if (m->tool_calls[j].id) {
            chat_append(t, ", \"id\": ");
            put_string(t, m->tool_calls[j].id);
        }
        chat_append(t, "}");
    }
    chat_append(t, "]");
    chat_append(t, eos);
}

static void mistral_result(struct chat_text *t, const struct tokenizer_chat_message *m) {
    chat_append(t, "[TOOL_RESULTS] {\"content\": ");
    put_json_or_string(t, content_of(m));
    if (m->tool_call_id) {
        chat_append(t, ", \"call_id\": ");
        put_string(t, m->tool_call_id);
    }
    chat_append(t, "}[/TOOL_RESULTS]");
}

static void format_mistral(struct chat_text *t, const struct chat_request *r) {
    int first = r->roles[0] == ROLE_SYSTEM, system_pending = first, last_user = -1;
    for (int i = 0; i < r->n; i++)
        if (r->roles[i] == ROLE_USER) last_user = i;
    chat_append(t, r->bos);
    for (int i = first; i < r->n; i++) {
        const struct tokenizer_chat_message *m = &r->messages[i];
        if (r->roles[i] == ROLE_USER) {
            if (r->n_tools > 0 && i == last_user) mistral_tools(t, r);
            chat_append(t, " [INST] ");
            if (system_pending) {
                chat_append(t, content_of(&r->messages[0]));
                chat_append(t, "\n\n");
                system_pending = 0;
            }
            chat_append(t, content_of(m));
            chat_append(t, " [/INST]");
        } else if (r->roles[i] == ROLE_TOOL) {
            mistral_result(t, m);
        } else if (has_calls(m)) {
            mistral_calls(t, m, r->eos);
        } else {
            chat_append(t, " ");
            chat_append(t, content_of(m));
            chat_append(t, r->eos);
        }
    }
}

/* ---- CHATML and lockstep's convention: lowered to plain messages ---- */

/* What a lowered family writes around the tools and the results. */
struct lowering {
    const char *tools_head;   /* the tools section up to the first tool's line */
    const char *tools_tail;   /* after the last tool's line */
    const char *result_open;  /* before each tool message's content */
    const char *result_close; /* after it */
};

/* Qwen2.5's template (Hermes style). */
static const struct lowering chatml_lowering = {
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\n<tools>",
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    "<tool_response>\n", "\n</tool_response>"};

/* lockstep's own, for PLAIN, LLAMA2 and ZEPHYR (README "Tool calling formats"). */
static const struct lowering own_lowering = {
    "# Tools\n\nYou may call functions to answer. Each one is described by a JSON object within "
    "<tools></tools>:\n<tools>",
    "\n</tools>\n\nTo call functions, write each call as a JSON object with the function's name "
    "and its arguments within <tool_call></tool_call>, one call a line:\n<tool_call>{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}</tool_call>",
    "<tool_response>", "</tool_response>"};

/* The system message's content with the tools section. */
static void lower_system(struct chat_text *t, const struct chat_request *r,
                         const struct lowering *lw) {
    if (r->roles[0] == ROLE_SYSTEM) {
        chat_append(t, content_of(&r->messages[0]));
        chat_append(t, "\n\n");
    }
    chat_append(t, lw->tools_head);
    for (int k = 0; k < r->n_tools; k++) {
        chat_append(t, "\n");
        put_tool(t, &r->tools[k], CHAT_JSON_INLINE);
    }
    chat_append(t, lw->tools_tail);
}

/* An assistant message's content followed by its calls. */
static void lower_calls(struct chat_text *t, const struct tokenizer_chat_message *m,
                        const struct tokenizer_tool_format *format) {
    chat_append(t, content_of(m));
    if (*content_of(m)) chat_append(t, "\n");
    for (int j = 0; j < m->n_tool_calls; j++) {
        if (j) chat_append(t, format->call_separator);
        chat_append(t, format->call_open);
        put_call_head(t, &m->tool_calls[j], format->arguments_key);
        chat_append(t, "}");
        chat_append(t, format->call_close);
    }
}

/* The run of tool messages from index i as one user message's content;
 * returns the index after the run. */
static int lower_results(struct chat_text *t, const struct chat_request *r, int i,
                         const struct lowering *lw) {
    for (int first = i; i < r->n && r->roles[i] == ROLE_TOOL; i++) {
        if (i > first) chat_append(t, "\n");
        chat_append(t, lw->result_open);
        chat_append(t, content_of(&r->messages[i]));
        chat_append(t, lw->result_close);
    }
    return i;
}

/* Writes the lowered messages to out (room for n + 1) with their texts in
 * texts (as many, zeroed); returns how many. */
static int lower(const struct chat_request *r, const struct lowering *lw,
                 struct tokenizer_chat_message *out, struct chat_text *texts) {
    const struct tokenizer_tool_format *format = tokenizer_chat_tool_format(r->family);
    int j = 0, i = 0;
    if (r->n_tools > 0) {
        lower_system(&texts[j], r, lw);
        out[j++] = (struct tokenizer_chat_message){.role = "system", .content = texts[0].data};
        i = r->roles[0] == ROLE_SYSTEM;
    }
    while (i < r->n) {
        const struct tokenizer_chat_message *m = &r->messages[i];
        const char *role = role_names[r->roles[i]], *content = m->content;
        if (r->roles[i] == ROLE_TOOL) {
            i = lower_results(&texts[j], r, i, lw);
            role = "user";
            content = texts[j].data;
        } else {
            if (has_calls(m)) {
                lower_calls(&texts[j], m, format);
                content = texts[j].data;
            }
            i++;
        }
        out[j++] = (struct tokenizer_chat_message){.role = role, .content = content};
    }
    return j;
}

static int format_lowered(const struct chat_request *r, char **out, size_t *out_len, char *err,
                          size_t errlen) {
    const struct lowering *lw =
        r->family == TOKENIZER_CHAT_CHATML ? &chatml_lowering : &own_lowering;
    struct tokenizer_chat_message *lowered = calloc((size_t)r->n + 1, sizeof(*lowered));
    struct chat_text *texts = calloc((size_t)r->n + 1, sizeof(*texts));
    int rc = -1, n = 0, failed = !lowered || !texts;
    if (!failed) {
        n = lower(r, lw, lowered, texts);
        for (int j = 0; j < n; j++) failed |= texts[j].failed;
    }
    if (failed)
        snprintf(err, errlen, "chat template %s: out of memory formatting %d messages", r->name,
                 r->n);
    else
        rc = tokenizer_chat_apply(r->family, lowered, n, r->add_generation_prompt, r->bos, r->eos,
                                  out, out_len, err, errlen);
    for (int j = 0; texts && j <= r->n; j++) free(texts[j].data);
    free(texts);
    free(lowered);
    return rc;
}

/* ---- checks ---- */

static int parse_role(const char *role) {
    for (int r = ROLE_SYSTEM; r <= ROLE_TOOL; r++)
        if (strcmp(role, role_names[r]) == 0) return r;
    return -1;
}

static int check_calls(const char *name, const struct tokenizer_chat_message *m, int i, int role,
                       char *err, size_t errlen) {
    if (m->n_tool_calls < 0 || (m->n_tool_calls > 0 && !m->tool_calls)) {
        snprintf(err, errlen, "chat template %s: message %d has %d tool calls and %s", name, i,
                 m->n_tool_calls, m->tool_calls ? "a list" : "no list");
        return -1;
    }
    if (m->n_tool_calls > 0 && role != ROLE_ASSISTANT) {
        snprintf(err, errlen,
                 "chat template %s: message %d has role '%s' and tool calls (only assistant "
                 "messages make calls)",
                 name, i, role_names[role]);
        return -1;
    }
    for (int j = 0; j < m->n_tool_calls; j++) {
        if (!m->tool_calls[j].name || !*m->tool_calls[j].name) {
            snprintf(err, errlen, "chat template %s: message %d, tool call %d has no function name",
                     name, i, j);
            return -1;
        }
    }
    return 0;
}

/* Every message has a known role (stored in roles[i]) and sound calls. */
static int check_messages(const char *name, const struct tokenizer_chat_message *messages, int n,
                          int *roles, char *err, size_t errlen) {
    for (int i = 0; i < n; i++) {
        if (!messages[i].role) {
            snprintf(err, errlen, "chat template %s: message %d has no role", name, i);
            return -1;
        }
        roles[i] = parse_role(messages[i].role);
        if (roles[i] < 0) {
            snprintf(err, errlen,
                     "chat template %s: message %d has role '%.64s' (the roles are system, user, "
                     "assistant and tool)",
                     name, i, messages[i].role);
            return -1;
        }
        if (check_calls(name, &messages[i], i, roles[i], err, errlen) != 0) return -1;
    }
    return 0;
}

static int check_tools(const char *name, const struct tokenizer_chat_tool *tools, int n_tools,
                       char *err, size_t errlen) {
    if (n_tools < 0 || (n_tools > 0 && !tools)) {
        snprintf(err, errlen, "chat template %s: %d tools and %s", name, n_tools,
                 tools ? "a list" : "no list");
        return -1;
    }
    for (int k = 0; k < n_tools; k++) {
        const struct tokenizer_chat_tool *tool = &tools[k];
        if (!tool->name || !*tool->name) {
            snprintf(err, errlen, "chat template %s: tool %d has no name", name, k);
            return -1;
        }
        if (tool->parameters && chat_json_write(NULL, tool->parameters, strlen(tool->parameters),
                                                CHAT_JSON_COMPACT) != 0) {
            snprintf(err, errlen,
                     "chat template %s: tool %d ('%.64s') has parameters that are not valid JSON",
                     name, k, tool->name);
            return -1;
        }
    }
    return 0;
}

/* Llama 2 (lockstep's convention): after an optional first system
 * message, user turns (a user message or a run of tool messages) and
 * assistant messages alternate, from a user turn. */
static int check_turns(const struct chat_request *r, char *err, size_t errlen) {
    int first = r->roles[0] == ROLE_SYSTEM, expect_user = 1;
    for (int i = first; i < r->n; i++) {
        int role = r->roles[i];
        if (role == ROLE_TOOL && i > first && r->roles[i - 1] == ROLE_TOOL) continue;
        if (role != ROLE_SYSTEM && (role != ROLE_ASSISTANT) == expect_user) {
            expect_user = !expect_user;
            continue;
        }
        snprintf(err, errlen,
                 "chat template %s: message %d has role '%s' where %s was expected (after an "
                 "optional first system message, user turns (a user message or a run of tool "
                 "messages) and assistant messages must alternate)",
                 r->name, i, role_names[role], expect_user ? "'user' or 'tool'" : "'assistant'");
        return -1;
    }
    return 0;
}

/* Mistral: user and assistant alternate as without tools, tool messages
 * and assistant messages with calls not counted (v0.3's check). */
static int check_mistral(const struct chat_request *r, char *err, size_t errlen) {
    int first = r->roles[0] == ROLE_SYSTEM, index = 0;
    for (int i = first; i < r->n; i++) {
        if (r->roles[i] == ROLE_TOOL || has_calls(&r->messages[i])) continue;
        int expected = index++ % 2 == 0 ? ROLE_USER : ROLE_ASSISTANT;
        if (r->roles[i] == expected) continue;
        snprintf(err, errlen,
                 "chat template %s: message %d has role '%s' where '%s' was expected (after an "
                 "optional first system message, user and assistant must alternate; tool "
                 "messages and assistant messages with tool calls are not counted)",
                 r->name, i, role_names[r->roles[i]], role_names[expected]);
        return -1;
    }
    return 0;
}

/* Llama 3.1 writes the tools into the first user message. */
static int check_llama3(const struct chat_request *r, char *err, size_t errlen) {
    int first = r->roles[0] == ROLE_SYSTEM;
    if (r->n_tools == 0 || (first < r->n && r->roles[first] == ROLE_USER)) return 0;
    if (first < r->n)
        snprintf(err, errlen,
                 "chat template %s: with tools, message %d must be a user message (the tools "
                 "are written into the first user message), not '%s'",
                 r->name, first, role_names[r->roles[first]]);
    else
        snprintf(err, errlen,
                 "chat template %s: with tools there must be a user message after the system "
                 "message (the tools are written into it)",
                 r->name);
    return -1;
}

static int check_family(const struct chat_request *r, char *err, size_t errlen) {
    switch (r->family) {
    case TOKENIZER_CHAT_LLAMA2:
        return check_turns(r, err, errlen);
    case TOKENIZER_CHAT_MISTRAL:
        return check_mistral(r, err, errlen);
    case TOKENIZER_CHAT_LLAMA3:
        return check_llama3(r, err, errlen);
    default:
        return 0;
    }
}

/* ---- rendering ---- */

/* 1 if the conversation has tools, tool messages or calls. */
static int uses_tools(const struct chat_request *r) {
    if (r->n_tools > 0) return 1;
    for (int i = 0; i < r->n; i++)
        if (r->roles[i] == ROLE_TOOL || has_calls(&r->messages[i])) return 1;
    return 0;
}

/* LLAMA3 and MISTRAL, written here. */
static int format_direct(const struct chat_request *r, char **out, size_t *out_len, char *err,
                         size_t errlen) {
    struct chat_text t = {NULL, 0, 0, 0};
    chat_append_bytes(&t, "", 0);
    if (r->family == TOKENIZER_CHAT_LLAMA3)
        format_llama3(&t, r);
    else
        format_mistral(&t, r);
    if (t.failed) {
        free(t.data);
        snprintf(err, errlen, "chat template %s: out of memory formatting %d messages", r->name,
                 r->n);
        return -1;
    }
    *out = t.data;
    *out_len = t.len;
    return 0;
}

static int render(const struct chat_request *r, char **out, size_t *out_len, char *err,
                  size_t errlen) {
    if (!uses_tools(r))
        return tokenizer_chat_apply(r->family, r->messages, r->n, r->add_generation_prompt, r->bos,
                                    r->eos, out, out_len, err, errlen);
    if (check_family(r, err, errlen) != 0) return -1;
    if (r->family == TOKENIZER_CHAT_LLAMA3 || r->family == TOKENIZER_CHAT_MISTRAL)
        return format_direct(r, out, out_len, err, errlen);
    return format_lowered(r, out, out_len, err, errlen);
}

int tokenizer_chat_apply_tools(enum tokenizer_chat_template family,
                               const struct tokenizer_chat_message *messages, int n,
                               const struct tokenizer_chat_tool *tools, int n_tools,
                               int add_generation_prompt, const char *bos_text,
                               const char *eos_text, char **out, size_t *out_len, char *err,
                               size_t errlen) {
    const char *name;
    int *roles;
    if (chat_start(family, n, &name, &roles, out, out_len, err, errlen)) return -1;
    struct chat_request r = {.family = family,
                             .name = name,
                             .messages = messages,
                             .roles = roles,
                             .n = n,
                             .tools = tools,
                             .n_tools = n_tools,
                             .add_generation_prompt = add_generation_prompt,
                             .bos = bos_text,
                             .eos = eos_text};
    int rc = check_messages(name, messages, n, roles, err, errlen);
    if (rc == 0) rc = check_tools(name, tools, n_tools, err, errlen);
    if (rc == 0) rc = render(&r, out, out_len, err, errlen);
    free(roles);
    return rc;
}

/* ---- the model's side: format and parsing ---- */

const struct tokenizer_tool_format *
tokenizer_chat_tool_format(enum tokenizer_chat_template family) {
    int i = (int)family;
    return i >= 0 && i < N_FORMATS ? &tool_formats[i] : NULL;
}

static size_t skip_space(const char *text, size_t len, size_t p) {
    while (p < len && chat_is_space(text[p])) p++;
    return p;
}

/* 1 if text[p..len) starts with s. */
static int starts_with(const char *text, size_t len, size_t p, const char *s) {
    size_t n = strlen(s);
    return len - p >= n && memcmp(text + p, s, n) == 0;
}

/* 1 if text[p..len) is a proper prefix of s (the empty text is one). */
static int could_become(const char *text, size_t len, size_t p, const char *s) {
    return len - p < strlen(s) && memcmp(text + p, s, len - p) == 0;
}

/* LLAMA3: the calls are the whole answer. */
static int find_at_start(const char *trigger, const char *text, size_t len, size_t *at) {
    size_t start = skip_space(text, len, 0), p = start;
    if (starts_with(text, len, p, python_tag)) {
        p = skip_space(text, len, p + strlen(python_tag));
    } else if (could_become(text, len, p, python_tag)) {
        *at = 0; /* the start of <|python_tag|> or of nothing yet */
        return 0;
    }
    if (starts_with(text, len, p, trigger)) {
        *at = start;
        return 1;
    }
    *at = could_become(text, len, p, trigger) ? 0 : len;
    return 0;
}

static int find_anywhere(const char *trigger, const char *text, size_t len, size_t *at) {
    size_t n = strlen(trigger);
    const char *hit = memmem(text, len, trigger, n);
    if (hit) {
        *at = (size_t)(hit - text);
        return 1;
    }
    size_t keep = n - 1 < len ? n - 1 : len;
    while (keep > 0 && memcmp(text + len - keep, trigger, keep) != 0) keep--;
    *at = len - keep;
    return 0;
}

int tokenizer_chat_find_tool_trigger(enum tokenizer_chat_template family, const char *text,
                                     size_t len, size_t *at) {
    const struct tokenizer_tool_format *format = tokenizer_chat_tool_format(family);
    *at = len;
    if (!format) return 0;
    if (format->trigger_at_start) return find_at_start(format->trigger, text, len, at);
    return find_anywhere(format->trigger, text, len, at);
}

/* Matches s at text[p..) word by word, any whitespace before each word
 * (so "\n</tool_call>" matches " </tool_call>"). Returns the offset after
 * it, or (size_t)-1. */
static size_t match_loose(const char *text, size_t len, size_t p, const char *s) {
    for (;;) {
        while (*s && chat_is_space(*s)) s++;
        if (!*s) return p;
        size_t n = 0;
        while (s[n] && !chat_is_space(s[n])) n++;
        p = skip_space(text, len, p);
        if (len - p < n || memcmp(text + p, s, n) != 0) return (size_t)-1;
        p += n;
        s += n;
    }
}

/* The state of one parse. */
struct call_parser {
    const struct tokenizer_tool_format *format;
    const char *family; /* its name, for messages */
    const char *text;   /* the generated text (len) */
    size_t len;
    struct tokenizer_parsed_calls *out;
    char *err;
    size_t errlen;
};

static int parse_fail(const struct call_parser *cp, int call, size_t at, const char *format, ...)
    __attribute__((format(printf, 4, 5)));

/* -1 with "tool calls (FAMILY): [call N: ]WHAT (at byte AT)" in err. */
static int parse_fail(const struct call_parser *cp, int call, size_t at, const char *format, ...) {
    char what[160];
    va_list args;
    va_start(args, format);
    vsnprintf(what, sizeof(what), format, args);
    va_end(args);
    if (call >= 0)
        snprintf(cp->err, cp->errlen, "tool calls (%s): call %d: %s (at byte %zu)", cp->family,
                 call, what, at);
    else
        snprintf(cp->err, cp->errlen, "tool calls (%s): %s (at byte %zu)", cp->family, what, at);
    return -1;
}

/* Expects s (loosely) at *p. */
static int expect(const struct call_parser *cp, size_t *p, const char *s, int call) {
    size_t after = match_loose(cp->text, cp->len, *p, s);
    if (after != (size_t)-1) {
        *p = after;
        return 0;
    }
    char shown[64];
    size_t k = 0;
    for (const char *c = s; *c && k + 3 < sizeof(shown); c++) {
        if (*c == '\n') shown[k++] = '\\';
        shown[k++] = *c == '\n' ? 'n' : *c;
    }
    shown[k] = '\0';
    return parse_fail(cp, call, skip_space(cp->text, cp->len, *p), "expected \"%s\"", shown);
}

static char *copy_string(const char *s) {
    return s ? strdup(s) : NULL;
}

/* The arguments member's value as the model wrote it minus the
 * whitespace between tokens (checked JSON); "{}" when there is none. Not
 * re-escaped: a stream sends the same bytes as they are written
 * (tokenizer_chat_scan_tool_calls). */
static char *compact_arguments(const char *object, size_t len, const char *key) {
    size_t value_len = 0;
    const char *value = chat_json_member(object, len, key, &value_len);
    if (!value) return strdup("{}");
    if (chat_json_write(NULL, value, value_len, CHAT_JSON_COMPACT) != 0) return NULL;
    char *out = malloc(value_len + 1);
    if (out) out[tokenizer_json_minify(value, value_len, out)] = '\0';
    return out;
}

/* Appends call to out. */
static int add_call(struct tokenizer_parsed_calls *out, struct tokenizer_parsed_call call) {
    struct tokenizer_parsed_call *grown =
        realloc(out->calls, (size_t)(out->n_calls + 1) * sizeof(*grown));
    if (!grown) return -1;
    out->calls = grown;
    out->calls[out->n_calls++] = call;
    return 0;
}

/* Reads the fields of the checked call object obj (its text at
 * text[start..end)). */
static int read_call(const struct call_parser *cp, const cJSON *obj, size_t start, size_t end,
                     int index) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(obj, "name");
    if (!cJSON_IsString(name) || !*name->valuestring)
        return parse_fail(cp, index, start, "no \"name\" string");
    const char *key = cp->format->arguments_key;
    const char *other = strcmp(key, "arguments") == 0 ? "parameters" : "arguments";
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!args && (args = cJSON_GetObjectItemCaseSensitive(obj, other)) != NULL) key = other;
    if (args && !cJSON_IsObject(args))
        return parse_fail(cp, index, start, "\"%s\" is not a JSON object", key);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(obj, "id");
    struct tokenizer_parsed_call call = {cJSON_IsString(id) ? copy_string(id->valuestring) : NULL,
                                         strdup(name->valuestring),
                                         compact_arguments(cp->text + start, end - start, key)};
    if (!call.name || !call.arguments || (cJSON_IsString(id) && !call.id) ||
        add_call(cp->out, call) != 0) {
        free(call.id);
        free(call.name);
        free(call.arguments);
        return parse_fail(cp, index, start, "out of memory");
    }
    return 0;
}

/* One call's JSON object at *p. */
static int parse_call(const struct call_parser *cp, size_t *p, int index) {
    size_t start = skip_space(cp->text, cp->len, *p);
    if (start >= cp->len || cp->text[start] != '{')
        return parse_fail(cp, index, start, "not a JSON object");
    const char *end = NULL;
    cJSON *obj = cJSON_ParseWithLengthOpts(cp->text + start, cp->len - start, &end, 0);
    size_t stop = obj && end ? (size_t)(end - cp->text) : start;
    if (!obj || chat_json_write(NULL, cp->text + start, stop - start, CHAT_JSON_COMPACT) != 0) {
        cJSON_Delete(obj);
        return parse_fail(cp, index, start, "not valid JSON");
    }
    int rc = read_call(cp, obj, start, stop, index);
    cJSON_Delete(obj);
    *p = stop;
    return rc;
}

/* 1 if another call follows the separator that ends at p. */
static int call_follows(const struct call_parser *cp, size_t p) {
    p = match_loose(cp->text, cp->len, p, cp->format->call_open);
    if (p == (size_t)-1) return 0;
    p = skip_space(cp->text, cp->len, p);
    return p < cp->len && cp->text[p] == '{';
}

/* The calls from the trigger at offset at to the end of the text. */
static int parse_calls(const struct call_parser *cp, size_t at) {
    const struct tokenizer_tool_format *f = cp->format;
    size_t p = at;
    if (f->trigger_at_start && starts_with(cp->text, cp->len, p, python_tag))
        p += strlen(python_tag);
    if (expect(cp, &p, f->list_open, -1) != 0) return -1;
    for (int i = 0;; i++) {
        if (expect(cp, &p, f->call_open, i) != 0 || parse_call(cp, &p, i) != 0 ||
            expect(cp, &p, f->call_close, i) != 0)
            return -1;
        size_t next = match_loose(cp->text, cp->len, p, f->call_separator);
        if (next == (size_t)-1 || !call_follows(cp, next)) break;
        p = next;
    }
    if (expect(cp, &p, f->list_close, -1) != 0) return -1;
    p = skip_space(cp->text, cp->len, p);
    if (p != cp->len) return parse_fail(cp, -1, p, "text after the tool calls");
    return 0;
}

int tokenizer_chat_parse_tool_calls(enum tokenizer_chat_template family, const char *text,
                                    size_t len, struct tokenizer_parsed_calls *out, char *err,
                                    size_t errlen) {
    memset(out, 0, sizeof(*out));
    out->content_len = out->calls_offset = len;
    const struct tokenizer_tool_format *format = tokenizer_chat_tool_format(family);
    if (!format) {
        snprintf(err, errlen, "tool calls: %d is not a template family", (int)family);
        return -1;
    }
    size_t at;
    if (tokenizer_chat_find_tool_trigger(family, text, len, &at) != 1) return 0;
    struct call_parser cp = {format, tokenizer_chat_template_name(family), text, len, out, err,
                             errlen};
    if (parse_calls(&cp, at) != 0) {
        tokenizer_parsed_calls_free(out);
        return -1;
    }
    out->calls_offset = at;
    while (at > 0 && chat_is_space(text[at - 1])) at--;
    out->content_len = at;
    return 0;
}

void tokenizer_parsed_calls_free(struct tokenizer_parsed_calls *calls) {
    if (!calls) return;
    for (int i = 0; i < calls->n_calls; i++) {
        free(calls->calls[i].id);
        free(calls->calls[i].name);
        free(calls->calls[i].arguments);
    }
    free(calls->calls);
    calls->calls = NULL;
    calls->n_calls = 0;
}
