/* test_gateway_prefix.c -- the prefix cache seen from the HTTP API.
 *
 * On ../shared/models/kjv2m-q8_0.gguf (skipped without it), with a long
 * system prompt shared by chat requests at temperature 0:
 *   - the first request finds nothing cached; one with the same system
 *     prompt and another question finds a whole number of blocks of it
 *     cached, fewer than its prompt; the first request again finds all of
 *     its prompt but the last block's worth (its last token is always
 *     computed); usage.prompt_tokens_details.cached_tokens says so;
 *   - every answer's text is the text a server with --prefix-cache off
 *     gives, which reports nothing cached;
 *   - /metrics: lockstep_prompt_tokens_cached_total is the sum of what the
 *     answers reported, lockstep_kv_blocks_cached is above 0;
 *   - n=3 on a fresh server: the choices share the prompt's blocks, so the
 *     request reports them cached though no earlier request had it.
 * ctest-labels: concurrency */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEADLINE 120.0
#define MODEL    "kjv2m-q8_0"
#define BLOCK    16 /* the runner's default --kv-block */

static char model_path[512];
static int port;

/* Starts `lockstep serve` with extra options (NULL-terminated) and waits
 * for /health to say the runner is ready. */
static int start_gateway(struct test_service *s, char *const extra[]) {
    port = test_start_gateway(s, model_path, extra, NULL, DEADLINE);
    return port > 0;
}

/* What one answer said. */
struct answer {
    char text[3][2048]; /* each choice's message content */
    int n_choices;
    int prompt_tokens;
    int cached_tokens; /* usage.prompt_tokens_details.cached_tokens, -1 if absent */
};

static int number(const cJSON *object, const char *key) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, key);
    return cJSON_IsNumber(item) ? item->valueint : -1;
}

static const char system_prompt[] =
    "In the beginning God created the heaven and the earth. And the earth was without form, "
    "and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the "
    "face of the waters. And God said, Let there be light: and there was light. And God saw the "
    "light, that it was good: and God divided the light from the darkness. And God called the "
    "light Day, and the darkness he called Night. And the evening and the morning were the first "
    "day.";

/* A chat request: the shared system prompt, then question; n choices. */
static struct answer ask(const char *question, int n) {
    char body[4096];
    struct answer a = {.cached_tokens = -1};
    snprintf(body, sizeof(body),
             "{\"model\":\"" MODEL "\",\"max_tokens\":12,\"temperature\":0,\"n\":%d,"
             "\"messages\":[{\"role\":\"system\",\"content\":\"%s\"},"
             "{\"role\":\"user\",\"content\":\"%s\"}]}",
             n, system_prompt, question);
    struct test_http h = test_http_request(port, "POST", "/v1/chat/completions", NULL, body, 60);
    CHECK_MSG(h.status == 200, "status %d: %s", h.status, h.body ? h.body : "");
    cJSON *j = h.status == 200 ? cJSON_Parse(h.body) : NULL;
    const cJSON *choices = cJSON_GetObjectItem(j, "choices");
    a.n_choices = cJSON_GetArraySize(choices);
    for (int i = 0; i < a.n_choices && i < 3; i++) {
        const cJSON *message = cJSON_GetObjectItem(cJSON_GetArrayItem(choices, i), "message");
        const cJSON *content = cJSON_GetObjectItem(message, "content");
        snprintf(a.text[i], sizeof(a.text[i]), "%s",
                 cJSON_IsString(content) ? content->valuestring : "");
    }
    const cJSON *usage = cJSON_GetObjectItem(j, "usage");
    a.prompt_tokens = number(usage, "prompt_tokens");
    a.cached_tokens = number(cJSON_GetObjectItem(usage, "prompt_tokens_details"), "cached_tokens");
    cJSON_Delete(j);
    test_http_free(&h);
    return a;
}

static double metric(const char *prefix) {
    struct test_http h = test_http_request(port, "GET", "/metrics", NULL, NULL, 10);
    const char *at = h.body ? strstr(h.body, prefix) : NULL;
    double value = at ? atof(at + strlen(prefix)) : -1;
    test_http_free(&h);
    return value;
}

#define CACHED_TOTAL                                                                               \
    "lockstep_prompt_tokens_cached_total{model=\"" MODEL "\",instance=\"" MODEL "-1\"} "
#define KV_CACHED "lockstep_kv_blocks_cached{model=\"" MODEL "\",instance=\"" MODEL "-1\"} "

