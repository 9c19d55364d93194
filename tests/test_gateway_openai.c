/* test_gateway_openai.c -- the gateway's OpenAI JSON layer.
 *
 * Requests: every field parsed with its type and default, JSON null read as
 * absent, each prompt form, the omitted model, the fields accepted and
 * ignored, the values of unimplemented fields that ask for nothing; every
 * refusal (unrecognized and unimplemented fields among them) checked for
 * its status, type, param and exact message. Responses: every body parsed back with cJSON and
 * checked field by field, including texts with quotes, newlines, control
 * characters, non-ASCII UTF-8 and bytes that are not UTF-8. */
#include "gateway/openai.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int parse(const char *body, enum openai_kind kind, struct openai_request *request,
                 struct openai_error *error) {
    return openai_parse_request(body, strlen(body), kind, request, error);
}

static int same_string(const char *a, const char *b) {
    return a != NULL && b != NULL && strcmp(a, b) == 0;
}

/* ------------------------------ requests -------------------------------- */

static void test_chat_every_field(void) {
    const char *body =
        "{\"model\":\"kjv2m\",\"messages\":["
        "{\"role\":\"system\",\"content\":\"Be brief.\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hello, \"},"
        "{\"type\":\"text\",\"text\":\"w\\u00f6rld\\n\"}]},"
        "{\"role\":\"assistant\",\"content\":null,\"name\":\"x\"},"
        "{\"role\":\"developer\",\"content\":\"\"}],"
        "\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"max_tokens\":50,\"max_completion_tokens\":7,\"temperature\":0.5,\"top_p\":0.9,"
        "\"top_k\":40,\"min_p\":0.05,\"seed\":-1,\"stop\":[\"\\n\\n\",\"END\"],"
        "\"presence_penalty\":0.5,\"frequency_penalty\":-1.5,\"repetition_penalty\":1.1,"
        "\"ignore_eos\":true,\"logprobs\":true,\"top_logprobs\":5,\"n\":1,\"user\":\"u1\"}";
    struct openai_request r;
    struct openai_error e;
    CHECK(parse(body, OPENAI_CHAT, &r, &e) == 0);
    CHECK(r.kind == OPENAI_CHAT);
    CHECK(same_string(r.model, "kjv2m"));
    CHECK(r.n_messages == 4);
    if (r.n_messages == 4) {
        CHECK(same_string(r.messages[0].role, "system"));
        CHECK(same_string(r.messages[0].content, "Be brief."));
        CHECK(same_string(r.messages[1].role, "user"));
        CHECK(same_string(r.messages[1].content, "Hello, w\xC3\xB6rld\n"));
        CHECK(same_string(r.messages[2].role, "assistant"));
        CHECK(same_string(r.messages[2].content, ""));
        CHECK(same_string(r.messages[3].role, "developer"));
        CHECK(same_string(r.messages[3].content, ""));
    }
    CHECK(r.prompt == NULL && r.prompt_tokens == NULL && r.n_prompt_tokens == 0);
    CHECK(r.stream == 1 && r.include_usage == 1);
    CHECK(r.max_tokens == 7); /* max_completion_tokens wins over max_tokens */
    CHECK(r.temperature == 0.5f && r.top_p == 0.9f && r.top_k == 40 && r.min_p == 0.05f);
    CHECK(r.has_seed == 1 && r.seed == UINT64_MAX);
    CHECK(r.n_stops == 2);
    if (r.n_stops == 2) CHECK(same_string(r.stops[0], "\n\n") && same_string(r.stops[1], "END"));
    CHECK(r.presence_penalty == 0.5f && r.frequency_penalty == -1.5f);
    CHECK(r.repetition_penalty == 1.1f && r.ignore_eos == 1);
    CHECK(r.logprobs == 1 && r.top_logprobs == 5);
    openai_request_free(&r);
    CHECK(r.model == NULL && r.messages == NULL && r.n_messages == 0);
}

static void check_defaults(const struct openai_request *r) {
    CHECK(r->stream == 0 && r->include_usage == 0);
    CHECK(r->max_tokens == -1);
    CHECK(r->temperature == 1.0f && r->top_p == 1.0f && r->top_k == 0 && r->min_p == 0.0f);
    CHECK(r->has_seed == 0 && r->seed == 0);
    CHECK(r->n_stops == 0);
    CHECK(r->presence_penalty == 0.0f && r->frequency_penalty == 0.0f);
    CHECK(r->repetition_penalty == 1.0f && r->ignore_eos == 0);
    CHECK(r->logprobs == 0 && r->top_logprobs == 0);
}

