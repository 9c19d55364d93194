/* test_chat_tools.c -- tool calling in the chat templates.
 *
 * - One conversation (system, user, an assistant message with two calls,
 *   two tool results, an answer, a last user message) with two tools is
 *   rendered by every family into exactly the text written out here from
 *   the family's format (tokenizer.h, README "Tool calling formats").
 * - Without tools, tool messages or calls, tokenizer_chat_apply_tools gives
 *   tokenizer_chat_apply's text; tool history without tools has no tools
 *   section.
 * - The prefix property: request k's prompt is the start of request
 *   k+1's, in every family but Mistral once a new user message moves the
 *   tools (which is checked to be so).
 * - JSON is re-spaced as Python's json.dumps writes it; arguments that are
 *   not JSON become a JSON string; refused conversations name the message.
 * - The trigger is found (and held back while it may still come), calls
 *   are parsed (one, several, content before, loose whitespace, Mistral's
 *   ids, Llama's "parameters"), bad calls give an error naming the call,
 *   and each family's rendered calls parse back to what was rendered. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tokenizer/tokenizer.h"

/* ---- the conversation ---- */

#define WEATHER_PARAMETERS                                                                         \
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"type\":"      \
    "\"string\",\"enum\":[\"celsius\",\"fahrenheit\"]}},\"required\":[\"city\"]}"

static const struct tokenizer_chat_tool tools[2] = {
    {.name = "get_weather",
     .description = "Get the current weather in a city",
     .parameters = WEATHER_PARAMETERS},
    {.name = "get_time", .description = NULL, .parameters = NULL},
};

static const struct tokenizer_tool_call calls[2] = {
    {.id = "call00001", .name = "get_weather", .arguments = "{\"city\":\"Paris\"}"},
    {.id = "call00002",
     .name = "get_weather",
     .arguments = "{ \"city\": \"Oslo\",\n  \"unit\": \"celsius\" }"},
};

#define SYSTEM   "You are a helpful assistant."
#define QUESTION "What is the weather in Paris and in Oslo?"
#define ANSWER   "Sunny and 21 C in Paris, rain and 9 C in Oslo."
#define RESULT1  "{\"temp\":21,\"sky\":\"sunny\"}"
#define RESULT2  "Rain, 9 C"

static const struct tokenizer_chat_message conversation[7] = {
    {.role = "system", .content = SYSTEM},
    {.role = "user", .content = QUESTION},
    {.role = "assistant", .content = NULL, .tool_calls = calls, .n_tool_calls = 2},
    {.role = "tool", .content = RESULT1, .tool_call_id = "call00001", .name = "get_weather"},
    {.role = "tool", .content = RESULT2, .tool_call_id = "call00002"},
    {.role = "assistant", .content = ANSWER},
    {.role = "user", .content = "Thanks!"},
};

/* The tools as json.dumps writes them, on one line and with indent=4. */
#define TOOL1                                                                                      \
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get "   \
    "the current weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": "     \
    "{\"city\": {\"type\": \"string\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", " \
    "\"fahrenheit\"]}}, \"required\": [\"city\"]}}}"
#define TOOL2 "{\"type\": \"function\", \"function\": {\"name\": \"get_time\"}}"
#define TOOL1_INDENTED                                                                             \
    "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n"    \
    "        \"description\": \"Get the current weather in a city\",\n        \"parameters\": "    \
    "{\n            \"type\": \"object\",\n            \"properties\": {\n                "        \
    "\"city\": {\n                    \"type\": \"string\"\n                },\n                "  \
    "\"unit\": {\n                    \"type\": \"string\",\n                    \"enum\": [\n"    \
    "                        \"celsius\",\n                        \"fahrenheit\"\n             "  \
    "       ]\n                }\n            },\n            \"required\": [\n                "   \
    "\"city\"\n            ]\n        }\n    }\n}"
#define TOOL2_INDENTED                                                                             \
    "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_time\"\n    "    \
    "}\n}"

#define ARGS1 "{\"city\": \"Paris\"}"
#define ARGS2 "{\"city\": \"Oslo\", \"unit\": \"celsius\"}"

/* lockstep's convention (PLAIN, LLAMA2, ZEPHYR). */
#define OWN_SYSTEM                                                                                 \
    SYSTEM "\n\n# Tools\n\nYou may call functions to answer. Each one is described by a JSON "     \
           "object within <tools></tools>:\n<tools>\n" TOOL1 "\n" TOOL2                            \
           "\n</tools>\n\nTo call functions, write each call as a JSON object with the "           \
           "function's name and its arguments within <tool_call></tool_call>, one call a "         \
           "line:\n<tool_call>{\"name\": <function-name>, \"arguments\": "                         \
           "<args-json-object>}</tool_call>"
