/* test_tp_mpi.c -- tensor parallelism across processes: `lockstep generate
 * --comm mpi` under a real mpirun gives the greedy tokens of the local
 * single-rank run.
 *
 * For every model, every prompt and every degree the model can take
 * (mpirun -np 1, 2 and 4; --oversubscribe: this machine has 2 cores), the
 * last stdout line of `generate --print-ids --temp 0` (the generated ids)
 * must equal the one of a plain `generate` (local backend, tp=1), and the
 * job must leave no process behind. Models: seeded random F32, Q8_0 and
 * Q4_0 models that the test writes with `lockstep convert --random`, and
 * ../shared/models/kjv2m-f32.gguf, kjv2m.bin and kjv2m-q4_0.gguf (skipped
 * when absent). A degree the model cannot take is refused with the reason
 * and the degrees that work (kjv2m-q8_0.gguf at -np 4, the random model at
 * -np 3).
 * Skips (77) when lockstep was built without MPI or mpirun is absent. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(TEST_MPIRUN)

#define N_PREDICT    "32"
#define JOB_DEADLINE 60.0 /* one mpirun job, should nothing else stop it */

static const char *const prompts[] = {"In the beginning God created", "And the LORD said unto",
                                      "Blessed are the poor in spirit: for theirs is the kingdom"};
#define N_PROMPTS (int)(sizeof(prompts) / sizeof(prompts[0]))

/* A model file and the mpirun degrees to compare with tp=1. */
struct model_case {
    const char *model;
    const char *tokenizer; /* -z for llama2.c checkpoints, or NULL */
    int degrees[3];        /* mpirun -np values; 0 ends the list */
};

/* A copy of the last non-empty line of the size bytes of text ("" when
 * there is none). */
static char *last_line(const char *text, size_t size) {
    size_t end = size;
    while (end > 0 && text[end - 1] == '\n') end--;
    size_t start = end;
    while (start > 0 && text[start - 1] != '\n') start--;
    char *line = malloc(end - start + 1);
    if (!line) return NULL;
    memcpy(line, text + start, end - start);
    line[end - start] = '\0';
    return line;
}

/* 1 if line is one or more token ids separated by single spaces. */
static int is_id_line(const char *line) {
    if (!*line) return 0;
    for (const char *c = line; *c; c++)
        if (!(*c >= '0' && *c <= '9') && !(*c == ' ' && c[1] >= '0' && c[1] <= '9')) return 0;
    return 1;
}

/* Appends the generate arguments for one prompt; returns the new count. */
static int add_generate_args(char **argv, int argc, const struct model_case *c,
                             const char *prompt) {
    char *args[] = {"-m",      (char *)c->model, "-p", (char *)prompt, "-n",
                    N_PREDICT, "--temp",         "0",  "--print-ids"};
    for (size_t i = 0; i < sizeof(args) / sizeof(args[0]); i++) argv[argc++] = args[i];
    if (c->tokenizer) {
        argv[argc++] = "-z";
        argv[argc++] = (char *)c->tokenizer;
    }
    argv[argc] = NULL;
    return argc;
}

/* The ids of the local tp=1 run, or NULL (a failed check). */
static char *local_ids(const struct model_case *c, const char *prompt) {
    char *argv[24] = {LOCKSTEP_BIN, "generate"};
    add_generate_args(argv, 2, c, prompt);
    struct test_job job = test_run_job(argv, JOB_DEADLINE, NULL);
    char *ids = job.status == 0 ? last_line(job.out, job.out_size) : NULL;
    CHECK_MSG(ids && is_id_line(ids), "%s '%s' (local): exit %d\n%s", c->model, prompt, job.status,
              job.err);
    test_job_free(&job);
    return ids;
}

/* Runs generate under mpirun -np np; the job must succeed, leave no process
 * behind and print the ids want. */
static void check_mpi_ids(const struct model_case *c, const char *prompt, int np,
                          const char *want) {
    char np_text[16];
    char *argv[40];
    int argc = test_mpirun_args(argv, TEST_MPIRUN, np, np_text, sizeof(np_text));
    argv[argc++] = LOCKSTEP_BIN;
    argv[argc++] = "generate";
    argv[argc++] = "--comm";
    argv[argc++] = "mpi";
    add_generate_args(argv, argc, c, prompt);
    struct test_job job = test_run_job(argv, JOB_DEADLINE, test_mpi_env);
    char *ids = last_line(job.out, job.out_size);
    CHECK_MSG(job.status == 0 && !job.timed_out, "%s '%s' -np %d: exit %d\n%s", c->model, prompt,
              np, job.status, job.err);
    CHECK_MSG(ids && !strcmp(ids, want), "%s '%s' -np %d:\n  mpi:   %s\n  local: %s", c->model,
              prompt, np, ids ? ids : "(none)", want);
    CHECK_MSG(job.leftovers == 0, "-np %d left %d processes", np, job.leftovers);
    free(ids);
    test_job_free(&job);
}