static void test_chat_defaults_and_nulls(void) {
    struct openai_request r;
    struct openai_error e;
    CHECK(parse("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                OPENAI_CHAT, &r, &e) == 0);
    CHECK(r.n_messages == 1 && same_string(r.model, "m"));
    check_defaults(&r);
    openai_request_free(&r);

    /* Clients send null for "not set": every field reads as absent. */
    const char *nulls =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":null,"
        "\"stream_options\":null,\"max_tokens\":null,\"max_completion_tokens\":null,"
        "\"temperature\":null,\"top_p\":null,\"top_k\":null,\"min_p\":null,\"seed\":null,"
        "\"stop\":null,\"presence_penalty\":null,\"frequency_penalty\":null,"
        "\"repetition_penalty\":null,\"ignore_eos\":null,\"logprobs\":null,\"top_logprobs\":null,"
        "\"n\":null,\"user\":null,\"tools\":null,\"tool_choice\":null,\"functions\":null,"
        "\"function_call\":null,\"response_format\":null,\"logit_bias\":null,\"modalities\":null,"
        "\"audio\":null,\"prediction\":null,\"web_search_options\":null,"
        "\"reasoning_effort\":null,\"verbosity\":null,\"no_such_field\":null}";
    CHECK(parse(nulls, OPENAI_CHAT, &r, &e) == 0);
    check_defaults(&r);
    openai_request_free(&r);

    CHECK(parse("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                "\"stream\":false,\"stream_options\":null,\"top_k\":-1,"
                "\"seed\":18446744073709551615,\"stop\":[],\"logprobs\":false,\"max_tokens\":3}",
                OPENAI_CHAT, &r, &e) == 0);
    CHECK(r.stream == 0 && r.include_usage == 0);
    CHECK(r.top_k == 0);
    CHECK(r.has_seed == 1 && r.seed == UINT64_MAX);
    CHECK(r.n_stops == 0 && r.logprobs == 0 && r.max_tokens == 3);
    openai_request_free(&r);
}

static void test_completion_prompts(void) {
    struct openai_request r;
    struct openai_error e;
    CHECK(parse("{\"model\":\"m\",\"prompt\":\"In the beginning\",\"logprobs\":3,\"stop\":\"\\n\","
                "\"echo\":false,\"seed\":42,\"stream\":true,"
                "\"stream_options\":{\"include_usage\":true},\"max_tokens\":9,\"temperature\":0.25,"
                "\"top_p\":0.5,\"top_k\":3,\"min_p\":0.125,\"presence_penalty\":1,"
                "\"frequency_penalty\":-1,\"repetition_penalty\":1.5,\"ignore_eos\":true,\"n\":1,"
                "\"user\":\"u\"}",
                OPENAI_COMPLETION, &r, &e) == 0);
    CHECK(r.kind == OPENAI_COMPLETION);
    CHECK(same_string(r.prompt, "In the beginning") && r.prompt_tokens == NULL);
    CHECK(r.n_messages == 0 && r.messages == NULL);
    CHECK(r.logprobs == 1 && r.top_logprobs == 3);
    CHECK(r.n_stops == 1 && same_string(r.stops[0], "\n"));
    CHECK(r.stream == 1 && r.include_usage == 1 && r.max_tokens == 9);
    CHECK(r.temperature == 0.25f && r.top_p == 0.5f && r.top_k == 3 && r.min_p == 0.125f);
    CHECK(r.presence_penalty == 1.0f && r.frequency_penalty == -1.0f);
    CHECK(r.repetition_penalty == 1.5f && r.ignore_eos == 1);
    CHECK(r.has_seed == 1 && r.seed == 42);
    openai_request_free(&r);

    CHECK(parse("{\"model\":\"m\",\"prompt\":[\"one\"],\"logprobs\":0}", OPENAI_COMPLETION, &r,
                &e) == 0);
    CHECK(same_string(r.prompt, "one") && r.logprobs == 1 && r.top_logprobs == 0);
    openai_request_free(&r);

    CHECK(parse("{\"model\":\"m\",\"prompt\":\"\"}", OPENAI_COMPLETION, &r, &e) == 0);
    CHECK(same_string(r.prompt, "") && r.logprobs == 0);
    check_defaults(&r);
    openai_request_free(&r);

    CHECK(parse("{\"model\":\"m\",\"prompt\":[1,2,2147483647]}", OPENAI_COMPLETION, &r, &e) == 0);
    CHECK(r.prompt == NULL && r.n_prompt_tokens == 3);
    if (r.n_prompt_tokens == 3)
        CHECK(r.prompt_tokens[0] == 1 && r.prompt_tokens[1] == 2 &&
              r.prompt_tokens[2] == 2147483647);
    openai_request_free(&r);

    CHECK(parse("{\"model\":\"m\",\"prompt\":[[4,0]]}", OPENAI_COMPLETION, &r, &e) == 0);
    CHECK(r.n_prompt_tokens == 2);
    if (r.n_prompt_tokens == 2) CHECK(r.prompt_tokens[0] == 4 && r.prompt_tokens[1] == 0);
    openai_request_free(&r);

    /* The body need not be NUL-terminated: only len bytes are read. */
    const char buffer[] = "{\"model\":\"m\",\"prompt\":\"x\"}GARBAGE";
    CHECK(openai_parse_request(buffer, strlen(buffer) - 7, OPENAI_COMPLETION, &r, &e) == 0);
    CHECK(same_string(r.prompt, "x"));
    openai_request_free(&r);

    /* Whitespace around the object is fine. */
    CHECK(parse(" \r\n\t{\"model\":\"m\",\"prompt\":\"x\"} \n", OPENAI_COMPLETION, &r, &e) == 0);
    openai_request_free(&r);
}

/* One refused body and the error it must produce. */
struct refusal {
    enum openai_kind kind;
    const char *body;
    const char *param;   /* "" for none */
    const char *message; /* exact */
};

#define E5        "\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9" /* five 2-byte characters */
#define CHAT_HEAD "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
#define CMPL_HEAD "{\"model\":\"m\",\"prompt\":\"p\","

static const struct refusal refusals[] = {
    {OPENAI_CHAT, "", "", "the request body is empty; expected a JSON object"},
    {OPENAI_CHAT, "{\"model\": \"m\",\n  \"messages\": [}", "",
     "the request body is not valid JSON: error at line 2, column 16 (byte 30)"},
    {OPENAI_CHAT, "{\"model\": \"m\"", "",
     "the request body is not valid JSON: error at line 1, column 13 (byte 12)"},
    {OPENAI_CHAT, "[1,2]", "", "the request body must be a JSON object"},
    {OPENAI_CHAT, "{} x", "",
     "the request body has unexpected data after the JSON value: error at line 1, column 4 "
     "(byte 3)"},
    {OPENAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\\ud800\"}]}",
     "", "the request body is not valid JSON: error at line 1, column 52 (byte 51)"},
    {OPENAI_CHAT, "{\"messages\":[]}", "messages", "messages must not be empty"},
    {OPENAI_CHAT, "{\"model\":null}", "messages", "messages is required"},
    {OPENAI_CHAT, "{\"model\":5}", "model", "model must be a string"},
    {OPENAI_CHAT, "{\"model\":\"\"}", "model", "model must not be empty"},
    {OPENAI_CHAT, "{\"model\":\"m\"}", "messages", "messages is required"},
    {OPENAI_CHAT, "{\"model\":\"m\",\"messages\":{}}", "messages",
     "messages must be an array of message objects"},
    {OPENAI_CHAT, "{\"model\":\"m\",\"messages\":[]}", "messages", "messages must not be empty"},
    {OPENAI_CHAT, "{\"model\":\"m\",\"messages\":[1]}", "messages[0]",
     "messages[0] must be an object"},
    {OPENAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"content\":\"x\"}]}", "messages[0].role",
     "messages[0].role is required"},
    {OPENAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":3}]}", "messages[0].role",
     "messages[0].role must be a string"},
    {OPENAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}",
     "messages[0].role",
     "messages[0].role must be one of system, developer, user, assistant; got \"tool\""},
    /* A client's string in a message is escaped to one line and cut short. */
    {OPENAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"a\\\"b\\\\c\\n\\u0001\"}]}",
     "messages[0].role",
     "messages[0].role must be one of system, developer, user, assistant; got "
     "\"a\\\"b\\\\c\\u000a\\u0001\""},
    {OPENAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"" E5 E5 E5 E5 E5 "\"}]}",
     "messages[0].role",
     "messages[0].role must be one of system, developer, user, assistant; got \"" E5 E5 E5 E5
     "...\""},
    {OPENAI_CHAT,
     "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\"}]}",
     "messages[1].content", "messages[1].content is required"},
    {OPENAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":5}]}",
     "messages[0].content", "messages[0].content must be a string or an array of text parts"},
    {OPENAI_CHAT,
     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
     "\"image_url\":{}}]}]}",
     "messages[0].content[0].type",
     "messages[0].content[0].type must be \"text\" (only text content is supported), got "
     "\"image_url\""},
    {OPENAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[\"x\"]}]}",
     "messages[0].content[0]", "messages[0].content[0] must be an object"},
    {OPENAI_CHAT,
     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
     "messages[0].content[0].text", "messages[0].content[0].text must be a string"},
    {OPENAI_CHAT,
     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"a\"}]}]}",
     "messages[0].content[0].type", "messages[0].content[0].type must be a string"},
    {OPENAI_CHAT, CHAT_HEAD "\"temperature\":\"0.5\"}", "temperature",
     "temperature must be a number"},
    {OPENAI_CHAT, CHAT_HEAD "\"temperature\":2.5}", "temperature",
     "temperature must be between 0 and 2, got 2.5"},
    {OPENAI_CHAT, CHAT_HEAD "\"temperature\":1e999}", "temperature",
     "temperature must be between 0 and 2, got inf"},
    {OPENAI_CHAT, CHAT_HEAD "\"top_p\":1.5}", "top_p", "top_p must be between 0 and 1, got 1.5"},
    {OPENAI_CHAT, CHAT_HEAD "\"top_k\":2.5}", "top_k", "top_k must be an integer"},
    {OPENAI_CHAT, CHAT_HEAD "\"top_k\":-2}", "top_k",
     "top_k must be between -1 and 2147483647, got -2"},
    {OPENAI_CHAT, CHAT_HEAD "\"min_p\":-0.1}", "min_p", "min_p must be between 0 and 1, got -0.1"},
    {OPENAI_CHAT, CHAT_HEAD "\"presence_penalty\":3}", "presence_penalty",
     "presence_penalty must be between -2 and 2, got 3"},
    {OPENAI_CHAT, CHAT_HEAD "\"frequency_penalty\":true}", "frequency_penalty",
     "frequency_penalty must be a number"},
    {OPENAI_CHAT, CHAT_HEAD "\"repetition_penalty\":0}", "repetition_penalty",
     "repetition_penalty must be greater than 0, got 0"},
    {OPENAI_CHAT, CHAT_HEAD "\"repetition_penalty\":-1}", "repetition_penalty",
     "repetition_penalty must be greater than 0, got -1"},
    {OPENAI_CHAT, CHAT_HEAD "\"ignore_eos\":1}", "ignore_eos", "ignore_eos must be a boolean"},
    {OPENAI_CHAT, CHAT_HEAD "\"max_tokens\":0}", "max_tokens",
     "max_tokens must be between 1 and 2147483647, got 0"},
    {OPENAI_CHAT, CHAT_HEAD "\"max_tokens\":\"10\"}", "max_tokens",
     "max_tokens must be an integer"},
    {OPENAI_CHAT, CHAT_HEAD "\"max_tokens\":3000000000}", "max_tokens",
     "max_tokens must be between 1 and 2147483647, got 3000000000"},
    {OPENAI_CHAT, CHAT_HEAD "\"max_completion_tokens\":1.5}", "max_completion_tokens",
     "max_completion_tokens must be an integer"},
    {OPENAI_CHAT, CHAT_HEAD "\"stream\":\"yes\"}", "stream", "stream must be a boolean"},
    {OPENAI_CHAT, CHAT_HEAD "\"stream_options\":1}", "stream_options",
     "stream_options must be an object"},
    {OPENAI_CHAT, CHAT_HEAD "\"stream_options\":{\"include_usage\":1}}",
     "stream_options.include_usage", "stream_options.include_usage must be a boolean"},
    {OPENAI_CHAT, CHAT_HEAD "\"seed\":1.5}", "seed", "seed must be an integer"},
    {OPENAI_CHAT, CHAT_HEAD "\"seed\":\"1\"}", "seed", "seed must be an integer"},
    {OPENAI_CHAT, CHAT_HEAD "\"seed\":1e20}", "seed",
     "seed must be between -9223372036854775808 and 18446744073709551615, got 1e+20"},
    {OPENAI_CHAT, CHAT_HEAD "\"stop\":\"\"}", "stop", "stop must not be empty"},
    {OPENAI_CHAT, CHAT_HEAD "\"stop\":[\"a\",\"\"]}", "stop[1]", "stop[1] must not be empty"},
    {OPENAI_CHAT, CHAT_HEAD "\"stop\":[1]}", "stop[0]", "stop[0] must be a string"},
    {OPENAI_CHAT,
     CHAT_HEAD "\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\","
               "\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
     "stop", "stop may hold at most 16 strings, got 17"},
    {OPENAI_CHAT, CHAT_HEAD "\"stop\":5}", "stop", "stop must be a string or an array of strings"},
    {OPENAI_CHAT, CHAT_HEAD "\"logprobs\":1}", "logprobs", "logprobs must be a boolean"},
    {OPENAI_CHAT, CHAT_HEAD "\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs",
     "top_logprobs must be between 0 and 20, got 21"},
    {OPENAI_CHAT, CHAT_HEAD "\"top_logprobs\":2}", "top_logprobs",
     "top_logprobs requires logprobs to be true"},
    {OPENAI_CHAT, CHAT_HEAD "\"n\":2}", "n", "only n=1 is supported, got n=2"},
    {OPENAI_CHAT, CHAT_HEAD "\"n\":0}", "n", "only n=1 is supported, got n=0"},
    {OPENAI_CHAT, CHAT_HEAD "\"n\":\"2\"}", "n", "n must be an integer"},
    {OPENAI_COMPLETION, "{\"model\":\"m\"}", "prompt", "prompt is required"},
    {OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":5}", "prompt",
     "prompt must be a string or an array of token ids"},
    {OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[]}", "prompt", "prompt must not be empty"},
    {OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"a\",\"b\"]}", "prompt",
     "only one prompt per request is supported, got 2"},
    {OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[1,-1]}", "prompt[1]",
     "prompt[1] must be between 0 and 2147483647, got -1"},
    {OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[1,\"a\"]}", "prompt[1]",
     "prompt[1] must be an integer"},
    {OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[[]]}", "prompt[0]",
     "prompt[0] must not be empty"},
    {OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[[1,null]]}", "prompt[0][1]",
     "prompt[0][1] must be an integer"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"logprobs\":true}", "logprobs", "logprobs must be an integer"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"logprobs\":21}", "logprobs",
     "logprobs must be between 0 and 20, got 21"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"echo\":true}", "echo", "echo=true is not supported"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"echo\":\"no\"}", "echo", "echo must be a boolean"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"n\":3}", "n",
     "only n=1 is supported, got n=3"}, /* stream_options only goes with a stream. */
    {OPENAI_CHAT, CHAT_HEAD "\"stream_options\":{\"include_usage\":true}}", "stream_options",
     "stream_options requires stream to be true"},
    {OPENAI_CHAT, CHAT_HEAD "\"stream\":false,\"stream_options\":{}}", "stream_options",
     "stream_options requires stream to be true"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"stream_options\":{\"include_usage\":false}}", "stream_options",
     "stream_options requires stream to be true"},
    /* Fields lockstep does not implement, with values that ask for something. */
    {OPENAI_CHAT, CHAT_HEAD "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
     "tools", "tools is not supported: lockstep does not call tools (omit it, or send [])"},
    {OPENAI_CHAT, CHAT_HEAD "\"tools\":{}}", "tools",
     "tools is not supported: lockstep does not call tools (omit it, or send [])"},
    {OPENAI_CHAT, CHAT_HEAD "\"tool_choice\":\"required\"}", "tool_choice",
     "tool_choice is not supported: lockstep does not call tools (only \"none\" and \"auto\" are "
     "accepted)"},
    {OPENAI_CHAT,
     CHAT_HEAD "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}}",
     "tool_choice",
     "tool_choice is not supported: lockstep does not call tools (only \"none\" and \"auto\" are "
     "accepted)"},
    {OPENAI_CHAT, CHAT_HEAD "\"functions\":[{\"name\":\"f\",\"parameters\":{}}]}", "functions",
     "functions is not supported: lockstep does not call functions (omit it, or send [])"},
    {OPENAI_CHAT, CHAT_HEAD "\"function_call\":{\"name\":\"f\"}}", "function_call",
     "function_call is not supported: lockstep does not call functions (only \"none\" and "
     "\"auto\" are accepted)"},
    {OPENAI_CHAT, CHAT_HEAD "\"response_format\":{\"type\":\"json_object\"}}", "response_format",
     "response_format is not supported: answers are free text (only {\"type\":\"text\"} is "
     "accepted)"},
    {OPENAI_CHAT,
     CHAT_HEAD "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\"}}}",
     "response_format",
     "response_format is not supported: answers are free text (only {\"type\":\"text\"} is "
     "accepted)"},
    {OPENAI_CHAT, CHAT_HEAD "\"response_format\":\"text\"}", "response_format",
     "response_format is not supported: answers are free text (only {\"type\":\"text\"} is "
     "accepted)"},
    {OPENAI_CHAT, CHAT_HEAD "\"logit_bias\":{\"50256\":-100}}", "logit_bias",
     "logit_bias is not supported (only an empty object {} is accepted)"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"logit_bias\":{\"7\":0}}", "logit_bias",
     "logit_bias is not supported (only an empty object {} is accepted)"},
    {OPENAI_CHAT, CHAT_HEAD "\"modalities\":[\"text\",\"audio\"]}", "modalities",
     "modalities is not supported: answers are text (only [\"text\"] is accepted)"},
    {OPENAI_CHAT, CHAT_HEAD "\"audio\":{\"voice\":\"alloy\",\"format\":\"wav\"}}", "audio",
     "audio is not supported: answers are text"},
    {OPENAI_CHAT, CHAT_HEAD "\"prediction\":{\"type\":\"content\",\"content\":\"x\"}}",
     "prediction", "prediction is not supported (no predicted outputs)"},
    {OPENAI_CHAT, CHAT_HEAD "\"web_search_options\":{}}", "web_search_options",
     "web_search_options is not supported: lockstep does not search the web"},
    {OPENAI_CHAT, CHAT_HEAD "\"reasoning_effort\":\"low\"}", "reasoning_effort",
     "reasoning_effort is not supported: lockstep does not steer reasoning"},
    {OPENAI_CHAT, CHAT_HEAD "\"verbosity\":\"low\"}", "verbosity",
     "verbosity is not supported: lockstep does not steer verbosity"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"best_of\":2}", "best_of",
     "best_of is not supported (only best_of=1 is accepted)"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"best_of\":\"1\"}", "best_of",
     "best_of is not supported (only best_of=1 is accepted)"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"suffix\":\"}\"}", "suffix",
     "suffix is not supported: text is only appended, never inserted (only \"\" is accepted)"},
    /* Refused before any field is read: the cause is named, not its effect. */
    {OPENAI_CHAT,
     "{\"model\":\"m\",\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}],\"tools\":[{}]}",
     "tools", "tools is not supported: lockstep does not call tools (omit it, or send [])"},
    /* Fields the endpoint does not have, as OpenAI answers them. */
    {OPENAI_CHAT, CHAT_HEAD "\"foo\":1}", "foo", "Unrecognized request argument supplied: foo"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"temprature\":0}", "temprature",
     "Unrecognized request argument supplied: temprature"},
    {OPENAI_CHAT, CHAT_HEAD "\"a\\\"b\\n\":[]}", "a\"b\n",
     "Unrecognized request argument supplied: a\\\"b\\u000a"},
    {OPENAI_CHAT, CHAT_HEAD "\"echo\":false}", "echo",
     "Unrecognized request argument supplied: echo (it is a field of /v1/completions)"},
    {OPENAI_CHAT, CHAT_HEAD "\"prompt\":\"x\"}", "prompt",
     "Unrecognized request argument supplied: prompt (it is a field of /v1/completions)"},
    {OPENAI_CHAT, CHAT_HEAD "\"best_of\":1}", "best_of",
     "Unrecognized request argument supplied: best_of (it is a field of /v1/completions)"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"max_completion_tokens\":5}", "max_completion_tokens",
     "Unrecognized request argument supplied: max_completion_tokens (it is a field of "
     "/v1/chat/completions)"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"top_logprobs\":2}", "top_logprobs",
     "Unrecognized request argument supplied: top_logprobs (it is a field of "
     "/v1/chat/completions)"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"messages\":[]}", "messages",
     "Unrecognized request argument supplied: messages (it is a field of /v1/chat/completions)"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"tools\":[]}", "tools",
     "Unrecognized request argument supplied: tools (it is a field of /v1/chat/completions)"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"metadata\":{}}", "metadata",
     "Unrecognized request argument supplied: metadata (it is a field of /v1/chat/completions)"},
    /* A field given twice: the readers would honour only the first. */
    {OPENAI_CHAT, CHAT_HEAD "\"temperature\":0,\"temperature\":2}", "temperature",
     "temperature is given more than once"},
    {OPENAI_CHAT, CHAT_HEAD "\"model\":\"other\"}", "model", "model is given more than once"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"user\":null,\"user\":\"u\"}", "user",
     "user is given more than once"},
};

