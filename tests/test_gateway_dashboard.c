/* test_gateway_dashboard.c -- the dashboard's files, embedded in the
 * binary (cmake/embed.cmake) and served by `lockstep serve`.
 *
 *   - http_dashboard_asset maps "/", "/dashboard" and "/dashboard/" to
 *     index.html and "/dashboard/NAME" to the other files, byte for byte
 *     the files in src/gateway/http/dashboard/ (so a rebuild took the latest),
 *     each with its content type and a NUL after it; any other
 *     "/dashboard/..." is -1 (404), any other URL 0 (not the dashboard's);
 *   - the page can load nothing from elsewhere: the only URL in any file
 *     is the SVG namespace, and there is no inline script or style (the
 *     Content-Security-Policy would refuse them);
 *   - over HTTP, on a gateway with --api-key: the page and its files are
 *     200 without the key, with Cache-Control: no-cache and the policy;
 *     an unknown file is a 404 in OpenAI's error shape naming it; the API
 *     still wants the key, and POST / is not the page. */
#include "testutil.h"

#include "gateway/http/dashboard.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#ifndef LOCKSTEP_DASHBOARD_DIR
#error "LOCKSTEP_DASHBOARD_DIR (src/gateway/http/dashboard) is set by test_gateway_dashboard.cmake"
#endif

#define DEADLINE 120.0
#define KEY      "dash-key"

/* The page's files, as their URL, name and content type. */
static const struct {
    const char *url;
    const char *name;
    const char *type;
} files[] = {
    {"/", "index.html", "text/html; charset=utf-8"},
    {"/dashboard", "index.html", "text/html; charset=utf-8"},
    {"/dashboard/", "index.html", "text/html; charset=utf-8"},
    {"/dashboard/dashboard.js", "dashboard.js", "text/javascript; charset=utf-8"},
    {"/dashboard/dashboard.css", "dashboard.css", "text/css; charset=utf-8"},
};
#define N_FILES ((int)(sizeof(files) / sizeof(files[0])))

/* The source of a file of the page (malloc'd), or NULL. */
static char *source(const char *name, size_t *size) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", LOCKSTEP_DASHBOARD_DIR, name);
    char *text = test_read_file(path, size);
    CHECK_MSG(text != NULL, "cannot read %s", path);
    return text;
}

static void test_lookup(void) {
    for (int i = 0; i < N_FILES; i++) {
        const unsigned char *body = NULL;
        const char *type = NULL;
        size_t length = 0, size = 0;
        CHECK_MSG(http_dashboard_asset(files[i].url, &body, &length, &type) == 1, "%s",
                  files[i].url);
        char *want = source(files[i].name, &size);
        CHECK_MSG(want && body && length == size && !memcmp(body, want, size),
                  "%s: %zu bytes embedded, %zu in %s", files[i].url, length, size, files[i].name);
        CHECK_MSG(body && body[length] == '\0', "%s: no NUL after the file", files[i].url);
        CHECK_MSG(type && !strcmp(type, files[i].type), "%s: %s", files[i].url, type);
        free(want);
    }
    static const char *const missing[] = {"/dashboard/index.html", "/dashboard/nope.js",
                                          "/dashboard/../dashboard.js", "/dashboard//"};
    static const char *const others[] = {"/dashboardx", "/v1/models", "/health", "/index.html", ""};
    const unsigned char *body;
    size_t length;
    const char *type;
    for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++)
        CHECK_MSG(http_dashboard_asset(missing[i], &body, &length, &type) == -1, "%s", missing[i]);
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++)
        CHECK_MSG(http_dashboard_asset(others[i], &body, &length, &type) == 0, "%s", others[i]);
    CHECK(dashboard_n_files == 3);
}