#define OWN_CALLS                                                                                  \
    "<tool_call>{\"name\": \"get_weather\", \"arguments\": " ARGS1                                 \
    "}</tool_call>\n<tool_call>{\"name\": \"get_weather\", \"arguments\": " ARGS2 "}</tool_call>"
#define OWN_RESULTS                                                                                \
    "<tool_response>" RESULT1 "</tool_response>\n<tool_response>" RESULT2 "</tool_response>"

/* One family's rendering of conversation with tools. */
struct tools_case {
    enum tokenizer_chat_template family;
    const char *bos, *eos;
    const char *expected; /* with the generation prompt */
};

static const struct tools_case cases[] = {
    {TOKENIZER_CHAT_LLAMA3, "<|begin_of_text|>", "<|eot_id|>",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: "
     "ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" SYSTEM
     "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, "
     "please respond with a JSON for a function call with its proper arguments that best "
     "answers the given prompt.\n\nRespond in the format {\"name\": function name, "
     "\"parameters\": dictionary of argument name and its value}.Do not use "
     "variables.\n\n" TOOL1_INDENTED "\n\n" TOOL2_INDENTED "\n\n" QUESTION
     "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", "
     "\"parameters\": " ARGS1 "}; {\"name\": \"get_weather\", \"parameters\": " ARGS2
     "}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"{\\\"temp\\\":21,\\\"sky\\\":"
     "\\\"sunny\\\"}\"<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"" RESULT2
     "\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n" ANSWER
     "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nThanks!<|eot_id|><|start_header_id|>"
     "assistant<|end_header_id|>\n\n"},
    {TOKENIZER_CHAT_CHATML, NULL, "<|im_end|>",
     "<|im_start|>system\n" SYSTEM
     "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou "
     "are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" TOOL1
     "\n" TOOL2 "\n</tools>\n\nFor each function call, return a json object with function name "
     "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
     "<function-name>, \"arguments\": "
     "<args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\n" QUESTION
     "<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", "
     "\"arguments\": " ARGS1 "}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", "
     "\"arguments\": " ARGS2
     "}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n" RESULT1
     "\n</tool_response>\n<tool_response>\n" RESULT2
     "\n</tool_response><|im_end|>\n<|im_start|>assistant\n" ANSWER
     "<|im_end|>\n<|im_start|>user\nThanks!<|im_end|>\n<|im_start|>assistant\n"},
    {TOKENIZER_CHAT_MISTRAL, "<s>", "</s>",
     "<s> [INST] " SYSTEM "\n\n" QUESTION " [/INST][TOOL_CALLS] [{\"name\": \"get_weather\", "
     "\"arguments\": " ARGS1 ", \"id\": \"call00001\"}, {\"name\": \"get_weather\", "
     "\"arguments\": " ARGS2 ", \"id\": \"call00002\"}]</s>[TOOL_RESULTS] {\"content\": "
     "{\"temp\": 21, \"sky\": \"sunny\"}, \"call_id\": "
     "\"call00001\"}[/TOOL_RESULTS][TOOL_RESULTS] {\"content\": \"" RESULT2
     "\", \"call_id\": \"call00002\"}[/TOOL_RESULTS] " ANSWER "</s>[AVAILABLE_TOOLS] [" TOOL1
     ", " TOOL2 "][/AVAILABLE_TOOLS] [INST] Thanks! [/INST]"},
    {TOKENIZER_CHAT_PLAIN, "<s>", "</s>",
     "System: " OWN_SYSTEM "\nUser: " QUESTION "\nAssistant: " OWN_CALLS "\nUser: " OWN_RESULTS
     "\nAssistant: " ANSWER "\nUser: Thanks!\nAssistant:"},
    {TOKENIZER_CHAT_LLAMA2, "<s>", "</s>",
     "<s>[INST] <<SYS>>\n" OWN_SYSTEM "\n<</SYS>>\n\n" QUESTION " [/INST] " OWN_CALLS
     " </s><s>[INST] " OWN_RESULTS " [/INST] " ANSWER " </s><s>[INST] Thanks! [/INST]"},
    {TOKENIZER_CHAT_ZEPHYR, "<s>", "</s>",
     "<|system|>\n" OWN_SYSTEM "</s>\n<|user|>\n" QUESTION "</s>\n<|assistant|>\n" OWN_CALLS
     "</s>\n<|user|>\n" OWN_RESULTS "</s>\n<|assistant|>\n" ANSWER
     "</s>\n<|user|>\nThanks!</s>\n<|assistant|>\n"},
};
#define N_CASES (int)(sizeof(cases) / sizeof(cases[0]))

/* Renders with tokenizer_chat_apply_tools; NULL (with a failed check) on error. */
static char *render(enum tokenizer_chat_template family,
                    const struct tokenizer_chat_message *messages, int n,
                    const struct tokenizer_chat_tool *with, int n_tools, int generation,
                    const char *bos, const char *eos) {
    char err[512] = "", *text = NULL;
    size_t len = 0;
    int rc = tokenizer_chat_apply_tools(family, messages, n, with, n_tools, generation, bos, eos,
                                        &text, &len, err, sizeof(err));
    CHECK_MSG(rc == 0, "%s: %s", tokenizer_chat_template_name(family), err);
    CHECK(rc != 0 || strlen(text) == len);
    return rc == 0 ? text : NULL;
}

static int check_text(const char *label, const char *got, const char *expected) {
    int same = got && strcmp(got, expected) == 0;
    size_t at = 0;
    while (got && got[at] && got[at] == expected[at]) at++;
    CHECK_MSG(same, "%s: differs at byte %zu\n  expected \"%s\"\n  got      \"%s\"", label, at,
              expected, got ? got : "(null)");
    return same;
}

static void check_families(void) {
    int passed = 0;
    for (int i = 0; i < N_CASES; i++) {
        const struct tools_case *c = &cases[i];
        char *text = render(c->family, conversation, 7, tools, 2, 1, c->bos, c->eos);
        passed += check_text(tokenizer_chat_template_name(c->family), text, c->expected);
        free(text);
    }
    printf("tools: %d/%d families render the conversation as their format\n", passed, N_CASES);
}

/* ---- without tools: tokenizer_chat_apply's text ---- */

static void check_without_tools(void) {
    const struct tokenizer_chat_message plain[4] = {
        {.role = "system", .content = SYSTEM},
        {.role = "user", .content = QUESTION},
        {.role = "assistant", .content = ANSWER},
        {.role = "user", .content = "Thanks!"},
    };
    char err[256];
    for (int f = TOKENIZER_CHAT_PLAIN; f <= TOKENIZER_CHAT_ZEPHYR; f++) {
        enum tokenizer_chat_template family = (enum tokenizer_chat_template)f;
        for (int generation = 0; generation <= 1; generation++) {
            char *expected = NULL;
            size_t len = 0;
            CHECK(tokenizer_chat_apply(family, plain, 4, generation, "<s>", "</s>", &expected, &len,
                                       err, sizeof(err)) == 0);
            char *got = render(family, plain, 4, NULL, 0, generation, "<s>", "</s>");
            check_text("without tools", got, expected ? expected : "");
            free(got);
            free(expected);
        }
    }
    /* A tool history without tools: no tools section. */
    char *got = render(TOKENIZER_CHAT_CHATML, conversation + 1, 4, NULL, 0, 1, NULL, NULL);
    check_text("history without tools", got,
               "<|im_start|>user\n" QUESTION "<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{"
               "\"name\": \"get_weather\", \"arguments\": " ARGS1
               "}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " ARGS2
               "}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n" RESULT1
               "\n</tool_response>\n<tool_response>\n" RESULT2
               "\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
    free(got);
    /* Llama 3 without tools: its base layout, no preamble; content kept
     * beside calls is dropped. */
    const struct tokenizer_chat_message both[2] = {
        {.role = "user", .content = "Hi"},
        {.role = "assistant", .content = "Let me see.", .tool_calls = calls, .n_tool_calls = 1}};
    got = render(TOKENIZER_CHAT_LLAMA3, both, 2, NULL, 0, 0, "<|begin_of_text|>", NULL);
    check_text("llama3 history", got,
               "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_"
               "header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", "
               "\"parameters\": " ARGS1 "}<|eot_id|>");
    free(got);
}

/* ---- multi-turn: request k's prompt starts request k+1's ---- */

static void check_prefixes(void) {
    /* Request 1: system, question. 2: + the calls and their results.
     * 3: + the answer and a new user message. */
    static const int lengths[3] = {2, 5, 7};
    int held = 0;
    for (int i = 0; i < N_CASES; i++) {
        const struct tools_case *c = &cases[i];
        char *text[3];
        for (int k = 0; k < 3; k++)
            text[k] = render(c->family, conversation, lengths[k], tools, 2, 1, c->bos, c->eos);
        for (int k = 0; k + 1 < 3; k++) {
            int prefix =
                text[k] && text[k + 1] && strncmp(text[k], text[k + 1], strlen(text[k])) == 0;
            /* Mistral puts the tools before the last user message (v0.3). */
            int expected = !(c->family == TOKENIZER_CHAT_MISTRAL && k == 1);
            CHECK_MSG(prefix == expected, "%s: request %d %s a prefix of request %d",
                      tokenizer_chat_template_name(c->family), k + 1, prefix ? "is" : "is not",
                      k + 2);
            held += prefix == expected;
        }
        for (int k = 0; k < 3; k++) free(text[k]);
    }
    printf("prefix property: %d/%d request pairs as expected\n", held, 2 * N_CASES);
}

/* ---- JSON and refusals ---- */

static void check_json(void) {
    const struct tokenizer_tool_call odd[3] = {
        {.name = "f",
         .arguments =
             " {\"q\":\"caf\\u00e9 \\\"x\\\"\\/\\u0001\\ud83d\\ude00\",\"n\":[1,2.50,-0e+1,"
             "true,null],\"e\":{},\"a\":[ ]} "},
        {.name = "g", .arguments = "not json"},
        {.name = "h\"i", .arguments = NULL}};
    const struct tokenizer_chat_message m[2] = {
        {.role = "user", .content = "x"},
        {.role = "assistant", .tool_calls = odd, .n_tool_calls = 3}};
    char *got = render(TOKENIZER_CHAT_CHATML, m, 2, NULL, 0, 0, NULL, NULL);
    check_text("json", got,
               "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": "
               "\"f\", \"arguments\": {\"q\": \"caf\xc3\xa9 \\\"x\\\"/\\u0001\xf0\x9f\x98\x80\", "
               "\"n\": [1, 2.50, -0e+1, true, null], \"e\": {}, \"a\": []}}\n</tool_call>\n"
               "<tool_call>\n{\"name\": \"g\", \"arguments\": \"not json\"}\n</tool_call>\n"
               "<tool_call>\n{\"name\": \"h\\\"i\", \"arguments\": {}}\n</tool_call><|im_end|>\n");
    free(got);
}

/* tokenizer_chat_apply_tools fails with a message containing each of parts. */
static void check_refused(enum tokenizer_chat_template family,
                          const struct tokenizer_chat_message *messages, int n,
                          const struct tokenizer_chat_tool *with, int n_tools,
                          const char *const *parts) {
    char err[512] = "", *text = (char *)"not touched";
    size_t len = 7;
    int rc = tokenizer_chat_apply_tools(family, messages, n, with, n_tools, 1, "<s>", "</s>", &text,
                                        &len, err, sizeof(err));
    CHECK_MSG(rc == -1 && text == NULL && len == 0, "%s accepted a bad conversation",
              tokenizer_chat_template_name(family));
    if (rc == 0) free(text);
    for (int i = 0; parts[i]; i++)
        CHECK_MSG(strstr(err, parts[i]) != NULL, "error \"%s\" lacks \"%s\"", err, parts[i]);
}

static void check_errors(void) {
    const struct tokenizer_chat_message function[2] = {{.role = "user", .content = "a"},
                                                       {.role = "function", .content = "b"}};
    check_refused(
        TOKENIZER_CHAT_CHATML, function, 2, tools, 2,
        (const char *const[]){"message 1", "'function'", "user, assistant and tool", NULL});
    const struct tokenizer_chat_message user_calls[1] = {
        {.role = "user", .content = "a", .tool_calls = calls, .n_tool_calls = 1}};
    check_refused(TOKENIZER_CHAT_ZEPHYR, user_calls, 1, NULL, 0,
                  (const char *const[]){"message 0", "only assistant messages", NULL});
    const struct tokenizer_tool_call nameless[1] = {{.arguments = "{}"}};
    const struct tokenizer_chat_message no_name[2] = {
        {.role = "user", .content = "a"},
        {.role = "assistant", .tool_calls = nameless, .n_tool_calls = 1}};
    check_refused(TOKENIZER_CHAT_LLAMA3, no_name, 2, NULL, 0,
                  (const char *const[]){"message 1, tool call 0 has no function name", NULL});
    const struct tokenizer_chat_tool bad_tools[2] = {
        {.name = "ok"}, {.name = "broken", .parameters = "{\"type\": object}"}};
    check_refused(TOKENIZER_CHAT_PLAIN, conversation, 2, bad_tools, 2,
                  (const char *const[]){"tool 1 ('broken')", "not valid JSON", NULL});
    const struct tokenizer_chat_tool no_tool_name[1] = {{.description = "x"}};
    check_refused(TOKENIZER_CHAT_PLAIN, conversation, 2, no_tool_name, 1,
                  (const char *const[]){"tool 0 has no name", NULL});
    /* Llama 3.1 writes the tools into the first user message. */
    check_refused(TOKENIZER_CHAT_LLAMA3, conversation, 1, tools, 2,
                  (const char *const[]){"llama3", "must be a user message after the system", NULL});
    check_refused(
        TOKENIZER_CHAT_LLAMA3, conversation + 2, 2, tools, 2,
        (const char *const[]){"message 0 must be a user message", "not 'assistant'", NULL});
    /* Llama 2: a run of tool messages is a user turn. */
    check_refused(
        TOKENIZER_CHAT_LLAMA2,
        (const struct tokenizer_chat_message[]){conversation[1], conversation[3]}, 2, NULL, 0,
        (const char *const[]){"message 1 has role 'tool'", "'assistant' was expected", NULL});
    /* Mistral: calls and results are not counted, the rest alternates. */
    check_refused(
        TOKENIZER_CHAT_MISTRAL,
        (const struct tokenizer_chat_message[]){conversation[1], conversation[2], conversation[3],
                                                conversation[6]},
        4, tools, 2,
        (const char *const[]){"message 3 has role 'user'", "'assistant' was expected", NULL});
}

/* ---- the model's side ---- */

static void check_formats(void) {
    static const char *const triggers[] = {"<tool_call>", "<tool_call>",  "{\"name\"",
                                           "<tool_call>", "[TOOL_CALLS]", "<tool_call>"};
    for (int f = TOKENIZER_CHAT_PLAIN; f <= TOKENIZER_CHAT_ZEPHYR; f++) {
        const struct tokenizer_tool_format *format =
            tokenizer_chat_tool_format((enum tokenizer_chat_template)f);
        CHECK(format && strcmp(format->trigger, triggers[f]) == 0);
        CHECK(format && format->trigger_at_start == (f == TOKENIZER_CHAT_LLAMA3));
    }
    CHECK(tokenizer_chat_tool_format((enum tokenizer_chat_template)99) == NULL);
    const struct tokenizer_tool_format *mistral =
        tokenizer_chat_tool_format(TOKENIZER_CHAT_MISTRAL);
    CHECK(strcmp(mistral->list_open, "[TOOL_CALLS] [") == 0 &&
          strcmp(mistral->list_close, "]") == 0);
    CHECK(strcmp(tokenizer_chat_tool_format(TOKENIZER_CHAT_LLAMA3)->arguments_key, "parameters") ==
          0);
}

/* find_tool_trigger(text) gives found and at. */
static void check_trigger(enum tokenizer_chat_template family, const char *text, int found,
                          size_t at) {
    size_t got = 12345;
    int rc = tokenizer_chat_find_tool_trigger(family, text, strlen(text), &got);
    CHECK_MSG(rc == found && got == at, "%s trigger in \"%s\": %d at %zu, expected %d at %zu",
              tokenizer_chat_template_name(family), text, rc, got, found, at);
}

static void check_triggers(void) {
    check_trigger(TOKENIZER_CHAT_CHATML, "Let me check.\n<tool_call>\n{", 1, 14);
    check_trigger(TOKENIZER_CHAT_CHATML, "Let me check.\n<tool_", 0, 14);
    check_trigger(TOKENIZER_CHAT_CHATML, "a < b", 0, 5);
    check_trigger(TOKENIZER_CHAT_CHATML, "a <", 0, 2);
    check_trigger(TOKENIZER_CHAT_CHATML, "", 0, 0);
    check_trigger(TOKENIZER_CHAT_MISTRAL, "[TOOL_CALLS] [", 1, 0);
    check_trigger(TOKENIZER_CHAT_MISTRAL, "Sure [TOOL", 0, 5);
    /* Llama 3: only at the start, after whitespace and <|python_tag|>. */
    check_trigger(TOKENIZER_CHAT_LLAMA3, "", 0, 0);
    check_trigger(TOKENIZER_CHAT_LLAMA3, " \n{\"na", 0, 0);
    check_trigger(TOKENIZER_CHAT_LLAMA3, "<|python", 0, 0);
    check_trigger(TOKENIZER_CHAT_LLAMA3, " {\"name\": \"f\"", 1, 1);
    check_trigger(TOKENIZER_CHAT_LLAMA3, "<|python_tag|> {\"name\"", 1, 0);
    check_trigger(TOKENIZER_CHAT_LLAMA3, "{\"value\": 1}", 0, 12);
    check_trigger(TOKENIZER_CHAT_LLAMA3, "Use {\"name\": \"f\"}", 0, 17);
}

/* One expected call: name, compact arguments, id (NULL for none). */
struct expected_call {
    const char *name, *arguments, *id;
};

static void check_parse(enum tokenizer_chat_template family, const char *text, const char *content,
                        const struct expected_call *expected, int n_expected) {
    struct tokenizer_parsed_calls got;
    char err[256] = "";
    const char *name = tokenizer_chat_template_name(family);
    int rc = tokenizer_chat_parse_tool_calls(family, text, strlen(text), &got, err, sizeof(err));
    CHECK_MSG(rc == 0, "%s: parse \"%s\": %s", name, text, err);
    CHECK_MSG(got.n_calls == n_expected, "%s: \"%s\" gave %d calls, expected %d", name, text,
              got.n_calls, n_expected);
    CHECK_MSG(got.content_len == strlen(content) && strncmp(text, content, got.content_len) == 0,
              "%s: \"%s\" has content \"%.*s\", expected \"%s\"", name, text, (int)got.content_len,
              text, content);
    CHECK(n_expected > 0 || got.calls_offset == strlen(text));
    for (int i = 0; i < got.n_calls && i < n_expected; i++) {
        const struct tokenizer_parsed_call *c = &got.calls[i];
        CHECK_MSG(strcmp(c->name, expected[i].name) == 0, "%s call %d name %s", name, i, c->name);
        CHECK_MSG(strcmp(c->arguments, expected[i].arguments) == 0,
                  "%s call %d arguments %s, expected %s", name, i, c->arguments,
                  expected[i].arguments);
        CHECK_MSG(expected[i].id ? c->id && strcmp(c->id, expected[i].id) == 0 : !c->id,
                  "%s call %d id %s", name, i, c->id ? c->id : "(none)");
    }
    tokenizer_parsed_calls_free(&got);
    CHECK(got.calls == NULL && got.n_calls == 0);
}

static void check_parse_valid(void) {
    const struct expected_call paris[1] = {{"get_weather", "{\"city\":\"Paris\"}", NULL}};
    const struct expected_call two[2] = {{"get_weather", "{\"city\":\"Paris\"}", NULL},
                                         {"get_time", "{\"tz\":[1,2.50,\"\\u0001\"]}", NULL}};
    check_parse(TOKENIZER_CHAT_CHATML,
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                "</tool_call>",
                "", paris, 1);
    check_parse(TOKENIZER_CHAT_CHATML,
                "Let me check.\n\n<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":"
                "\"Paris\"}}</tool_call> <tool_call>\n {\"arguments\": {\"tz\": [1, 2.50, "
                "\"\\u0001\"]}, \"name\": \"get_time\", \"extra\": 1}\n</tool_call>\n",
                "Let me check.", two, 2);
    check_parse(TOKENIZER_CHAT_CHATML, "No calls here.", "No calls here.", NULL, 0);
    check_parse(TOKENIZER_CHAT_ZEPHYR, "<tool_call>{\"name\": \"get_weather\"}</tool_call>", "",
                (const struct expected_call[]){{"get_weather", "{}", NULL}}, 1);
    check_parse(TOKENIZER_CHAT_MISTRAL,
                "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, "
                "\"id\": \"a1b2c3d4e\"}, {\"name\": \"get_time\", \"arguments\": {\"tz\": [1, "
                "2.50, \"\\u0001\"]}}]",
                "",
                (const struct expected_call[]){{"get_weather", "{\"city\":\"Paris\"}", "a1b2c3d4e"},
                                               two[1]},
                2);
    check_parse(TOKENIZER_CHAT_LLAMA3,
                "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": "
                "\"get_time\", \"arguments\": {\"tz\": [1, 2.50, \"\\u0001\"]}}",
                "", two, 2);
    check_parse(TOKENIZER_CHAT_LLAMA3,
                "\n<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": "
                "\"Paris\"}}\n",
                "", paris, 1);
    check_parse(TOKENIZER_CHAT_LLAMA3, "The answer is {\"name\": 1}.",
                "The answer is {\"name\": 1}.", NULL, 0);
}

/* Parsing text fails with a message containing each of parts. */
static void check_parse_refused(enum tokenizer_chat_template family, const char *text,
                                const char *const *parts) {
    struct tokenizer_parsed_calls got;
    char err[256] = "";
    int rc = tokenizer_chat_parse_tool_calls(family, text, strlen(text), &got, err, sizeof(err));
    CHECK_MSG(rc == -1 && got.n_calls == 0 && got.calls == NULL, "\"%s\" parsed", text);
    for (int i = 0; parts[i]; i++)
        CHECK_MSG(strstr(err, parts[i]) != NULL, "error \"%s\" lacks \"%s\"", err, parts[i]);
    tokenizer_parsed_calls_free(&got);
}

static void check_parse_invalid(void) {
    check_parse_refused(
        TOKENIZER_CHAT_CHATML,
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call>",
        (const char *const[]){"tool calls (chatml): call 0: not valid JSON", "at byte 12", NULL});
    check_parse_refused(TOKENIZER_CHAT_CHATML,
                        "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n<tool_call>"
                        "{\"arguments\": {}}</tool_call>",
                        (const char *const[]){"call 1: no \"name\" string", NULL});
    check_parse_refused(TOKENIZER_CHAT_PLAIN,
                        "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>",
                        (const char *const[]){"call 0: \"arguments\" is not a JSON object", NULL});
    check_parse_refused(TOKENIZER_CHAT_PLAIN, "<tool_call>{\"name\": \"f\"} and more",
                        (const char *const[]){"call 0: expected \"</tool_call>\"", NULL});
    check_parse_refused(TOKENIZER_CHAT_CHATML,
                        "<tool_call>\n{\"name\": \"f\"}\n</tool_call>\nDone.",
                        (const char *const[]){"text after the tool calls", "at byte 39", NULL});
    check_parse_refused(TOKENIZER_CHAT_MISTRAL, "[TOOL_CALLS] []",
                        (const char *const[]){"call 0: not a JSON object", NULL});
    check_parse_refused(TOKENIZER_CHAT_MISTRAL, "[TOOL_CALLS] {\"name\": \"f\"}",
                        (const char *const[]){"expected \"[TOOL_CALLS] [\"", NULL});
    check_parse_refused(TOKENIZER_CHAT_MISTRAL, "[TOOL_CALLS] [{\"name\": \"f\"}",
                        (const char *const[]){"expected \"]\"", NULL});
    /* cJSON takes +1; JSON does not. */
    check_parse_refused(TOKENIZER_CHAT_LLAMA3, "{\"name\": \"f\", \"parameters\": {\"a\": +1}}",
                        (const char *const[]){"call 0: not valid JSON", NULL});
    check_parse_refused(TOKENIZER_CHAT_LLAMA3, "{\"name\": \"f\"}; {\"name\": 2}",
                        (const char *const[]){"call 1: no \"name\" string", NULL});
    struct tokenizer_parsed_calls got;
    char err[128];
    CHECK(tokenizer_chat_parse_tool_calls((enum tokenizer_chat_template)7, "x", 1, &got, err,
                                          sizeof(err)) == -1);
    CHECK(strstr(err, "7 is not a template family") != NULL);
}

/* Each family's rendered assistant calls parse back to the calls. */
static void check_round_trip(void) {
    static const char *const tails[] = {"\n",           " </s>", "<|eot_id|>",
                                        "<|im_end|>\n", "</s>",  "</s>\n"};
    const struct tokenizer_chat_message m[2] = {
        {.role = "user", .content = QUESTION},
        {.role = "assistant", .content = "Let me check.", .tool_calls = calls, .n_tool_calls = 2}};
    int passed = 0;
    for (int f = TOKENIZER_CHAT_PLAIN; f <= TOKENIZER_CHAT_ZEPHYR; f++) {
        enum tokenizer_chat_template family = (enum tokenizer_chat_template)f;
        const char *name = tokenizer_chat_template_name(family);
        int drops_content = family == TOKENIZER_CHAT_LLAMA3 || family == TOKENIZER_CHAT_MISTRAL;
        char *prompt = render(family, m, 1, tools, 2, 1, "<s>", "</s>");
        char *whole = render(family, m, 2, tools, 2, 0, "<s>", "</s>");
        size_t start = prompt ? strlen(prompt) : 0, len = whole ? strlen(whole) : 0;
        size_t tail = strlen(tails[f]);
        int framed = prompt && whole && strncmp(prompt, whole, start) == 0 && len >= start + tail &&
                     strcmp(whole + len - tail, tails[f]) == 0;
        CHECK_MSG(framed, "%s: the assistant turn is not prompt + answer + \"%s\"", name, tails[f]);
        if (framed) {
            const struct expected_call expected[2] = {
                {"get_weather", "{\"city\":\"Paris\"}",
                 f == TOKENIZER_CHAT_MISTRAL ? "call00001" : NULL},
                {"get_weather", "{\"city\":\"Oslo\",\"unit\":\"celsius\"}",
                 f == TOKENIZER_CHAT_MISTRAL ? "call00002" : NULL}};
            whole[len - tail] = '\0';
            const char *answer = whole + start;
            /* Plain and Llama 2 write a space before the answer. */
            int spaced = family == TOKENIZER_CHAT_PLAIN || family == TOKENIZER_CHAT_LLAMA2;
            int failures = test_failures;
            check_parse(family, answer,
                        drops_content ? ""
                        : spaced      ? " Let me check."
                                      : "Let me check.",
                        expected, 2);
            passed += test_failures == failures;
        }
        free(prompt);
        free(whole);
    }
    printf("round trip: %d/6 families parse their rendered calls back\n", passed);
}

/* Every prefix of text (a family's calls from its trigger on) scans to
 * calls whose names, once set, are the parsed ones and whose minified
 * arguments so far are prefixes of the parsed arguments; the whole text
 * scans to the parsed calls exactly, every one done. */
static void check_scan(enum tokenizer_chat_template family, const char *text) {
    struct tokenizer_parsed_calls parsed = {0};
    struct tokenizer_call_progress calls[4];
    char err[200], args[512];
    size_t len = strlen(text), at = 0;
    CHECK_MSG(tokenizer_chat_parse_tool_calls(family, text, len, &parsed, err, sizeof(err)) == 0,
              "%s", err);
    CHECK(tokenizer_chat_find_tool_trigger(family, text, len, &at) == 1);
    for (size_t end = at; end <= len; end++) {
        int n = tokenizer_chat_scan_tool_calls(family, text, end, at, calls, 4);
        CHECK_MSG(n <= parsed.n_calls, "prefix %zu: %d calls", end, n);
        for (int i = 0; i < n && i < parsed.n_calls; i++) {
            const struct tokenizer_parsed_call *want = &parsed.calls[i];
            CHECK_MSG(!calls[i].name[0] || !strcmp(calls[i].name, want->name),
                      "prefix %zu: call %d named %s", end, i, calls[i].name);
            size_t got = 0;
            if (calls[i].arguments_start && calls[i].arguments_end > calls[i].arguments_start)
                got =
                    tokenizer_json_minify(text + calls[i].arguments_start,
                                          calls[i].arguments_end - calls[i].arguments_start, args);
            CHECK_MSG(got <= strlen(want->arguments) && !memcmp(args, want->arguments, got),
                      "prefix %zu: call %d arguments '%.*s' are not a prefix of '%s'", end, i,
                      (int)got, args, want->arguments);
            if (end == len)
                CHECK_MSG(calls[i].done && calls[i].arguments_done &&
                              got == strlen(want->arguments),
                          "whole: call %d not done, or '%.*s' for '%s'", i, (int)got, args,
                          want->arguments);
        }
        if (end == len) CHECK_MSG(n == parsed.n_calls, "whole: %d of %d calls", n, parsed.n_calls);
    }
    tokenizer_parsed_calls_free(&parsed);
}

static void check_scans(void) {
    check_scan(
        TOKENIZER_CHAT_CHATML,
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa \\\"ris\", "
        "\"n\": [1, 2.50, {\"x\": []}]}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\","
        " \"arguments\": {\"tz\": \"\\u00e9\"}}\n</tool_call>");
    check_scan(TOKENIZER_CHAT_MISTRAL,
               "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
               "{\"name\": \"get_time\", \"arguments\": {\"tz\": [1, 2]}}]");
    check_scan(TOKENIZER_CHAT_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": "
                                      "\"Paris\"}}; {\"name\": \"get_time\", \"parameters\": {}}");
}

int main(void) {
    check_families();
    check_without_tools();
    check_prefixes();
    check_json();
    check_errors();
    check_formats();
    check_triggers();
    check_parse_valid();
    check_scans();
    check_parse_invalid();
    check_round_trip();
    return test_status("test_chat_tools");
}