/* model may be omitted (or null): the HTTP layer chooses the model. */
static void test_omitted_model(void) {
    struct openai_request r;
    struct openai_error e;
    CHECK(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", OPENAI_CHAT, &r, &e) ==
          0);
    CHECK(r.model == NULL && r.n_messages == 1);
    check_defaults(&r);
    openai_request_free(&r);

    CHECK(parse("{\"model\":null,\"prompt\":\"x\",\"stream\":true}", OPENAI_COMPLETION, &r, &e) ==
          0);
    CHECK(r.model == NULL && same_string(r.prompt, "x") && r.stream == 1);
    openai_request_free(&r);
}

/* Unimplemented fields whose value asks for nothing, and the fields that
 * are accepted and ignored, leave every default as it is. */
static void test_fields_that_change_nothing(void) {
    static const struct {
        enum openai_kind kind;
        const char *body;
    } accepted[] = {
        {OPENAI_CHAT,
         CHAT_HEAD "\"tools\":[],\"tool_choice\":\"none\",\"functions\":[],"
                   "\"function_call\":\"none\",\"response_format\":{\"type\":\"text\"},"
                   "\"logit_bias\":{},\"modalities\":[\"text\"]}"},
        {OPENAI_CHAT, CHAT_HEAD "\"tool_choice\":\"auto\",\"function_call\":\"auto\"}"},
        {OPENAI_CHAT,
         CHAT_HEAD "\"user\":\"u\",\"safety_identifier\":\"s\","
                   "\"metadata\":{\"k\":\"v\"},\"store\":true,\"service_tier\":\"auto\","
                   "\"prompt_cache_key\":\"c\",\"parallel_tool_calls\":false}"},
        {OPENAI_COMPLETION, CMPL_HEAD "\"best_of\":1,\"suffix\":\"\",\"logit_bias\":{},"
                                      "\"user\":\"u\"}"},
        {OPENAI_COMPLETION, CMPL_HEAD "\"best_of\":null,\"suffix\":null,\"tools\":null,"
                                      "\"unknown\":null}"},
    };
    for (size_t i = 0; i < sizeof(accepted) / sizeof(accepted[0]); i++) {
        struct openai_request r;
        struct openai_error e;
        int rc = parse(accepted[i].body, accepted[i].kind, &r, &e);
        CHECK_MSG(rc == 0, "case %zu refused: %s (param %s)", i, e.message, e.param);
        if (rc != 0) continue;
        CHECK(same_string(r.model, "m"));
        check_defaults(&r);
        openai_request_free(&r);
    }
}

