/* test_cli.c -- the lockstep command end to end: generate, tokenize,
 * convert and bench, their --help, and one-line errors for bad input.
 *
 * Generation on the real model must print exactly the text llama2.c's run.c
 * printed for the same prompt, with a float and with a half-precision
 * key/value cache (../shared/models/reference.json); the parts
 * that need ../shared are skipped (with a message) when it is absent. */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#define DEADLINE 120.0

static struct test_job run_argv(const char **argv) {
    return test_run_job((char *const *)argv, DEADLINE, NULL);
}

/* run("generate", "-m", ...): runs the lockstep binary with these arguments. */
#define run(...) run_argv((const char *[]){LOCKSTEP_BIN, __VA_ARGS__, NULL})

/* Exactly one line on stderr that contains `needle`, and a failing status. */
static void check_error(struct test_job o, const char *needle, const char *what) {
    const char *newline = strchr(o.err, '\n');
    CHECK_MSG(o.status != 0 && !o.timed_out, "%s: status %d", what, o.status);
    CHECK_MSG(strstr(o.err, needle) != NULL, "%s: stderr '%s' lacks '%s'", what, o.err, needle);
    CHECK_MSG(newline && newline[1] == '\0', "%s: not one line: '%s'", what, o.err);
}

static void test_help(void) {
    static const char *commands[] = {"generate", "bench", "convert", "tokenize"};
    for (size_t i = 0; i < 4; i++) {
        struct test_job o = run(commands[i], "--help");
        CHECK_MSG(o.status == 0 && strstr(o.out, "usage: lockstep") != NULL, "%s --help",
                  commands[i]);
        test_job_free(&o);
    }
    struct test_job o = run("frobnicate");
    check_error(o, "unknown command 'frobnicate'", "unknown command");
    test_job_free(&o);
}

static void test_errors(const char *tmp_model) {
    struct test_job o = run("generate", "-m", "/nonexistent/model.gguf");
    check_error(o, "/nonexistent/model.gguf", "missing model");
    test_job_free(&o);
    o = run("generate", "-m", tmp_model, "-n", "many");
    CHECK(o.status == 2 && strstr(o.err, "-n: 'many' is not an integer") != NULL);
    test_job_free(&o);
    o = run("generate", "-m", tmp_model, "--kv-type", "q4_0");
    CHECK(o.status == 2 && strstr(o.err, "--kv-type: 'q4_0' is not f16, f32 or q8_0") != NULL);
    test_job_free(&o);
    o = run("convert", "--random", "--type", "iq2_xs", "-o", "/dev/null");
    CHECK(o.status == 2 && strstr(o.err, "--type 'iq2_xs' is not a type lockstep writes") != NULL);
    test_job_free(&o);

    /* a model file cut short names the file */
    char cut[512];
    test_tmp_path(cut, sizeof(cut), "cut.gguf");
    FILE *in = fopen(tmp_model, "rb"), *out = fopen(cut, "wb");
    char buf[3000];
    size_t got = in ? fread(buf, 1, sizeof(buf), in) : 0;
    if (out) fwrite(buf, 1, got, out);
    if (in) fclose(in);
    if (out) fclose(out);
    o = run("generate", "-m", cut, "-p", "hi");
    check_error(o, cut, "truncated model");
    test_job_free(&o);
    remove(cut);
}

/* A random model: convert writes it, generate and bench run on it. */
static void test_random_model(const char *path) {
    struct test_job o = run("convert", "--random", "--dim", "64", "--hidden", "128", "--layers",
                            "2", "--type", "q8_0", "-o", path);
    CHECK_MSG(o.status == 0, "convert --random: %s", o.err);
    test_job_free(&o);
    o = run("generate", "-m", path, "-p", "hello world", "-n", "12", "--seed", "5");
    struct test_job again =
        run("generate", "-m", path, "-p", "hello world", "-n", "12", "--seed", "5");
    CHECK_MSG(o.status == 0, "generate on a random model: %s", o.err);
    CHECK(strncmp(o.out, "hello world", 11) == 0);
    CHECK_MSG(strcmp(o.out, again.out) == 0, "same seed, different text");
    CHECK_MSG(strstr(o.err, "generation: 12 tokens") != NULL, "stats: %s", o.err);
    test_job_free(&o);
    test_job_free(&again);
    /* no prompt: the byte-level vocabulary adds no BOS, so generation starts from it */
    o = run("generate", "-m", path, "-n", "4", "--temp", "0");
    CHECK_MSG(o.status == 0 && strstr(o.err, "prompt: 1 tokens") &&
                  strstr(o.err, "generation: 4 tokens"),
              "generate without a prompt: %s", o.err);
    test_job_free(&o);
    o = run("bench", "-m", path, "-p", "16", "-n", "8", "--reps", "2");
    CHECK_MSG(o.status == 0 && strstr(o.out, "| pp16") && strstr(o.out, "| tg8") &&
                  strstr(o.out, "GB/s") && strstr(o.out, "f16 KV cache"),
              "bench: %s%s", o.out, o.err);
    test_job_free(&o);
    o = run("bench", "-m", path, "-p", "16", "-n", "8", "-d", "40", "-b", "16", "--reps", "1");
    CHECK_MSG(o.status == 0 && strstr(o.out, "| pp16 @ d40") && strstr(o.out, "| tg8 @ d40"),
              "bench -d 40: %s%s", o.out, o.err);
    test_job_free(&o);
    o = run("bench", "-m", path, "-p", "16", "-n", "8", "--reps", "1", "--kv-type", "f32");
    CHECK_MSG(o.status == 0 && strstr(o.out, "f32 KV cache"), "bench --kv-type f32: %s%s", o.out,
              o.err);
    test_job_free(&o);
    o = run("bench", "-m", path, "-p", "16", "-n", "8", "--reps", "1", "--profile");
    CHECK_MSG(o.status == 0 && strstr(o.out, "pp16, ms per token: products ") &&
                  strstr(o.out, "tg8, ms per token: products ") && strstr(o.out, "attention ") &&
                  strstr(o.out, "per-token work ") && strstr(o.out, "rest "),
              "bench --profile: %s%s", o.out, o.err);
    test_job_free(&o);
    /* this model's heads have 16 elements: too few for Q8_0 blocks */
    o = run("generate", "-m", path, "-p", "hi", "-n", "2", "--kv-type", "q8_0");
    check_error(o, "q8_0 needs a head dimension divisible by 32; this model's is 16",
                "generate --kv-type q8_0");
    test_job_free(&o);
}