/* Nothing in the page points elsewhere or needs 'unsafe-inline'. */
static void test_self_contained(void) {
    for (int i = 0; i < dashboard_n_files; i++) {
        const struct dashboard_file *f = &dashboard_files[i];
        const char *text = (const char *)f->bytes;
        for (const char *at = strstr(text, "//"); at; at = strstr(at + 2, "//")) {
            /* "//" starts comments in the JS; a URL has a scheme before it */
            int url = at > text && at[-1] == ':';
            CHECK_MSG(!url || !strncmp(at - 5, "http://www.w3.org/2000/svg", 26),
                      "%s: a URL: %.40s", f->name, at - 6 > text ? at - 6 : text);
        }
        CHECK_MSG(!strstr(text, "@import") && !strstr(text, "url("), "%s: loads CSS", f->name);
        if (strcmp(f->name, "index.html") != 0) continue;
        CHECK_MSG(!strstr(text, "<style") && !strstr(text, " style="), "inline style");
        for (const char *at = strstr(text, "<script"); at; at = strstr(at + 1, "<script")) {
            const char *end = strchr(at, '>');
            CHECK_MSG(end && memmem(at, (size_t)(end - at), " src=\"/dashboard/", 17),
                      "a script that is not one of the page's files: %.60s", at);
        }
    }
}

static void test_http(int port) {
    for (int i = 0; i < N_FILES; i++) {
        size_t size = 0;
        char *want = source(files[i].name, &size);
        struct test_http h = test_http_request(port, "GET", files[i].url, NULL, NULL, 30);
        const char *headers = h.headers ? h.headers : "";
        CHECK_MSG(h.status == 200, "GET %s without the key: %d", files[i].url, h.status);
        CHECK_MSG(want && h.length == size && !memcmp(h.body, want, size), "GET %s: body",
                  files[i].url);
        CHECK_MSG(strcasestr(headers, "Cache-Control: no-cache\r\n"), "GET %s: %s", files[i].url,
                  headers);
        CHECK_MSG(strcasestr(headers, "Content-Security-Policy: " DASHBOARD_CSP "\r\n"),
                  "GET %s: %s", files[i].url, headers);
        char type[128];
        snprintf(type, sizeof(type), "Content-Type: %s\r\n", files[i].type);
        CHECK_MSG(strcasestr(headers, type), "GET %s: %s", files[i].url, headers);
        test_http_free(&h);
        free(want);
    }
    struct test_http h = test_http_request(port, "GET", "/dashboard/nope.js", NULL, NULL, 30);
    cJSON *j = h.body ? cJSON_Parse(h.body) : NULL;
    const char *message =
        cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message"));
    CHECK_MSG(h.status == 404 && message &&
                  !strcmp(message, "no dashboard file /dashboard/nope.js"),
              "GET /dashboard/nope.js: %d %s", h.status, h.body ? h.body : "");
    cJSON_Delete(j);
    test_http_free(&h);
    h = test_http_request(port, "GET", "/v1/models", NULL, NULL, 30);
    CHECK_MSG(h.status == 401, "GET /v1/models without the key: %d", h.status);
    test_http_free(&h);
    h = test_http_request(port, "POST", "/", "Authorization: Bearer " KEY "\r\n", "{}", 30);
    CHECK_MSG(h.status == 404, "POST /: %d", h.status);
    test_http_free(&h);
}

int main(void) {
    char model_path[512];
    struct test_service gateway = {0};
    test_lookup();
    test_self_contained();
    test_tmp_path(model_path, sizeof(model_path), "dashboard-random.gguf");
    char *shape[] = {"--dim",   "64",  "--hidden", "128", "--layers", "1",    "--heads", "4",
                     "--vocab", "512", "--ctx",    "64",  "--type",   "q8_0", NULL};
    if (!test_write_random_model(model_path, shape)) return test_status("test_gateway_dashboard");
    char *extra[] = {"--api-key", KEY, NULL};
    int port = test_start_gateway(&gateway, model_path, extra, NULL, DEADLINE);
    CHECK_MSG(port > 0, "the gateway did not start");
    if (port > 0) test_http(port);
    CHECK_MSG(test_stop_service(&gateway, 20) == 0, "gateway exit status %d", gateway.status);
    CHECK(test_kill_children() == 0);
    return test_status("test_gateway_dashboard");
}