static void test_refusals(void) {
    for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++) {
        const struct refusal *c = &refusals[i];
        struct openai_request r;
        struct openai_error e;
        int rc = parse(c->body, c->kind, &r, &e);
        CHECK_MSG(rc == -1, "case %zu accepted: %s", i, c->body);
        if (rc != -1) {
            openai_request_free(&r);
            continue;
        }
        CHECK_MSG(e.status == 400, "case %zu: status %d", i, e.status);
        CHECK_MSG(same_string(e.type, "invalid_request_error"), "case %zu: type %s", i,
                  e.type ? e.type : "(null)");
        CHECK_MSG(e.code == NULL, "case %zu: code %s", i, e.code);
        CHECK_MSG(strcmp(e.param, c->param) == 0, "case %zu: param \"%s\", want \"%s\"", i, e.param,
                  c->param);
        CHECK_MSG(strcmp(e.message, c->message) == 0, "case %zu: message \"%s\", want \"%s\"", i,
                  e.message, c->message);
        /* A refused request owns nothing. */
        CHECK(r.model == NULL && r.messages == NULL && r.prompt == NULL && r.n_stops == 0);
        openai_request_free(&r);
    }

    /* A NUL byte after the object is data, not the end of the body. */
    const char with_nul[] = "{\"model\":\"m\",\"prompt\":\"x\"}\0";
    struct openai_request r;
    struct openai_error e;
    CHECK(openai_parse_request(with_nul, sizeof(with_nul) - 1, OPENAI_COMPLETION, &r, &e) == -1);
    CHECK(same_string(e.message, "the request body has unexpected data after the JSON value: error "
                                 "at line 1, column 27 (byte 26)"));
    CHECK(openai_parse_request(NULL, 0, OPENAI_CHAT, &r, &e) == -1 && e.status == 400);
}

