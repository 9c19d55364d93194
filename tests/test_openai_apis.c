/* test_openai_apis.c -- the Responses API's and Anthropic's Messages API's
 * bodies (openai_parse_responses, openai_parse_messages) as the chat
 * requests they amount to: instructions, input items and blocks become
 * messages and tool calls, tools and tool_choice take chat's shape; and
 * each refusal names the field the client sent (Messages' in Anthropic's
 * error shape). What the answers look like is driven through the real
 * clients (tests/sdk). */
#include "openai/openai.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static int same_string(const char *a, const char *b) {
    return a != NULL && b != NULL && strcmp(a, b) == 0;
}

/* The Responses API's body as the chat request it amounts to, and its
 * refusals naming the Responses field. */
static void test_responses(void) {
    struct openai_request r;
    struct openai_error e;
    static const char body[] =
        "{\"model\":\"m\",\"instructions\":\"Be brief.\",\"input\":[{\"role\":\"user\","
        "\"content\":[{\"type\":\"input_text\",\"text\":\"Hi \"},{\"type\":\"input_text\","
        "\"text\":\"there\"}]},{\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"f\","
        "\"arguments\":\"{}\"},{\"type\":\"function_call_output\",\"call_id\":\"call_1\","
        "\"output\":\"ok\"}],\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":"
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}],\"tool_choice\":"
        "{\"type\":\"function\",\"name\":\"f\"},\"max_output_tokens\":20,\"stream\":true,"
        "\"store\":false}";
    CHECK_MSG(openai_parse_responses(body, strlen(body), &r, &e) == 0, "%s", e.message);
    CHECK(r.kind == OPENAI_CHAT && r.responses == 1 && r.stream == 1 && r.max_tokens == 20);
    CHECK(r.n_messages == 4);
    if (r.n_messages == 4) {
        CHECK(same_string(r.messages[0].role, "system") &&
              same_string(r.messages[0].content, "Be brief."));
        CHECK(same_string(r.messages[1].role, "user") &&
              same_string(r.messages[1].content, "Hi there"));
        CHECK(same_string(r.messages[2].role, "assistant") && r.messages[2].n_tool_calls == 1 &&
              same_string(r.messages[2].tool_calls[0].id, "call_1") &&
              same_string(r.messages[2].tool_calls[0].name, "f"));
        CHECK(same_string(r.messages[3].role, "tool") &&
              same_string(r.messages[3].tool_call_id, "call_1") &&
              same_string(r.messages[3].content, "ok"));
    }
    CHECK(r.n_tools == 1 && same_string(r.tools[0].name, "f") &&
          r.tool_choice == OPENAI_TOOLS_FUNCTION && r.tool_choice_index == 0);
    openai_request_free(&r);
    static const char schema[] = "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\","
                                 "\"name\":\"p\",\"schema\":{\"type\":\"object\"}}}}";
    CHECK_MSG(openai_parse_responses(schema, strlen(schema), &r, &e) == 0, "%s", e.message);
    CHECK(r.grammar != NULL && r.n_messages == 1 && same_string(r.messages[0].content, "x"));
    openai_request_free(&r);
    static const struct {
        const char *body, *param, *message;
    } refused[] = {
        {"{\"input\":\"x\",\"store\":true}", "store", "store true is not supported"},
        {"{\"input\":\"x\",\"previous_response_id\":\"resp_1\"}", "previous_response_id",
         "keeps no responses"},
        {"{\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", "tools[0]",
         "tools[0] is a web_search tool"},
        {"{\"input\":[{\"type\":\"reasoning\"}]}", "input[0]", "input[0] is a reasoning item"},
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\"}]}]}",
         "input[0].content", "input[0].content[0] must be a text part"},
        {"{\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens", "must be between"},
        {"{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"yaml\"}}}", "text.format.type",
         "is not text, json_object or json_schema"},
        {"{\"input\":\"x\",\"frequency_penalty\":1}", "frequency_penalty", "frequency_penalty"},
        {"{\"model\":\"m\"}", "input", "input is required"},
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        int rc = openai_parse_responses(refused[i].body, strlen(refused[i].body), &r, &e);
        CHECK_MSG(rc == -1 && e.status == 400 && !strcmp(e.param, refused[i].param) &&
                      strstr(e.message, refused[i].message),
                  "%s: %d, param '%s', message '%s'", refused[i].body, rc, e.param, e.message);
        CHECK(r.messages == NULL && r.tools == NULL);
        openai_request_free(&r);
    }
}