/* The reference text of prompt i from reference.json, generated by run.c. */
static char *reference_text(int i, char *prompt, size_t prompt_size) {
    char path[1024];
    test_shared_path(path, sizeof(path), "models/reference.json");
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char json[1 << 17];
    size_t n = fread(json, 1, sizeof(json) - 1, f);
    fclose(f);
    json[n] = '\0';
    cJSON *root = cJSON_Parse(json);
    cJSON *c = cJSON_GetArrayItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(root, "generate"), "llama2c"), i);
    snprintf(prompt, prompt_size, "%s", cJSON_GetObjectItem(c, "prompt")->valuestring);
    char *text = strdup(cJSON_GetObjectItem(c, "text")->valuestring);
    cJSON_Delete(root);
    return text;
}

static void test_real_model(void) {
    char bin[1024], tok[1024], gguf[1024], converted[512];
    test_shared_path(bin, sizeof(bin), "models/kjv2m.bin");
    test_shared_path(tok, sizeof(tok), "models/tok1024.bin");
    test_shared_path(gguf, sizeof(gguf), "models/kjv2m-f32.gguf");
    test_tmp_path(converted, sizeof(converted), "converted-q8_0.gguf");
    for (int i = 0; i < 3; i++) {
        char prompt[4096], expected[8192];
        char *text = reference_text(i, prompt, sizeof(prompt));
        snprintf(expected, sizeof(expected), "%s%s\n", prompt, text);
        /* run.c's float cache, and the default half-precision one */
        struct test_job a = run("generate", "-m", bin, "-z", tok, "-p", prompt, "-n", "48",
                                "--temp", "0", "--kv-type", "f32");
        struct test_job b = run("generate", "-m", gguf, "-p", prompt, "-n", "48", "--temp", "0");
        CHECK_MSG(strcmp(a.out, expected) == 0, "llama2.c file, prompt %d:\n got '%s'\nwant '%s'",
                  i, a.out, expected);
        CHECK_MSG(strcmp(b.out, expected) == 0, "GGUF file, prompt %d:\n got '%s'\nwant '%s'", i,
                  b.out, expected);
        test_job_free(&a);
        test_job_free(&b);
        free(text);
    }
    /* tokenize prints the ids of the exact text, BOS first */
    struct test_job o = run("tokenize", "-m", gguf, "In the beginning");
    struct test_job z = run("tokenize", "-m", bin, "-z", tok, "In the beginning");
    /* the ids reference.json lists for this prompt */
    CHECK_MSG(o.status == 0 && strcmp(o.out, "1 299 968 261 810 267 968 294\n") == 0,
              "tokenize: '%s' %s", o.out, o.err);
    CHECK_MSG(strcmp(o.out, z.out) == 0, "tokenize: GGUF '%s' vs tokenizer.bin '%s'", o.out, z.out);
    test_job_free(&z);
    /* convert the llama2.c checkpoint to Q8_0: same vocabulary, and it runs */
    z = run("convert", bin, "-z", tok, "--type", "q8_0", "-o", converted);
    CHECK_MSG(z.status == 0, "convert: %s", z.err);
    test_job_free(&z);
    z = run("tokenize", "-m", converted, "In the beginning");
    CHECK_MSG(strcmp(o.out, z.out) == 0, "converted vocabulary: '%s' vs '%s'", z.out, o.out);
    test_job_free(&z);
    test_job_free(&o);
    remove(converted);
}

int main(void) {
    char random_model[512], path[1024];
    test_tmp_path(random_model, sizeof(random_model), "cli-random.gguf");
    test_help();
    test_random_model(random_model);
    test_errors(random_model);
    remove(random_model);
    if (test_require_file(test_shared_path(path, sizeof(path), "models/reference.json")))
        test_real_model();
    return test_status("test_cli");
}