/* ------------------------------- errors --------------------------------- */

static cJSON *parse_json(const char *text) {
    cJSON *root = text != NULL ? cJSON_Parse(text) : NULL;
    CHECK_MSG(root != NULL, "not JSON: %s", text != NULL ? text : "(null)");
    return root;
}

static const cJSON *get(const cJSON *object, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(object, key);
}

static int is_string(const cJSON *item, const char *want) {
    return cJSON_IsString(item) && strcmp(item->valuestring, want) == 0;
}

static int is_number(const cJSON *item, double want) {
    return cJSON_IsNumber(item) && item->valuedouble == want;
}

static void test_error_json(void) {
    struct openai_error e;
    openai_error_set(&e, 404, "invalid_request_error", "model", "model_not_found",
                     "the model \"%s\" does not exist", "gpt\"5\n");
    CHECK(e.status == 404);
    char *text = openai_error_json(&e);
    cJSON *root = parse_json(text);
    const cJSON *error = get(root, "error");
    CHECK(cJSON_IsObject(error) && cJSON_GetArraySize(root) == 1);
    CHECK(cJSON_GetArraySize(error) == 4);
    CHECK(is_string(get(error, "message"), "the model \"gpt\"5\n\" does not exist"));
    CHECK(is_string(get(error, "type"), "invalid_request_error"));
    CHECK(is_string(get(error, "param"), "model"));
    CHECK(is_string(get(error, "code"), "model_not_found"));
    cJSON_Delete(root);
    free(text);

    /* A parse error: param and code null; a bad byte in the message is U+FFFD. */
    struct openai_request r;
    CHECK(parse("{\"model\":\"m\",\"messages\":[{\"role\":\"\xff\"}]}", OPENAI_CHAT, &r, &e) == -1);
    text = openai_error_json(&e);
    root = parse_json(text);
    error = get(root, "error");
    CHECK(is_string(get(error, "message"), "messages[0].role must be one of system, developer, "
                                           "user, assistant; got \"\xEF\xBF\xBD\""));
    CHECK(is_string(get(error, "param"), "messages[0].role"));
    CHECK(cJSON_IsNull(get(error, "code")));
    cJSON_Delete(root);
    free(text);

    CHECK(parse("{", OPENAI_CHAT, &r, &e) == -1);
    text = openai_error_json(&e);
    root = parse_json(text);
    error = get(root, "error");
    CHECK(cJSON_IsNull(get(error, "param")) && cJSON_IsNull(get(error, "code")));
    CHECK(is_string(get(error, "type"), "invalid_request_error"));
    cJSON_Delete(root);
    free(text);
}