static void test_model(const struct model_case *c) {
    double start = test_now();
    for (int p = 0; p < N_PROMPTS; p++) {
        char *want = local_ids(c, prompts[p]);
        if (!want) continue;
        for (int d = 0; d < 3 && c->degrees[d]; d++)
            check_mpi_ids(c, prompts[p], c->degrees[d], want);
        free(want);
    }
    printf("%s: %d prompts at -np", c->model, N_PROMPTS);
    for (int d = 0; d < 3 && c->degrees[d]; d++) printf(" %d", c->degrees[d]);
    printf(" in %.1f s\n", test_now() - start);
}

/* mpirun -np np on a model that cannot be split np ways: a non-zero exit
 * naming the reason and the degrees that work. */
static void test_refused(const char *model, int np, const char *reason, const char *degrees) {
    char np_text[16];
    char *argv[40];
    int argc = test_mpirun_args(argv, TEST_MPIRUN, np, np_text, sizeof(np_text));
    char *args[] = {LOCKSTEP_BIN, "generate", "--comm", "mpi", "-m", (char *)model,
                    "-p",         "In",       "-n",     "4",   NULL};
    for (size_t i = 0; i < sizeof(args) / sizeof(args[0]); i++) argv[argc++] = args[i];
    struct test_job job = test_run_job(argv, JOB_DEADLINE, test_mpi_env);
    char cannot[64];
    snprintf(cannot, sizeof(cannot), "cannot split %d ways", np);
    CHECK_MSG(job.status != 0 && !job.timed_out, "%s -np %d: exit %d", model, np, job.status);
    CHECK_MSG(strstr(job.err, cannot) && strstr(job.err, reason) && strstr(job.err, degrees),
              "%s -np %d: no \"%s\", \"%s\" or \"%s\" in:\n%s", model, np, cannot, reason, degrees,
              job.err);
    CHECK_MSG(job.leftovers == 0, "-np %d left %d processes", np, job.leftovers);
    test_job_free(&job);
}

int main(void) {
    if (access(TEST_MPIRUN, X_OK) != 0) {
        printf("skip: %s is absent (Debian package openmpi-bin)\n", TEST_MPIRUN);
        return TEST_SKIP_CODE;
    }
    static const char *const types[] = {"f32", "q8_0", "q4_0"};
    for (int t = 0; t < 3; t++) {
        char random_path[512];
        test_tmp_path(random_path, sizeof(random_path), "tp-mpi-random.gguf");
        /* 8 query heads, 4 KV heads: degrees 1, 2 and 4 */
        char *shape[] = {
            "--dim", "256",        "--hidden", "512",     "--layers", "2",      "--heads",
            "8",     "--kv-heads", "4",        "--vocab", "300",      "--type", (char *)types[t],
            NULL};
        if (test_write_random_model(random_path, shape)) {
            struct model_case random_case = {random_path, NULL, {1, 2, t == 0 ? 4 : 0}};
            test_model(&random_case);
            if (t == 0)
                test_refused(random_path, 3,
                             "8 query heads and 4 key/value heads do not divide by 3",
                             "degrees that work: 1, 2, 4");
        }
        remove(random_path);
    }

    char f32[512], bin[512], tok[512], q8[512], q4[512];
    test_shared_path(f32, sizeof(f32), "models/kjv2m-f32.gguf");
    test_shared_path(bin, sizeof(bin), "models/kjv2m.bin");
    test_shared_path(tok, sizeof(tok), "models/tok1024.bin");
    test_shared_path(q8, sizeof(q8), "models/kjv2m-q8_0.gguf");
    test_shared_path(q4, sizeof(q4), "models/kjv2m-q4_0.gguf");
    if (test_require_file(f32) && test_require_file(bin) && test_require_file(tok) &&
        test_require_file(q8)) {
        struct model_case gguf_case = {f32, NULL, {1, 2, 4}};
        struct model_case bin_case = {bin, tok, {1, 2, 4}};
        test_model(&gguf_case);
        test_model(&bin_case);
        struct model_case q4_case = {q4, NULL, {2, 0, 0}};
        test_model(&q4_case);
        test_refused(q8, 4, "slices of 48 columns are not whole 32-element q8_0 blocks",
                     "degrees that work: 1, 2");
    }
    int leftovers = test_kill_children();
    CHECK_MSG(leftovers == 0, "%d processes were left", leftovers);
    return test_status("test_tp_mpi");
}

#else

int main(void) {
    printf("skip: lockstep was built without MPI (Debian libopenmpi-dev, -DLOCKSTEP_MPI=ON)\n");
    return TEST_SKIP_CODE;
}

#endif
