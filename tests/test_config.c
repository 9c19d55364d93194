/* test_config.c -- `lockstep serve --config FILE`, --check-config and the
 * logs (--log-format, --log-requests).
 *
 * A valid file gives the settings --check-config prints; the command line
 * overrides them; every bad file (unknown key, bad value, wrong type, a key
 * written in the file, a world-readable key file, a key given twice,
 * broken JSON) is refused with exit code 2 and one message naming the
 * file, the line and the key; the packaged example passes. Then a gateway
 * on a random model, configured by a file (its key from a key file, JSON
 * logs, request lines), takes the key, and logs JSON lines that parse,
 * with the request line's fields and without the prompt's text; without
 * the file its lines are text with a timestamp, level and component. */
#include "runner/runner.h"
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define DEADLINE 120.0

static char config_path[512], key_path[512];

static void write_file(const char *path, const char *text, mode_t mode) {
    FILE *f = fopen(path, "w");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

/* `lockstep serve --check-config --config FILE [more...]` with the file's text. */
static struct test_job check_config(const char *text, char *const more[], const char *const env[]) {
    char *argv[24] = {LOCKSTEP_BIN, "serve", "--check-config", "--config", config_path};
    int n = 5;
    for (int i = 0; more && more[i] && n < 23; i++) argv[n++] = more[i];
    argv[n] = NULL;
    write_file(config_path, text, 0644);
    return test_run_job(argv, DEADLINE, env);
}

static cJSON *settings_of(struct test_job *job, const char *what) {
    cJSON *settings = job->status == 0 ? cJSON_Parse(job->out) : NULL;
    CHECK_MSG(settings != NULL, "%s: status %d, stdout '%s', stderr '%s'", what, job->status,
              job->out, job->err);
    return settings;
}

static double number_at(const cJSON *object, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(object, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static const char *text_at(const cJSON *object, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(object, key);
    return cJSON_IsString(v) ? v->valuestring : "(not a string)";
}

static const cJSON *model_at(const cJSON *settings, int i) {
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(settings, "models"), i);
}

static void test_valid(void) {
    char text[2048], source[700];
    write_file(key_path, "s3cret\nsecond line\n", 0600);
    snprintf(text, sizeof(text),
             "{\n"
             "  \"port\": 9000,\n"
             "  \"tp\": 2,\n"
             "  \"api_key_file\": \"%s\",\n"
             "  \"admin_key_env\": \"TEST_ADMIN\",\n"
             "  \"cors_origins\": [\"https://a.example\", \"https://b.example\"],\n"
             "  \"prefix_cache\": false,\n"
             "  \"watchdog\": 2.5,\n"
             "  \"log_requests\": true,\n"
             "  \"cluster\": [\"localhost slots=4\"],\n"
             "  \"place\": [\"m=tp:2\"],\n"
             "  \"models\": [\n"
             "    {\"path\": \"/nonexistent/m.gguf\", \"name\": \"m\", \"threads\": 3,\n"
             "     \"runner_args\": [\"--kv-type\", \"f32\"]},\n"
             "    {\"path\": \"%s\", \"tp\": 1, \"launcher\": \"mpi\"}\n"
             "  ]\n"
             "}\n",
             key_path, config_path);
    const char *env[] = {"TEST_ADMIN=adm1n-s3cret", NULL};
    struct test_job job = check_config(text, NULL, env);
    cJSON *s = settings_of(&job, "valid file");
    snprintf(source, sizeof(source), "(from file %s)", key_path);
    if (s) {
        const cJSON *m0 = model_at(s, 0), *m1 = model_at(s, 1);
        CHECK_MSG(number_at(s, "port") == 9000, "port %g", number_at(s, "port"));
        CHECK_MSG(!strcmp(text_at(s, "api_key"), source), "api_key %s", text_at(s, "api_key"));
        CHECK_MSG(!strcmp(text_at(s, "admin_key"), "(from $TEST_ADMIN)"), "admin_key %s",
                  text_at(s, "admin_key"));
        CHECK_MSG(!strstr(job.out, "s3cret") && !strstr(job.out, "adm1n-s3cret"),
                  "a key was printed");
        CHECK(number_at(s, "watchdog") == 2.5);
        CHECK(!strcmp(text_at(s, "prefix_cache"), "off"));
        CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "log_requests")));
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(s, "cors_origins")) == 2);
        CHECK(!strcmp(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(s, "cluster"), 0)->valuestring,
            "localhost slots=4"));
        CHECK(!strcmp(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(s, "place"), 0)->valuestring,
            "m=tp:2"));
        /* a top-level model option is every model's default */
        CHECK_MSG(number_at(m0, "tp") == 2 && number_at(m0, "threads") == 3, "model 0 tp %g",
                  number_at(m0, "tp"));
        CHECK(number_at(m1, "tp") == 1 && !strcmp(text_at(m1, "launcher"), "mpi"));
        CHECK(!strcmp(text_at(m0, "name"), "m"));
        CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(m0, "found")));
        CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m1, "found")));
        /* --prefix-cache's arguments, then the model's own */
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(m0, "runner_args");
        CHECK_MSG(cJSON_GetArraySize(args) == 4 &&
                      !strcmp(cJSON_GetArrayItem(args, 0)->valuestring, "--prefix-cache") &&
                      !strcmp(cJSON_GetArrayItem(args, 3)->valuestring, "f32"),
                  "runner_args of model 0: %d", cJSON_GetArraySize(args));
    }
    cJSON_Delete(s);
    test_job_free(&job);

    /* the command line overrides: a value, a list, model defaults; -m replaces the models */
    char *more[] = {"--port", "7", "--cors-origin", "*", "--threads", "5", NULL};
    job = check_config(text, more, env);
    s = settings_of(&job, "file and command line");
    if (s) {
        CHECK(number_at(s, "port") == 7);
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(s, "cors_origins")) == 1);
        CHECK(number_at(model_at(s, 0), "threads") == 5 &&
              number_at(model_at(s, 1), "threads") == 5);
    }
    cJSON_Delete(s);
    test_job_free(&job);
    char *models[] = {"-m", "/other.gguf", "--api-key", "k", NULL};
    job = check_config(text, models, env);
    s = settings_of(&job, "-m over the file's models");
    if (s) {
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(s, "models")) == 1);
        CHECK(!strcmp(text_at(model_at(s, 0), "path"), "/other.gguf"));
        CHECK_MSG(number_at(model_at(s, 0), "tp") == 2, "the file's default tp: %g",
                  number_at(model_at(s, 0), "tp"));
        CHECK_MSG(!strcmp(text_at(s, "api_key"), "(from option --api-key)"), "%s",
                  text_at(s, "api_key"));
    }
    cJSON_Delete(s);
    test_job_free(&job);
}