/* ------------------------------ responses ------------------------------- */

/* Quotes, backslash, newline, tab, a control character, 2-, 3- and 4-byte UTF-8. */
static const char tricky[] = "He said \"hi\\\"\n\tthen \x01\x1f left: \xC3\xA9 \xE6\x97\xA5 "
                             "\xF0\x9F\x98\x80 end";

static const cJSON *first_choice(const cJSON *root) {
    const cJSON *choices = get(root, "choices");
    CHECK(cJSON_IsArray(choices) && cJSON_GetArraySize(choices) == 1);
    const cJSON *choice = cJSON_GetArrayItem(choices, 0);
    CHECK(is_number(get(choice, "index"), 0));
    return choice;
}

static void check_head(const cJSON *root, const char *id, const char *object) {
    CHECK(is_string(get(root, "id"), id));
    CHECK(is_string(get(root, "object"), object));
    CHECK(is_number(get(root, "created"), 1732900000));
    CHECK(is_string(get(root, "model"), "kjv2m"));
}

static void check_usage(const cJSON *usage, int prompt, int completion) {
    CHECK(cJSON_IsObject(usage) && cJSON_GetArraySize(usage) == 3);
    CHECK(is_number(get(usage, "prompt_tokens"), prompt));
    CHECK(is_number(get(usage, "completion_tokens"), completion));
    CHECK(is_number(get(usage, "total_tokens"), prompt + completion));
}

/* Escaping checks on the printed text itself: no raw control characters. */
static void check_printed(const char *text) {
    for (const unsigned char *p = (const unsigned char *)text; *p != '\0'; p++)
        CHECK_MSG(*p >= 0x20, "raw control byte 0x%02x in %s", *p, text);
}

static struct openai_response chat_response(int logprobs, int include_usage) {
    struct openai_response response = {OPENAI_CHAT, "chatcmpl-0123abcd", "kjv2m", 1732900000,
                                       logprobs,    include_usage};
    return response;
}

static void test_chat_completion(void) {
    struct openai_response response = chat_response(0, 0);
    struct openai_result result = {tricky, strlen(tricky), OPENAI_FINISH_STOP, {12, 5}, 0, NULL};
    char *text = openai_completion_json(&response, &result);
    check_printed(text);
    cJSON *root = parse_json(text);
    check_head(root, "chatcmpl-0123abcd", "chat.completion");
    const cJSON *choice = first_choice(root);
    const cJSON *message = get(choice, "message");
    CHECK(is_string(get(message, "role"), "assistant"));
    CHECK(is_string(get(message, "content"), tricky));
    CHECK(cJSON_IsNull(get(message, "refusal")));
    CHECK(cJSON_IsNull(get(choice, "logprobs")));
    CHECK(is_string(get(choice, "finish_reason"), "stop"));
    check_usage(get(root, "usage"), 12, 5);
    cJSON_Delete(root);
    free(text);

    /* Text that is not UTF-8: each ill-formed part becomes one U+FFFD, NUL too. */
    static const char bad[] = "\xff\xC3(\xE2\x82\xED\xA0\x80ok\0x\xF0\x9F\x98";
    result.text = bad;
    result.length = sizeof(bad) - 1;
    result.finish = OPENAI_FINISH_LENGTH;
    text = openai_completion_json(&response, &result);
    root = parse_json(text);
    choice = first_choice(root);
    CHECK(is_string(get(get(choice, "message"), "content"),
                    "\xEF\xBF\xBD\xEF\xBF\xBD(\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDok"
                    "\xEF\xBF\xBDx\xEF\xBF\xBD"));
    CHECK(is_string(get(choice, "finish_reason"), "length"));
    cJSON_Delete(root);
    free(text);

    /* A long text takes the allocated path of the UTF-8 copy. */
    char *long_text = malloc(3001);
    for (int i = 0; i < 3000; i++) long_text[i] = "ab\"\n\xC3\xA9"[i % 6];
    long_text[3000] = '\0';
    result.text = long_text;
    result.length = 3000;
    text = openai_completion_json(&response, &result);
    root = parse_json(text);
    CHECK(is_string(get(get(first_choice(root), "message"), "content"), long_text));
    cJSON_Delete(root);
    free(text);
    free(long_text);
}

/* Two tokens: "He" with alternatives, then the first two bytes of a
 * three-byte character with a logprob of -inf. */
static void fill_tokens(struct openai_token tokens[2]) {
    memset(tokens, 0, 2 * sizeof(tokens[0]));
    tokens[0].text = "He";
    tokens[0].length = 2;
    tokens[0].logprob = -0.123f;
    tokens[0].n_top = 2;
    tokens[0].top[0] = (struct openai_alternative){"He", 2, -0.123f};
    tokens[0].top[1] = (struct openai_alternative){"\"S\n", 3, -2.5f};
    tokens[1].text = "\xE6\x97";
    tokens[1].length = 2;
    tokens[1].logprob = -INFINITY;
}

static void check_bytes(const cJSON *bytes, const unsigned char *want, int n) {
    CHECK(cJSON_IsArray(bytes) && cJSON_GetArraySize(bytes) == n);
    for (int i = 0; i < n && i < cJSON_GetArraySize(bytes); i++)
        CHECK(is_number(cJSON_GetArrayItem(bytes, i), want[i]));
}

static void check_chat_logprobs(const cJSON *logprobs) {
    CHECK(cJSON_IsObject(logprobs) && cJSON_IsNull(get(logprobs, "refusal")));
    const cJSON *content = get(logprobs, "content");
    CHECK(cJSON_IsArray(content) && cJSON_GetArraySize(content) == 2);
    const cJSON *he = cJSON_GetArrayItem(content, 0), *partial = cJSON_GetArrayItem(content, 1);
    CHECK(is_string(get(he, "token"), "He"));
    CHECK(cJSON_IsNumber(get(he, "logprob")) && (float)get(he, "logprob")->valuedouble == -0.123f);
    check_bytes(get(he, "bytes"), (const unsigned char *)"He", 2);
    const cJSON *top = get(he, "top_logprobs");
    CHECK(cJSON_IsArray(top) && cJSON_GetArraySize(top) == 2);
    const cJSON *second = cJSON_GetArrayItem(top, 1);
    CHECK(is_string(get(second, "token"), "\"S\n"));
    CHECK(is_number(get(second, "logprob"), -2.5));
    check_bytes(get(second, "bytes"), (const unsigned char *)"\"S\n", 3);
    CHECK(cJSON_GetArraySize(cJSON_GetArrayItem(top, 0)) == 3); /* no nested top_logprobs */
    CHECK(is_string(get(partial, "token"), "\xEF\xBF\xBD"));
    CHECK(is_number(get(partial, "logprob"), OPENAI_LOGPROB_FLOOR));
    check_bytes(get(partial, "bytes"), (const unsigned char *)"\xE6\x97", 2);
    CHECK(cJSON_IsArray(get(partial, "top_logprobs")) &&
          cJSON_GetArraySize(get(partial, "top_logprobs")) == 0);
}

