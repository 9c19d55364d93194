/* test_gateway_openai.c -- the gateway's OpenAI request parser.
 *
 * Every field parsed with its type and default, JSON null read as absent,
 * each prompt form, the omitted model, the fields accepted and ignored, the
 * values of unimplemented fields that ask for nothing, n from 1 to 8; every
 * refusal (unrecognized and unimplemented fields among them) checked for
 * its status, type, param and exact message. The response bodies are
 * test_gateway_openai_response.c's. */
#include "openai/openai.h"
#include "grammar/grammar.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

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
    CHECK(r.prompts == NULL && r.n_prompts == 0);
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
    CHECK(r->n == 1);
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
    CHECK(r.n_prompts == 1 && same_string(r.prompts[0].text, "In the beginning") &&
          r.prompts[0].tokens == NULL);
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
    CHECK(r.n_prompts == 1 && same_string(r.prompts[0].text, "one") && r.logprobs == 1 &&
          r.top_logprobs == 0);
    openai_request_free(&r);

    CHECK(parse("{\"model\":\"m\",\"prompt\":\"\"}", OPENAI_COMPLETION, &r, &e) == 0);
    CHECK(r.n_prompts == 1 && same_string(r.prompts[0].text, "") && r.logprobs == 0);
    check_defaults(&r);
    openai_request_free(&r);

    CHECK(parse("{\"model\":\"m\",\"prompt\":[1,2,2147483647]}", OPENAI_COMPLETION, &r, &e) == 0);
    CHECK(r.n_prompts == 1 && r.prompts[0].text == NULL && r.prompts[0].n_tokens == 3);
    if (r.n_prompts == 1 && r.prompts[0].n_tokens == 3)
        CHECK(r.prompts[0].tokens[0] == 1 && r.prompts[0].tokens[1] == 2 &&
              r.prompts[0].tokens[2] == 2147483647);
    openai_request_free(&r);

    CHECK(parse("{\"model\":\"m\",\"prompt\":[[4,0]]}", OPENAI_COMPLETION, &r, &e) == 0);
    CHECK(r.n_prompts == 1 && r.prompts[0].n_tokens == 2);
    if (r.n_prompts == 1 && r.prompts[0].n_tokens == 2)
        CHECK(r.prompts[0].tokens[0] == 4 && r.prompts[0].tokens[1] == 0);
    openai_request_free(&r);

    /* several prompts, each answered with n choices */
    CHECK(parse("{\"model\":\"m\",\"prompt\":[\"a\",\"\",\"b c\"],\"n\":2}", OPENAI_COMPLETION, &r,
                &e) == 0);
    CHECK(r.n_prompts == 3 && r.n == 2);
    if (r.n_prompts == 3)
        CHECK(same_string(r.prompts[0].text, "a") && same_string(r.prompts[1].text, "") &&
              same_string(r.prompts[2].text, "b c") && r.prompts[2].tokens == NULL);
    openai_request_free(&r);
    CHECK(parse("{\"model\":\"m\",\"prompt\":[[1,2],[3]]}", OPENAI_COMPLETION, &r, &e) == 0);
    CHECK(r.n_prompts == 2 && r.prompts[0].n_tokens == 2 && r.prompts[1].n_tokens == 1);
    if (r.n_prompts == 2) CHECK(r.prompts[1].tokens[0] == 3 && r.prompts[1].text == NULL);
    openai_request_free(&r);

    /* The body need not be NUL-terminated: only len bytes are read. */
    const char buffer[] = "{\"model\":\"m\",\"prompt\":\"x\"}GARBAGE";
    CHECK(openai_parse_request(buffer, strlen(buffer) - 7, OPENAI_COMPLETION, &r, &e) == 0);
    CHECK(r.n_prompts == 1 && same_string(r.prompts[0].text, "x"));
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
#define TOOL_F    "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}"

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
     "messages[0].tool_call_id", "messages[0].tool_call_id is required"},
    {OPENAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"tool\",\"tool_call_id\":\"c\"}]}",
     "messages[0].content", "messages[0].content is required"},
    {OPENAI_CHAT,
     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\","
     "\"tool_call_id\":\"c\"}]}",
     "messages[0].tool_call_id", "messages[0].tool_call_id is only allowed in tool messages"},
    {OPENAI_CHAT,
     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\","
     "\"tool_calls\":[]}]}",
     "messages[0].tool_calls", "messages[0].tool_calls is only allowed in assistant messages"},
    {OPENAI_CHAT,
     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
     "{\"role\":\"assistant\",\"tool_calls\":{}}]}",
     "messages[1].tool_calls", "messages[1].tool_calls must be an array"},
    {OPENAI_CHAT,
     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
     "{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\","
     "\"function\":{\"name\":\"f\"}}]}]}",
     "messages[1].tool_calls[0].function.arguments",
     "messages[1].tool_calls[0].function.arguments is required"},
    {OPENAI_CHAT,
     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
     "{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\","
     "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]}",
     "messages[1].tool_calls[0].id", "messages[1].tool_calls[0].id is required"},
    /* A client's string in a message is escaped to one line and cut short. */
    {OPENAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"a\\\"b\\\\c\\n\\u0001\"}]}",
     "messages[0].role",
     "messages[0].role must be one of system, developer, user, assistant, tool; got "
     "\"a\\\"b\\\\c\\u000a\\u0001\""},
    {OPENAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"" E5 E5 E5 E5 E5 "\"}]}",
     "messages[0].role",
     "messages[0].role must be one of system, developer, user, assistant, tool; got \"" E5 E5 E5 E5
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
    {OPENAI_CHAT, CHAT_HEAD "\"n\":9}", "n", "n must be between 1 and 8, got 9"},
    {OPENAI_CHAT, CHAT_HEAD "\"n\":0}", "n", "n must be between 1 and 8, got 0"},
    {OPENAI_CHAT, CHAT_HEAD "\"n\":-1}", "n", "n must be between 1 and 8, got -1"},
    {OPENAI_CHAT, CHAT_HEAD "\"n\":2.5}", "n", "n must be an integer"},
    {OPENAI_CHAT, CHAT_HEAD "\"n\":\"2\"}", "n", "n must be an integer"},
    {OPENAI_CHAT, CHAT_HEAD "\"n\":[2]}", "n", "n must be an integer"},
    {OPENAI_COMPLETION, "{\"model\":\"m\"}", "prompt", "prompt is required"},
    {OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":5}", "prompt",
     "prompt must be a string or an array of token ids"},
    {OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[]}", "prompt", "prompt must not be empty"},
    {OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"a\",[1]]}", "prompt[1]",
     "prompt[1] must be a string, as prompt[0] is"},
    {OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[[1],\"a\"]}", "prompt[1]",
     "prompt[1] must be an array of token ids, as prompt[0] is"},
    {OPENAI_COMPLETION,
     "{\"model\":\"m\",\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"],\"n\":8}",
     "n", "9 prompts with n 8 make 72 choices; a request may ask for 64"},
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
    {OPENAI_COMPLETION, CMPL_HEAD "\"n\":1e300}", "n", "n must be between 1 and 8, got 1e+300"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"n\":true}", "n", "n must be an integer"},
    /* stream_options only goes with a stream. */
    {OPENAI_CHAT, CHAT_HEAD "\"stream_options\":{\"include_usage\":true}}", "stream_options",
     "stream_options requires stream to be true"},
    {OPENAI_CHAT, CHAT_HEAD "\"stream\":false,\"stream_options\":{}}", "stream_options",
     "stream_options requires stream to be true"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"stream_options\":{\"include_usage\":false}}", "stream_options",
     "stream_options requires stream to be true"},
    /* Fields lockstep does not implement, with values that ask for something. */
    /* Tool calling (openai_tools.c). */
    {OPENAI_CHAT, CHAT_HEAD "\"tools\":{}}", "tools", "tools must be an array of tools"},
    {OPENAI_CHAT, CHAT_HEAD "\"tools\":[1]}", "tools[0]", "tools[0] must be an object"},
    {OPENAI_CHAT, CHAT_HEAD "\"tools\":[{\"type\":\"retrieval\"}]}", "tools[0].type",
     "tools[0].type must be \"function\""},
    {OPENAI_CHAT, CHAT_HEAD "\"tools\":[{\"type\":\"function\",\"x\":1}]}", "tools[0]",
     "tools[0] has an unknown field 'x'"},
    {OPENAI_CHAT, CHAT_HEAD "\"tools\":[" TOOL_F ",{\"type\":\"function\",\"function\":{}}]}",
     "tools[1].function.name", "tools[1].function.name is required"},
    {OPENAI_CHAT,
     CHAT_HEAD "\"tools\":[" TOOL_F ",{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}",
     "tools[1].function.name",
     "tools[1].function.name must be 1 to 64 letters, digits, underscores or dashes, got \"a b\""},
    {OPENAI_CHAT, CHAT_HEAD "\"tools\":[" TOOL_F "," TOOL_F "]}", "tools[1].function.name",
     "tools[1].function.name \"f\" is the name of tools[0] too"},
    {OPENAI_CHAT,
     CHAT_HEAD "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"y\":2}}]}",
     "tools[0].function", "tools[0].function has an unknown field 'y'"},
    {OPENAI_CHAT,
     CHAT_HEAD "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":1}}]}",
     "tools[0].function.strict", "tools[0].function.strict must be a boolean"},
    {OPENAI_CHAT,
     CHAT_HEAD "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
               "\"parameters\":[]}}]}",
     "tools[0].function.parameters", "tools[0].function.parameters must be a JSON Schema object"},
    {OPENAI_CHAT,
     CHAT_HEAD "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
               "\"parameters\":{\"type\":\"string\"}}}]}",
     "tools[0].function.parameters",
     "tools[0].function.parameters must describe an object (\"type\": \"object\")"},
    {OPENAI_CHAT,
     CHAT_HEAD "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
               "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
               "\"string\",\"pattern\":\"x\"}}}}}]}",
     "tools[0].function.parameters",
     "tools[0].function.parameters: unsupported JSON Schema keyword \"pattern\" at /properties/a"},
    {OPENAI_CHAT, CHAT_HEAD "\"tool_choice\":\"required\"}", "tool_choice",
     "tool_choice \"required\" needs tools"},
    {OPENAI_CHAT,
     CHAT_HEAD "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}}",
     "tool_choice", "tool_choice names a function but no tools are given"},
    {OPENAI_CHAT,
     CHAT_HEAD "\"tools\":[" TOOL_F "],\"tool_choice\":{\"type\":\"function\",\"function\":"
               "{\"name\":\"g\"}}}",
     "tool_choice.function.name",
     "tool_choice.function.name \"g\" is not the name of any of the tools"},
    {OPENAI_CHAT,
     CHAT_HEAD "\"tools\":[" TOOL_F "],\"tool_choice\":{\"type\":\"f\",\"function\":"
               "{\"name\":\"f\"}}}",
     "tool_choice.type", "tool_choice.type must be \"function\""},
    {OPENAI_CHAT, CHAT_HEAD "\"tools\":[" TOOL_F "],\"tool_choice\":\"sometimes\"}", "tool_choice",
     "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
     "\"function\": {\"name\": ...}}"},
    {OPENAI_CHAT, CHAT_HEAD "\"parallel_tool_calls\":\"yes\"}", "parallel_tool_calls",
     "parallel_tool_calls must be a boolean"},
    {OPENAI_CHAT,
     CHAT_HEAD "\"tools\":[" TOOL_F "],\"response_format\":{\"type\":\"json_object\"}}", "tools",
     "tools cannot be combined with response_format or grammar (unless tool_choice is \"none\")"},
    {OPENAI_CHAT, CHAT_HEAD "\"functions\":[{\"name\":\"f\",\"parameters\":{}}]}", "functions",
     "functions is not supported: lockstep does not call functions (omit it, or send [])"},
    {OPENAI_CHAT, CHAT_HEAD "\"function_call\":{\"name\":\"f\"}}", "function_call",
     "function_call is not supported: lockstep does not call functions (only \"none\" and "
     "\"auto\" are accepted)"},
    {OPENAI_CHAT, CHAT_HEAD "\"response_format\":{\"type\":\"yaml\"}}", "response_format.type",
     "response_format.type 'yaml' is not text, json_object or json_schema"},
    {OPENAI_CHAT, CHAT_HEAD "\"response_format\":{\"type\":\"json_schema\"}}",
     "response_format.json_schema",
     "response_format.json_schema is required with type json_schema, as an object"},
    {OPENAI_CHAT,
     CHAT_HEAD "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
               "\"schema\":{\"allOf\":[]}}}}",
     "response_format.json_schema.schema",
     "response_format: unsupported JSON Schema keyword \"allOf\" at the root"},
    {OPENAI_CHAT, CHAT_HEAD "\"response_format\":{\"type\":\"text\",\"extra\":1}}",
     "response_format", "response_format has an unknown field 'extra'"},
    {OPENAI_CHAT, CHAT_HEAD "\"response_format\":\"text\"}", "response_format",
     "response_format must be an object with a type: text, json_object or json_schema"},
    {OPENAI_CHAT, CHAT_HEAD "\"logit_bias\":{\"x\":-100}}", "logit_bias",
     "logit_bias key 'x' is not a token id"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"logit_bias\":{\"7\":-101}}", "logit_bias",
     "logit_bias['7'] must be a number in [-100, 100]"},
    {OPENAI_COMPLETION, CMPL_HEAD "\"grammar\":\"root ::= x\"}", "grammar",
     "grammar: 1:10: undefined rule 'x'"},
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
     "{\"model\":\"m\",\"messages\":[{\"role\":\"bot\",\"content\":\"x\"}],\"audio\":{}}", "audio",
     "audio is not supported: answers are text"},
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
    CHECK(r.model == NULL && r.n_prompts == 1 && same_string(r.prompts[0].text, "x") &&
          r.stream == 1);
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