/* Waits until the counter reaches target (a request is counted once it is
 * over on the gateway's side, a moment after its answer); returns it. */
static double metric_reaching(const char *prefix, double target) {
    double value = metric(prefix);
    for (double start = test_now(); value < target && test_now() - start < 30;) {
        struct timespec nap = {0, 10000000};
        nanosleep(&nap, NULL);
        value = metric(prefix);
    }
    return value;
}

static const char *questions[] = {"Who divided the light?", "What was upon the deep?"};

/* The three requests on a server with the cache on; fills answers. */
static void test_cache_on(struct answer *answers) {
    answers[0] = ask(questions[0], 1);
    answers[1] = ask(questions[1], 1);
    answers[2] = ask(questions[0], 1);
    const struct answer *first = &answers[0], *other = &answers[1], *again = &answers[2];
    CHECK_MSG(first->prompt_tokens > 4 * BLOCK, "a prompt of %d tokens", first->prompt_tokens);
    CHECK_MSG(first->cached_tokens == 0, "the first request found %d cached", first->cached_tokens);
    CHECK_MSG(other->cached_tokens >= 4 * BLOCK && other->cached_tokens % BLOCK == 0 &&
                  other->cached_tokens < other->prompt_tokens,
              "another question found %d of %d cached", other->cached_tokens, other->prompt_tokens);
    CHECK_MSG(again->cached_tokens == (again->prompt_tokens - 1) / BLOCK * BLOCK,
              "the same request again found %d of %d cached", again->cached_tokens,
              again->prompt_tokens);
    CHECK_MSG(!strcmp(first->text[0], again->text[0]), "the same request answered '%s', then '%s'",
              first->text[0], again->text[0]);
    double want = first->cached_tokens + other->cached_tokens + again->cached_tokens;
    double total = metric_reaching(CACHED_TOTAL, want);
    CHECK_MSG(total == want, "%s is %g, the answers said %g", CACHED_TOTAL, total, want);
    CHECK_MSG(metric(KV_CACHED) > 0, "%s is %g", KV_CACHED, metric(KV_CACHED));
}

/* The same requests with the cache off: the same texts, nothing cached. */
static void test_cache_off(const struct answer *on) {
    for (int i = 0; i < 3; i++) {
        struct answer off = ask(questions[i % 2], 1);
        CHECK_MSG(off.cached_tokens == 0, "cache off: %d tokens cached", off.cached_tokens);
        CHECK_MSG(!strcmp(off.text[0], on[i].text[0]),
                  "request %d: '%s' with the cache, '%s' without", i, on[i].text[0], off.text[0]);
    }
}

/* n=3 first thing on a fresh server: the choices share the prompt. */
static void test_choices_share(void) {
    struct answer a = ask(questions[1], 3);
    CHECK(a.n_choices == 3);
    CHECK_MSG(a.cached_tokens == (a.prompt_tokens - 1) / BLOCK * BLOCK,
              "n=3 on a fresh server: %d of %d prompt tokens cached", a.cached_tokens,
              a.prompt_tokens);
    for (int i = 1; i < 3; i++)
        CHECK_MSG(!strcmp(a.text[i], a.text[0]), "greedy choice %d: '%s', choice 0 '%s'", i,
                  a.text[i], a.text[0]);
}

int main(void) {
    struct test_service gateway;
    static struct answer on[3];
    if (!test_require_file(
            test_shared_path(model_path, sizeof(model_path), "models/kjv2m-q8_0.gguf")))
        return TEST_SKIP_CODE;
    char *cache_on[] = {NULL}, *cache_off[] = {"--prefix-cache", "off", NULL};
    CHECK_MSG(start_gateway(&gateway, cache_on), "the gateway did not start");
    test_cache_on(on);
    CHECK_MSG(test_stop_service(&gateway, 20) == 0, "gateway exit status %d", gateway.status);
    CHECK_MSG(start_gateway(&gateway, cache_off), "the gateway did not start (cache off)");
    test_cache_off(on);
    CHECK_MSG(test_stop_service(&gateway, 20) == 0, "gateway exit status %d", gateway.status);
    CHECK_MSG(start_gateway(&gateway, cache_on), "the gateway did not start (n=3)");
    test_choices_share();
    CHECK_MSG(test_stop_service(&gateway, 20) == 0, "gateway exit status %d", gateway.status);
    CHECK(test_kill_children() == 0);
    return test_status("test_gateway_prefix");
}