static void test_chat_logprobs(void) {
    struct openai_token tokens[2];
    fill_tokens(tokens);
    struct openai_response response = chat_response(1, 0);
    struct openai_result result = {"He\xE6\x97", 4, OPENAI_FINISH_LENGTH, {3, 2}, 2, tokens};
    char *text = openai_completion_json(&response, &result);
    /* Shortest float form: -0.123f prints as -0.123. */
    CHECK(text != NULL && strstr(text, "\"logprob\":-0.123,") != NULL);
    cJSON *root = parse_json(text);
    check_chat_logprobs(get(first_choice(root), "logprobs"));
    cJSON_Delete(root);
    free(text);
}

static void test_chat_chunks(void) {
    struct openai_token tokens[2];
    fill_tokens(tokens);
    struct openai_response response = chat_response(1, 1);

    struct openai_delta first = {1, "", 0, OPENAI_FINISH_NONE, 0, NULL, 0};
    char *text = openai_chunk_json(&response, &first);
    cJSON *root = parse_json(text);
    check_head(root, "chatcmpl-0123abcd", "chat.completion.chunk");
    const cJSON *choice = first_choice(root);
    const cJSON *delta = get(choice, "delta");
    CHECK(cJSON_GetArraySize(delta) == 2);
    CHECK(is_string(get(delta, "role"), "assistant") && is_string(get(delta, "content"), ""));
    CHECK(cJSON_IsNull(get(choice, "logprobs")) && cJSON_IsNull(get(choice, "finish_reason")));
    CHECK(cJSON_IsNull(get(root, "usage")));
    cJSON_Delete(root);
    free(text);

    struct openai_delta middle = {0, tricky, strlen(tricky), OPENAI_FINISH_NONE, 2, tokens, 0};
    text = openai_chunk_json(&response, &middle);
    check_printed(text);
    root = parse_json(text);
    choice = first_choice(root);
    delta = get(choice, "delta");
    CHECK(cJSON_GetArraySize(delta) == 1 && is_string(get(delta, "content"), tricky));
    check_chat_logprobs(get(choice, "logprobs"));
    CHECK(cJSON_IsNull(get(choice, "finish_reason")) && cJSON_IsNull(get(root, "usage")));
    cJSON_Delete(root);
    free(text);

    struct openai_delta last = {0, NULL, 0, OPENAI_FINISH_STOP, 0, NULL, 0};
    text = openai_chunk_json(&response, &last);
    root = parse_json(text);
    choice = first_choice(root);
    CHECK(cJSON_IsObject(get(choice, "delta")) && cJSON_GetArraySize(get(choice, "delta")) == 0);
    CHECK(is_string(get(choice, "finish_reason"), "stop"));
    CHECK(cJSON_IsNull(get(choice, "logprobs")));
    cJSON_Delete(root);
    free(text);

    struct openai_usage usage = {9, 4};
    text = openai_usage_chunk_json(&response, &usage);
    root = parse_json(text);
    check_head(root, "chatcmpl-0123abcd", "chat.completion.chunk");
    CHECK(cJSON_IsArray(get(root, "choices")) && cJSON_GetArraySize(get(root, "choices")) == 0);
    check_usage(get(root, "usage"), 9, 4);
    cJSON_Delete(root);
    free(text);

    /* Without include_usage there is no "usage" key; without logprobs none either. */
    response = chat_response(0, 0);
    text = openai_chunk_json(&response, &middle);
    root = parse_json(text);
    CHECK(get(root, "usage") == NULL);
    CHECK(cJSON_IsNull(get(first_choice(root), "logprobs")));
    cJSON_Delete(root);
    free(text);
}

/* "Hello" + " w\xC3" + "\xB6rld": the middle token ends inside "ö". */
static void fill_completion_tokens(struct openai_token tokens[3]) {
    memset(tokens, 0, 3 * sizeof(tokens[0]));
    tokens[0] = (struct openai_token){"Hello", 5, -0.25f, 3, {{" Hi", 3, -1.0f}}};
    tokens[0].top[1] = (struct openai_alternative){"Hello", 5, -0.25f};
    tokens[0].top[2] = (struct openai_alternative){"He", 2, -3.0f};
    tokens[1] = (struct openai_token){" w\xC3", 3, -0.5f, 2, {{"\xC3", 1, -0.5f}}};
    tokens[1].top[1] = (struct openai_alternative){"\xC4", 1, -0.75f};
    tokens[2] = (struct openai_token){"\xB6rld", 4, -0.0625f, 0, {{NULL, 0, 0}}};
}

static void check_completion_logprobs(const cJSON *logprobs, int base) {
    const cJSON *texts = get(logprobs, "tokens"), *values = get(logprobs, "token_logprobs");
    const cJSON *tops = get(logprobs, "top_logprobs"), *offsets = get(logprobs, "text_offset");
    CHECK(cJSON_GetArraySize(logprobs) == 4);
    CHECK(cJSON_GetArraySize(texts) == 3 && cJSON_GetArraySize(values) == 3);
    CHECK(cJSON_GetArraySize(tops) == 3 && cJSON_GetArraySize(offsets) == 3);
    CHECK(is_string(cJSON_GetArrayItem(texts, 0), "Hello"));
    CHECK(is_string(cJSON_GetArrayItem(texts, 1), " w\xEF\xBF\xBD"));
    CHECK(is_string(cJSON_GetArrayItem(texts, 2), "\xEF\xBF\xBDrld"));
    CHECK(is_number(cJSON_GetArrayItem(values, 0), -0.25));
    CHECK(is_number(cJSON_GetArrayItem(values, 1), -0.5));
    CHECK(is_number(cJSON_GetArrayItem(values, 2), -0.0625));
    /* Alternatives in order; the sampled token is not added twice. */
    const cJSON *top0 = cJSON_GetArrayItem(tops, 0);
    CHECK(cJSON_GetArraySize(top0) == 3);
    CHECK(is_number(get(top0, " Hi"), -1.0) && is_number(get(top0, "Hello"), -0.25));
    CHECK(is_number(get(top0, "He"), -3.0));
    CHECK(top0->child != NULL && same_string(top0->child->string, " Hi"));
    /* "\xC3" and "\xC4" both print as U+FFFD: the first is kept; the sampled
     * token, absent from the alternatives, is added. */
    const cJSON *top1 = cJSON_GetArrayItem(tops, 1);
    CHECK(cJSON_GetArraySize(top1) == 2);
    CHECK(is_number(get(top1, "\xEF\xBF\xBD"), -0.5));
    CHECK(is_number(get(top1, " w\xEF\xBF\xBD"), -0.5));
    const cJSON *top2 = cJSON_GetArrayItem(tops, 2);
    CHECK(cJSON_GetArraySize(top2) == 1 && is_number(get(top2, "\xEF\xBF\xBDrld"), -0.0625));
    /* Characters before each token: "Hello" is 5, " w\xC3" starts a 3rd. */
    CHECK(is_number(cJSON_GetArrayItem(offsets, 0), base));
    CHECK(is_number(cJSON_GetArrayItem(offsets, 1), base + 5));
    CHECK(is_number(cJSON_GetArrayItem(offsets, 2), base + 8));
}