/* Each bad file: exit code 2, and stderr is one line holding want. */
static void test_errors(void) {
    char world[1024], text[1024];
    write_file(key_path, "s3cret\n", 0644);
    snprintf(world, sizeof(world), "{\n  \"api_key_file\": \"%s\",\n  \"models\": []\n}\n",
             key_path);
    const struct {
        const char *text, *want;
    } cases[] = {
        {"{\n  \"port\": 80,\n  \"prot\": 1\n}\n", ":3: prot: unknown key"},
        {"{\n  \"port\": 70000\n}\n", ":2: port: '70000' is not an integer in [0, 65535]"},
        {"{\n\n  \"port\": \"80\"\n}\n", ":3: port: expected an integer"},
        {"{\"watchdog\": 0.01}", ":1: watchdog: 0.01 is not between 0.1 and 3600 seconds"},
        {"{\"watchdog\": 1e308}", ":1: watchdog: 1e+308 is not between 0.1 and 3600 seconds"},
        {"{\"probe_interval\": 1e9}",
         ":1: probe_interval: 1e+09 is not between 0.1 and 3600 seconds"},
        {"{\n  \"models\": [{\"path\": \"a\",\n    \"name\": \"ab\\u0000c\"}]\n}\n",
         ":3: models[0].name: the string holds \\u0000 (a NUL character), which no setting may "
         "contain"},
        {"{\n  \"models\": [\n    {\"path\": \"a\"},\n    {\"path\": \"b\", \"tp\": 0}\n  ]\n}\n",
         ":4: models[1].tp: '0' is not an integer in [1, 64]"},
        {"{\n  \"models\": [{\"path\": \"a\", \"port\": 1}]\n}\n",
         ":2: models[0].port: not a model setting"},
        {"{\n  \"models\": [{\"name\": \"a\"}]\n}\n", ":2: models[0]: no \"path\""},
        {"{\n  \"api_key\": \"k\"\n}\n", ":2: api_key: a key is not written in the configuration"},
        {"{\n  \"port\": 1,\n  \"port\": 2\n}\n", ":3: port: given twice (first on line 2)"},
        {"{\n  \"port\": 1,\n  ]\n}\n", ":3: not valid JSON"},
        {"{\n  \"launcher\": \"ssh\"\n}\n", ":2: launcher: 'ssh' is not local or mpi"},
        {"{\n  \"log_format\": \"xml\"\n}\n", ":2: log_format: 'xml' is not text or json"},
        {"{\n  \"api_key_env\": \"TEST_UNSET_KEY\"\n}\n",
         ":2: api_key_env: the environment variable TEST_UNSET_KEY is not set"},
        {"{\n  \"models\": [{\"path\": \"a\",\n    \"runner_args\": \"--kv-type\"}]\n}\n",
         ":3: models[0].runner_args: expected an array of at most 32 strings"},
        {"{\n  \"cors_origins\": [\"a\",\n    7]\n}\n", ":3: cors_origins[1]: expected a string"},
        {"{\n  \"cluster\": [\"localhost slots=2\",\n    \"b slots=x\"]\n}\n",
         ":3: cluster[1]: bad number in 'slots=x'"},
        {world, ":2: api_key_file: "},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct test_job job = check_config(cases[i].text, NULL, NULL);
        snprintf(text, sizeof(text), "lockstep serve: %s%s", config_path, cases[i].want);
        const char *newline = job.err ? strchr(job.err, '\n') : NULL;
        CHECK_MSG(job.status == 2 && job.err && strstr(job.err, text) && newline && !newline[1],
                  "case %zu: status %d, stderr '%s', want '%s'", i, job.status, job.err, text);
        if (cases[i].text == world)
            CHECK_MSG(strstr(job.err, "world-readable"), "world-readable: %s", job.err);
        test_job_free(&job);
    }
}