/* Anthropic's Messages API body as the chat request it amounts to, and its
 * refusals naming the Messages field, in Anthropic's error shape. */
static void test_messages(void) {
    struct openai_request r;
    struct openai_error e;
    static const char body[] =
        "{\"model\":\"m\",\"max_tokens\":30,\"system\":[{\"type\":\"text\",\"text\":\"Be \"},"
        "{\"type\":\"text\",\"text\":\"brief.\"}],\"messages\":[{\"role\":\"user\",\"content\":"
        "\"Weather?\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Let me "
        "look.\"},{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"w\",\"input\":{\"city\":"
        "\"Oslo\"}}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":"
        "\"toolu_1\",\"content\":[{\"type\":\"text\",\"text\":\"rain\"}]},{\"type\":\"text\","
        "\"text\":\"And tomorrow?\"}]}],\"tools\":[{\"name\":\"w\",\"input_schema\":{\"type\":"
        "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}],\"tool_choice\":{\"type\":"
        "\"any\",\"disable_parallel_tool_use\":true},\"stop_sequences\":[\"\\n\\n\"],"
        "\"stream\":true}";
    CHECK_MSG(openai_parse_messages(body, strlen(body), 0, &r, &e) == 0, "%s", e.message);
    CHECK(r.anthropic == 1 && r.stream == 1 && r.max_tokens == 30 && r.n_stops == 1);
    CHECK(r.n_messages == 5);
    if (r.n_messages == 5) {
        CHECK(same_string(r.messages[0].role, "system") &&
              same_string(r.messages[0].content, "Be brief."));
        CHECK(same_string(r.messages[2].role, "assistant") &&
              same_string(r.messages[2].content, "Let me look.") &&
              r.messages[2].n_tool_calls == 1 &&
              same_string(r.messages[2].tool_calls[0].arguments, "{\"city\":\"Oslo\"}"));
        CHECK(same_string(r.messages[3].role, "tool") &&
              same_string(r.messages[3].tool_call_id, "toolu_1") &&
              same_string(r.messages[3].content, "rain"));
        CHECK(same_string(r.messages[4].role, "user") &&
              same_string(r.messages[4].content, "And tomorrow?"));
    }
    CHECK(r.n_tools == 1 && r.tool_choice == OPENAI_TOOLS_REQUIRED && r.parallel_tool_calls == 0);
    openai_request_free(&r);
    static const char count[] =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    CHECK(openai_parse_messages(count, strlen(count), 1, &r, &e) == 0 && r.max_tokens == -1);
    openai_request_free(&r);
    CHECK(openai_parse_messages(count, strlen(count), 0, &r, &e) == -1 &&
          !strcmp(e.param, "max_tokens"));
    char *json = openai_messages_error_json(&e);
    CHECK_MSG(json && !strcmp(json, "{\"type\":\"error\",\"error\":{\"type\":"
                                    "\"invalid_request_error\",\"message\":\"max_tokens: Field "
                                    "required\"}}"),
              "%s", json ? json : "(null)");
    free(json);
    static const struct {
        const char *body, *param, *message;
    } refused[] = {
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", "messages[0]",
         "role must be user or assistant"},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]}",
         "messages[0].content", "messages[0].content[0] is a image block"},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":"
         "\"tool_result\",\"tool_use_id\":\"t\"}]}]}",
         "messages[0].content[0]", "a tool_result block is the user's"},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":"
         "[{\"type\":\"bash_20250124\",\"name\":\"bash\"}]}",
         "tools[0]", "tools[0] is a bash_20250124 tool"},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"thinking\":"
         "{\"type\":\"enabled\",\"budget_tokens\":1024}}",
         "thinking", "thinking is not supported"},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}", "n",
         "n: Extra inputs are not permitted"},
        {"{\"max_tokens\":1,\"messages\":[]}", "messages", "non-empty list"},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"stop_sequences\":[\"\"]}",
         "stop_sequences[0]", "must not be empty"},
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        int rc = openai_parse_messages(refused[i].body, strlen(refused[i].body), 0, &r, &e);
        CHECK_MSG(rc == -1 && e.status == 400 && !strcmp(e.param, refused[i].param) &&
                      strstr(e.message, refused[i].message),
                  "%s: %d, param '%s', message '%s'", refused[i].body, rc, e.param, e.message);
        CHECK(r.messages == NULL && r.tools == NULL);
        openai_request_free(&r);
    }
}

int main(void) {
    test_responses();
    test_messages();
    return test_status("test_openai_apis");
}