static void test_text_completion(void) {
    struct openai_token tokens[3];
    fill_completion_tokens(tokens);
    struct openai_response response = {OPENAI_COMPLETION, "cmpl-77", "kjv2m", 1732900000, 1, 0};
    struct openai_result result = {
        "Hello w\xC3\xB6rld", 12, OPENAI_FINISH_LENGTH, {4, 3}, 3, tokens};
    char *text = openai_completion_json(&response, &result);
    cJSON *root = parse_json(text);
    check_head(root, "cmpl-77", "text_completion");
    const cJSON *choice = first_choice(root);
    CHECK(is_string(get(choice, "text"), "Hello w\xC3\xB6rld"));
    CHECK(is_string(get(choice, "finish_reason"), "length"));
    check_completion_logprobs(get(choice, "logprobs"), 0);
    check_usage(get(root, "usage"), 4, 3);
    cJSON_Delete(root);
    free(text);

    CHECK(openai_text_chars("Hello w\xC3\xB6rld", 12) == 11);
    CHECK(openai_text_chars("\xF0\x9F\x98\x80", 4) == 1 && openai_text_chars("", 0) == 0);

    /* Streamed: logprobs offsets continue from the chunk's text_offset. */
    response.include_usage = 1;
    struct openai_delta delta = {0, tricky, strlen(tricky), OPENAI_FINISH_NONE, 3, tokens, 40};
    text = openai_chunk_json(&response, &delta);
    check_printed(text);
    root = parse_json(text);
    check_head(root, "cmpl-77", "text_completion");
    choice = first_choice(root);
    CHECK(is_string(get(choice, "text"), tricky));
    CHECK(cJSON_IsNull(get(choice, "finish_reason")));
    check_completion_logprobs(get(choice, "logprobs"), 40);
    CHECK(cJSON_IsNull(get(root, "usage")));
    cJSON_Delete(root);
    free(text);

    struct openai_delta last = {0, "", 0, OPENAI_FINISH_STOP, 0, NULL, 52};
    text = openai_chunk_json(&response, &last);
    root = parse_json(text);
    choice = first_choice(root);
    CHECK(is_string(get(choice, "text"), "") && is_string(get(choice, "finish_reason"), "stop"));
    CHECK(cJSON_IsNull(get(choice, "logprobs")));
    cJSON_Delete(root);
    free(text);

    struct openai_usage usage = {4, 3};
    text = openai_usage_chunk_json(&response, &usage);
    root = parse_json(text);
    check_head(root, "cmpl-77", "text_completion");
    CHECK(cJSON_GetArraySize(get(root, "choices")) == 0);
    check_usage(get(root, "usage"), 4, 3);
    cJSON_Delete(root);
    free(text);

    /* Not asked for: "logprobs": null even when tokens are passed. */
    response.logprobs = 0;
    text = openai_completion_json(&response, &result);
    root = parse_json(text);
    CHECK(cJSON_IsNull(get(first_choice(root), "logprobs")));
    cJSON_Delete(root);
    free(text);
}

static void test_response_init(void) {
    struct openai_request r;
    struct openai_error e;
    CHECK(parse("{\"model\":\"kjv2m\",\"prompt\":\"x\",\"stream\":true,\"logprobs\":2,"
                "\"stream_options\":{\"include_usage\":true}}",
                OPENAI_COMPLETION, &r, &e) == 0);
    struct openai_response response;
    openai_response_init(&response, &r, "cmpl-1", 5);
    CHECK(response.kind == OPENAI_COMPLETION && same_string(response.id, "cmpl-1"));
    CHECK(response.model == r.model && response.created == 5);
    CHECK(response.logprobs == 1 && response.include_usage == 1);
    r.stream = 0; /* include_usage only applies to a stream */
    openai_response_init(&response, &r, "cmpl-1", 5);
    CHECK(response.include_usage == 0);
    openai_request_free(&r);
}

static void test_models(void) {
    const char *ids[] = {"kjv2m", "qwen\"3\""};
    const int contexts[] = {256, 131072};
    char *text = openai_models_json(ids, contexts, 2, 1732900000);
    cJSON *root = parse_json(text);
    CHECK(is_string(get(root, "object"), "list"));
    const cJSON *data = get(root, "data");
    CHECK(cJSON_IsArray(data) && cJSON_GetArraySize(data) == 2);
    for (int i = 0; i < 2 && i < cJSON_GetArraySize(data); i++) {
        const cJSON *model = cJSON_GetArrayItem(data, i);
        CHECK(cJSON_GetArraySize(model) == 6);
        CHECK(is_number(get(model, "context_length"), contexts[i]));
        CHECK(is_number(get(model, "max_model_len"), contexts[i]));
        CHECK(is_string(get(model, "id"), ids[i]));
        CHECK(is_string(get(model, "object"), "model"));
        CHECK(is_number(get(model, "created"), 1732900000));
        CHECK(is_string(get(model, "owned_by"), "lockstep"));
    }
    cJSON_Delete(root);
    free(text);

    text = openai_models_json(NULL, NULL, 0, 0);
    CHECK(same_string(text, "{\"object\":\"list\",\"data\":[]}"));
    free(text);

    text = openai_model_json("kjv2m", 0, 7);
    CHECK(same_string(
        text, "{\"id\":\"kjv2m\",\"object\":\"model\",\"created\":7,\"owned_by\":\"lockstep\"}"));
    free(text);
}

int main(void) {
    test_chat_every_field();
    test_chat_defaults_and_nulls();
    test_completion_prompts();
    test_omitted_model();
    test_fields_that_change_nothing();
    test_refusals();
    test_error_json();
    test_chat_completion();
    test_chat_logprobs();
    test_chat_chunks();
    test_text_completion();
    test_response_init();
    test_models();
    return test_status("test_gateway_openai");
}