static void test_packaged(void) {
    char packaged[1024];
    snprintf(packaged, sizeof(packaged), "%s/packaging/lockstep.conf", LOCKSTEP_SOURCE_DIR);
    char *argv[] = {LOCKSTEP_BIN, "serve", "--check-config", "--config", packaged, NULL};
    struct test_job job = test_run_job(argv, DEADLINE, NULL);
    cJSON *s = settings_of(&job, "packaging/lockstep.conf");
    CHECK(s && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(s, "models")) >= 1);
    cJSON_Delete(s);
    test_job_free(&job);
}

/* log_format_line: the line's shape, and JSON escaping. */
static void test_log_lines(void) {
    char line[512];
    struct log_field fields[] = {{"status", NULL, 200}, {"client", "127.0.0.1", 0}, {"id", "", 0}};
    log_set_format(LOG_FORMAT_TEXT);
    log_format_line(line, sizeof(line), 86400.25, LOG_LEVEL_WARN, "gateway", "two\nlines", fields,
                    3);
    CHECK_MSG(!strcmp(line, "1970-01-02T00:00:00.250Z warn gateway: two\\nlines status=200 "
                            "client=127.0.0.1 id=-\n"),
              "%s", line);
    log_set_format(LOG_FORMAT_JSON);
    log_format_line(line, sizeof(line), 0, LOG_LEVEL_INFO, "serve", "say \"hi\"\t", fields, 2);
    cJSON *j = cJSON_Parse(line);
    CHECK_MSG(j && !strcmp(text_at(j, "time"), "1970-01-01T00:00:00.000Z") &&
                  !strcmp(text_at(j, "level"), "info") &&
                  !strcmp(text_at(j, "message"), "say \"hi\"\t") && number_at(j, "status") == 200,
              "%s", line);
    cJSON_Delete(j);
    CHECK(log_format_line(line, 16, 0, LOG_LEVEL_INFO, "serve", "too long", NULL, 0) == -1);
    log_set_format(LOG_FORMAT_TEXT);
}

/* Waits until the file holds text; returns its contents (malloc'd) or NULL. */
static char *wait_for_text(const char *path, const char *text) {
    for (double start = test_now(); test_now() - start < DEADLINE;) {
        char *all = test_read_file(path, NULL);
        if (all && strstr(all, text)) return all;
        free(all);
        struct timespec nap = {0, 20000000};
        nanosleep(&nap, NULL);
    }
    return NULL;
}

/* Every line of a JSON log parses, with time, level, component and message. */
static void check_json_lines(const char *log) {
    int lines = 0;
    for (const char *at = log; *at;) {
        const char *end = strchr(at, '\n');
        size_t n = end ? (size_t)(end - at) : strlen(at);
        cJSON *j = cJSON_ParseWithLength(at, n);
        CHECK_MSG(j && strlen(text_at(j, "time")) == 24 &&
                      strcmp(text_at(j, "level"), "(not a string)") != 0 &&
                      strcmp(text_at(j, "component"), "(not a string)") != 0 &&
                      strcmp(text_at(j, "message"), "(not a string)") != 0,
                  "not a JSON log line: %.*s", (int)n, at);
        cJSON_Delete(j);
        lines++;
        at += n + (end != NULL);
    }
    CHECK_MSG(lines >= 2, "%d log lines", lines);
}

/* The JSON log line holding text (a copy), or NULL. */
static cJSON *line_with(const char *log, const char *text) {
    const char *at = strstr(log, text), *start = at;
    while (start && start > log && start[-1] != '\n') start--;
    const char *end = at ? strchr(at, '\n') : NULL;
    return start && end ? cJSON_ParseWithLength(start, (size_t)(end - start)) : NULL;
}