/* n: every count from 1 to 8 on both endpoints, streamed or not; other
 * fields keep their defaults. */
static void test_choices(void) {
    for (int n = 1; n <= OPENAI_CHOICES_MAX; n++)
        for (int stream = 0; stream < 2; stream++) {
            char chat[160], completion[160];
            struct openai_request r;
            struct openai_error e;
            snprintf(chat, sizeof(chat), CHAT_HEAD "\"n\":%d,\"stream\":%s}", n,
                     stream ? "true" : "false");
            snprintf(completion, sizeof(completion), CMPL_HEAD "\"n\":%d.0,\"stream\":%s}", n,
                     stream ? "true" : "false");
            CHECK_MSG(parse(chat, OPENAI_CHAT, &r, &e) == 0 && r.n == n && r.stream == stream,
                      "chat n=%d refused: %s", n, e.message);
            openai_request_free(&r);
            CHECK_MSG(parse(completion, OPENAI_COMPLETION, &r, &e) == 0 && r.n == n,
                      "completion n=%d refused: %s", n, e.message);
            openai_request_free(&r);
        }
    CHECK(OPENAI_CHOICES_MAX == 8);
}

/* logit_bias, grammar and response_format are read into the request. */
static void test_constraints(void) {
    struct openai_request r;
    struct openai_error e;
    CHECK_MSG(parse(CMPL_HEAD "\"logit_bias\":{\"5\":-100,\"70\":2.5},\"grammar\":\"root ::= "
                              "[a-z]+\"}",
                    OPENAI_COMPLETION, &r, &e) == 0,
              "%s", e.message);
    CHECK(r.n_biases == 2 && r.biases[0].token == 5 && r.biases[0].bias == -100.0f &&
          r.biases[1].token == 70 && r.biases[1].bias == 2.5f);
    CHECK(r.grammar && !strcmp(r.grammar, "root ::= [a-z]+"));
    openai_request_free(&r);
    CHECK_MSG(parse(CHAT_HEAD "\"response_format\":{\"type\":\"json_object\"}}", OPENAI_CHAT, &r,
                    &e) == 0,
              "%s", e.message);
    CHECK(r.grammar && strstr(r.grammar, "root ::=") != NULL);
    openai_request_free(&r);
    CHECK_MSG(parse(CHAT_HEAD "\"response_format\":{\"type\":\"text\"},\"logit_bias\":{}}",
                    OPENAI_CHAT, &r, &e) == 0,
              "%s", e.message);
    CHECK(r.grammar == NULL && r.n_biases == 0);
    openai_request_free(&r);
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
        CHECK(r.model == NULL && r.messages == NULL && r.prompts == NULL && r.n_stops == 0);
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

/* 1 if the grammar takes text whole. */
static int grammar_takes(const char *gbnf, const char *text) {
    struct grammar *g = NULL;
    char err[200];
    if (grammar_compile(&g, gbnf, strlen(gbnf), err, sizeof(err))) return 0;
    struct grammar_state *st = grammar_state_create(g);
    int ok = st && grammar_accept(st, text, strlen(text)) == 0 && grammar_can_end(st);
    grammar_state_free(st);
    grammar_free(g);
    return ok;
}

#define TOOLS_BODY                                                                                 \
    "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"                       \
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":"        \
    "\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"P\\\"}" \
    "\"}}]},"                                                                                      \
    "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"sunny\"}],"                      \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":"    \
    "\"Weather\",\"strict\":true,\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":"    \
    "{\"type\":\"string\"}},\"required\":[\"city\"],\"additionalProperties\":false}}},"            \
    "{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]"

/* tools, tool_choice, parallel_tool_calls and the messages' tool fields
 * are read; the calls' grammar takes calls in the family's format. */
static void test_tools(void) {
    struct openai_request r;
    struct openai_error e;
    CHECK_MSG(parse(TOOLS_BODY ",\"parallel_tool_calls\":false}", OPENAI_CHAT, &r, &e) == 0, "%s",
              e.message);
    CHECK(r.n_tools == 2 && r.tool_choice == OPENAI_TOOLS_AUTO && r.parallel_tool_calls == 0);
    CHECK(same_string(r.tools[0].name, "get_weather") &&
          same_string(r.tools[0].description, "Weather") && r.tools[0].grammar != NULL);
    CHECK(same_string(r.tools[0].parameters,
                      "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
                      "\"required\":[\"city\"],\"additionalProperties\":false}"));
    CHECK(same_string(r.tools[1].name, "now") && r.tools[1].parameters == NULL &&
          r.tools[1].description == NULL && r.tools[1].grammar != NULL);
    CHECK(r.n_messages == 3 && r.messages[1].n_tool_calls == 1);
    CHECK(same_string(r.messages[1].content, "") &&
          same_string(r.messages[1].tool_calls[0].id, "call_1"));
    CHECK(same_string(r.messages[1].tool_calls[0].name, "get_weather") &&
          same_string(r.messages[1].tool_calls[0].arguments, "{\"city\":\"P\"}"));
    CHECK(same_string(r.messages[2].role, "tool") &&
          same_string(r.messages[2].tool_call_id, "call_1") &&
          same_string(r.messages[2].content, "sunny"));
    /* one call of either tool, in the plain format */
    const struct tokenizer_tool_format *plain = tokenizer_chat_tool_format(TOKENIZER_CHAT_PLAIN);
    char *gbnf = NULL;
    CHECK_MSG(openai_tools_grammar(&r, plain, &gbnf, &e) == 0, "%s", e.message);
    CHECK(grammar_takes(gbnf, "<tool_call>{\"name\": \"get_weather\", \"arguments\": "
                              "{\"city\": \"Paris\"}}</tool_call>"));
    CHECK(grammar_takes(gbnf, "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>"));
    CHECK(!grammar_takes(gbnf, "<tool_call>{\"name\": \"get_weather\", \"arguments\": "
                               "{\"town\": \"Paris\"}}</tool_call>"));
    CHECK(!grammar_takes(gbnf, "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>\n"
                               "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>"));
    free(gbnf);
    openai_request_free(&r);

    /* several calls, a named tool, every family's format */
    CHECK_MSG(parse(TOOLS_BODY ",\"tool_choice\":{\"type\":\"function\",\"function\":"
                               "{\"name\":\"now\"}}}",
                    OPENAI_CHAT, &r, &e) == 0,
              "%s", e.message);
    CHECK(r.tool_choice == OPENAI_TOOLS_FUNCTION && r.tool_choice_index == 1 &&
          r.parallel_tool_calls == 1);
    CHECK(openai_tools_grammar(&r, tokenizer_chat_tool_format(TOKENIZER_CHAT_CHATML), &gbnf, &e) ==
          0);
    CHECK(grammar_takes(
        gbnf, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
              "<tool_call>\n{\"name\":\"now\",\"arguments\":{\"x\": [1]}}\n</tool_call>"));
    CHECK(!grammar_takes(gbnf, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                               "{\"city\": \"P\"}}\n</tool_call>"));
    free(gbnf);
    CHECK(openai_tools_grammar(&r, tokenizer_chat_tool_format(TOKENIZER_CHAT_MISTRAL), &gbnf, &e) ==
          0);
    CHECK(grammar_takes(gbnf, "[TOOL_CALLS] [{\"name\": \"now\", \"arguments\": {}}, "
                              "{\"name\": \"now\", \"arguments\": {}}]"));
    free(gbnf);
    CHECK(openai_tools_grammar(&r, tokenizer_chat_tool_format(TOKENIZER_CHAT_LLAMA3), &gbnf, &e) ==
          0);
    CHECK(grammar_takes(gbnf, "{\"name\": \"now\", \"parameters\": {}}; "
                              "{\"name\": \"now\", \"parameters\": {}}"));
    free(gbnf);
    openai_request_free(&r);

    CHECK(parse(TOOLS_BODY ",\"tool_choice\":\"required\"}", OPENAI_CHAT, &r, &e) == 0);
    CHECK(r.tool_choice == OPENAI_TOOLS_REQUIRED);
    openai_request_free(&r);
    /* "none" keeps the tools (to refuse nothing) but calls none */
    CHECK(parse(TOOLS_BODY ",\"tool_choice\":\"none\",\"grammar\":\"root ::= \\\"a\\\"\"}",
                OPENAI_CHAT, &r, &e) == 0);
    CHECK(r.tool_choice == OPENAI_TOOLS_NONE && r.n_tools == 2);
    openai_request_free(&r);

    /* 128 tools at most */
    char *body = malloc(200 * 64 + 256);
    size_t used = (size_t)sprintf(body, CHAT_HEAD "\"tools\":[");
    for (int i = 0; i < 129; i++)
        used += (size_t)sprintf(body + used,
                                "%s{\"type\":\"function\",\"function\":{\"name\":\"f%d\"}}",
                                i ? "," : "", i);
    sprintf(body + used, "]}");
    CHECK(parse(body, OPENAI_CHAT, &r, &e) == -1 && same_string(e.param, "tools") &&
          same_string(e.message, "tools may hold at most 128 tools, got 129"));
    openai_request_free(&r);
    free(body);
}

int main(void) {
    test_tools();
    test_chat_every_field();
    test_chat_defaults_and_nulls();
    test_completion_prompts();
    test_omitted_model();
    test_fields_that_change_nothing();
    test_choices();
    test_refusals();
    test_constraints();
    return test_status("test_gateway_openai");
}