static void check_request_line(const char *log) {
    cJSON *r = line_with(log, "\"id\":\"cmpl-");
    CHECK_MSG(r != NULL, "no request line in %s", log);
    if (!r) return;
    CHECK_MSG(!strncmp(text_at(r, "id"), "cmpl-", 5), "id %s", text_at(r, "id"));
    CHECK(!strcmp(text_at(r, "model"), "config-random"));
    CHECK(!strcmp(text_at(r, "client"), "127.0.0.1"));
    CHECK(number_at(r, "status") == 200);
    CHECK_MSG(number_at(r, "prompt_tokens") >= 1 && number_at(r, "generated_tokens") == 3,
              "tokens %g %g", number_at(r, "prompt_tokens"), number_at(r, "generated_tokens"));
    CHECK_MSG(number_at(r, "ttft") > 0 && number_at(r, "duration") >= number_at(r, "ttft"),
              "ttft %g duration %g", number_at(r, "ttft"), number_at(r, "duration"));
    cJSON_Delete(r);
}

static void test_request_log(const char *model) {
    struct test_service gateway;
    char text[1024];
    snprintf(text, sizeof(text),
             "{\"api_key_file\": \"%s\", \"log_format\": \"json\", \"log_requests\": true}",
             key_path);
    write_file(config_path, text, 0644);
    write_file(key_path, "s3cret\n", 0600);
    char *extra[] = {"--name", "config-random", "--config", config_path, NULL};
    int port = test_start_gateway(&gateway, model, extra, NULL, DEADLINE);
    CHECK_MSG(port > 0, "the gateway did not start");
    /* the key is the file's */
    struct test_http h = test_http_request(port, "GET", "/v1/models", NULL, NULL, 10);
    CHECK_MSG(port <= 0 || h.status == 401, "no key: %d", h.status);
    test_http_free(&h);
    const char *body = "{\"model\":\"config-random\",\"prompt\":\"zebracadabra\",\"max_tokens\":3,"
                       "\"temperature\":0,\"ignore_eos\":true}";
    h = test_http_request(port, "POST", "/v1/completions", "Authorization: Bearer s3cret\r\n", body,
                          60);
    CHECK_MSG(port <= 0 || h.status == 200, "completion: %d %s", h.status, h.body ? h.body : "");
    test_http_free(&h);
    char *log = port > 0 ? wait_for_text(gateway.err_path, "\"id\":\"cmpl-") : NULL;
    CHECK_MSG(port <= 0 || log != NULL, "no request line");
    if (log) {
        check_json_lines(log);
        check_request_line(log);
        CHECK_MSG(!strstr(log, "zebracadabra"), "the prompt's text is in the log");
    }
    free(log);
    CHECK_MSG(test_stop_service(&gateway, 20) == 0, "gateway exit status %d", gateway.status);
}

/* Text lines: `TIME LEVEL COMPONENT: message`, the message as before. */
static void test_text_log(const char *model) {
    struct test_service gateway;
    int port = test_start_gateway(&gateway, model, NULL, NULL, DEADLINE);
    CHECK_MSG(port > 0, "the gateway did not start");
    char *log = port > 0 ? wait_for_text(gateway.err_path, "(runner pid") : NULL;
    const char *line = log ? strstr(log, " info gateway: ") : NULL;
    while (line && line > log && line[-1] != '\n') line--;
    CHECK_MSG(line && strlen(line) > 24 && line[4] == '-' && line[10] == 'T' && line[19] == '.' &&
                  line[23] == 'Z' && !strncmp(line + 24, " info gateway: ", 15),
              "text log: %s", log ? log : "(none)");
    free(log);
    CHECK_MSG(test_stop_service(&gateway, 20) == 0, "gateway exit status %d", gateway.status);
}

int main(void) {
    char model[512];
    test_tmp_path(config_path, sizeof(config_path), "config-test.json");
    test_tmp_path(key_path, sizeof(key_path), "config-test.key");
    test_valid();
    test_errors();
    test_packaged();
    test_log_lines();
    test_tmp_path(model, sizeof(model), "config-random.gguf");
    char *shape[] = {"--dim",   "64",  "--hidden", "128", "--layers", "1",    "--heads", "4",
                     "--vocab", "512", "--ctx",    "64",  "--type",   "q8_0", NULL};
    if (test_write_random_model(model, shape)) {
        test_request_log(model);
        test_text_log(model);
    }
    CHECK(test_kill_children() == 0);
    remove(config_path);
    remove(key_path);
    return test_status("test_config");
}
