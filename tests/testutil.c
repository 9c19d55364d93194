/* testutil.c -- see testutil.h. */
#include "testutil.h"

#include "tokenizer/tokenizer.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int test_failures;

const char *test_shared_path(char *buf, size_t size, const char *relative) {
    snprintf(buf, size, "%s/%s", LOCKSTEP_SHARED_DIR, relative);
    return buf;
}

int test_require_file(const char *path) {
    if (access(path, R_OK) == 0) return 1;
    printf("skip: %s is absent (tests read ../shared beside the repository)\n", path);
    return 0;
}

const char *test_tmp_path(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "%s/tmp-%d-%s", LOCKSTEP_TEST_TMP, (int)getpid(), name);
    return buf;
}

float test_random_float(uint64_t *state) {
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

float *test_random_floats(int n, uint64_t *state) {
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int i = 0; i < n; i++) x[i] = test_random_float(state);
    return x;
}

/* One row of type from the floats at values. */
static void make_row(char *row, enum tensor_type type, const float *values, int cols) {
    tensor_quantize_row(type, row, values, cols);
}

struct tensor_matrix test_random_weights(enum tensor_type type, int rows, int cols,
                                         uint64_t *state) {
    size_t row_bytes = tensor_row_bytes(type, cols);
    char *data = aligned_alloc(64, (row_bytes * (size_t)rows + 63) / 64 * 64);
    float *values = malloc(sizeof(float) * (size_t)cols);
    for (int r = 0; r < rows; r++) {
        char *row = data + (size_t)r * row_bytes;
        for (int i = 0; i < cols; i++) values[i] = test_random_float(state);
        make_row(row, type, values, cols);
        if (type == TENSOR_Q8_0 && r % 3 == 0)
            ((struct tensor_block_q8_0 *)row)[r % (cols / 32)].qs[r % 32] = -128;
    }
    free(values);
    return tensor_matrix_make(data, type, rows, cols);
}

int test_same_bits(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t x, y;
        memcpy(&x, a + i, sizeof(x));
        memcpy(&y, b + i, sizeof(y));
        if (x != y) return 0;
    }
    return 1;
}

float test_max_abs_diff(const float *a, const float *b, int n) {
    float worst = 0.0f;
    for (int i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= worst)) worst = d; /* also catches NaN */
    }
    return worst;
}

int test_status(const char *name) {
    if (test_failures == 0) {
        printf("%s: ok\n", name);
        return 0;
    }
    printf("%s: %d check(s) failed\n", name, test_failures);
    return 1;
}

/* Reads a whole file into a NUL-terminated malloc'd string ("" on error);
 * its size goes to *size_out when that is not NULL. */
static char *slurp(const char *path, size_t *size_out) {
    size_t size = 0, cap = 4096;
    char *data = malloc(cap);
    if (!data) return NULL;
    FILE *f = fopen(path, "rb");
    if (f) {
        size_t got;
        while ((got = fread(data + size, 1, cap - size - 1, f)) > 0) {
            size += got;
            if (cap - size - 1 == 0) {
                char *grown = realloc(data, cap * 2);
                if (!grown) break;
                data = grown;
                cap *= 2;
            }
        }
        fclose(f);
    }
    data[size] = '\0';
    if (size_out) *size_out = size;
    return data;
}

double test_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

const char *const test_mpi_env[] = {"OMPI_MCA_mpi_yield_when_idle=1", "ASAN_OPTIONS=detect_leaks=0",
                                    NULL};

int test_mpirun_args(char **argv, const char *mpirun, int np, char *np_text, size_t size) {
    static char *const options[] = {"--oversubscribe", "--bind-to", "none",
                                    "--mca",           "btl",       "self,vader,tcp"};
    int argc = 0;
    argv[argc++] = (char *)mpirun;
    if (geteuid() == 0) argv[argc++] = "--allow-run-as-root";
    for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++) argv[argc++] = options[i];
    snprintf(np_text, size, "%d", np);
    argv[argc++] = "-np";
    argv[argc++] = np_text;
    return argc;
}

#define MAX_KEPT_CHILDREN 64
#define LEFTOVER_GRACE    2.0 /* seconds a job's processes get to exit after its first one */

/* The pids of this process's children, from /proc (at most max); the
 * states go to states[] when it is not NULL. Returns how many. */
static int list_children(pid_t *pids, char *states, int max) {
    DIR *proc = opendir("/proc");
    struct dirent *entry;
    int n = 0;
    if (!proc) return 0;
    while (n < max && (entry = readdir(proc)) != NULL) {
        pid_t pid = (pid_t)atoi(entry->d_name);
        char path[64], stat[512];
        if (pid <= 0) continue;
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t got = fread(stat, 1, sizeof(stat) - 1, f);
        fclose(f);
        stat[got] = '\0';
        /* "pid (name) state ppid ...": the name may hold spaces and ')' */
        const char *close_paren = strrchr(stat, ')');
        int ppid = 0;
        char state = 0;
        if (!close_paren || sscanf(close_paren + 1, " %c %d", &state, &ppid) != 2) continue;
        if (ppid != (int)getpid()) continue;
        if (states) states[n] = state;
        pids[n++] = pid;
    }
    closedir(proc);
    return n;
}

static int is_kept(pid_t pid, const pid_t *keep, int n_keep) {
    for (int i = 0; i < n_keep; i++)
        if (keep[i] == pid) return 1;
    return 0;
}

/* Kills (SIGKILL, by pid) and reaps every child not in keep; repeats while
 * killing re-parents more (an orted's ranks). Returns how many were
 * running (zombies are only reaped). */
static int kill_children_except(const pid_t *keep, int n_keep) {
    int killed = 0;
    for (int round = 0; round < 50; round++) {
        pid_t pids[256];
        char states[256];
        int n = list_children(pids, states, 256), found = 0;
        for (int i = 0; i < n; i++) {
            if (is_kept(pids[i], keep, n_keep)) continue;
            found++;
            if (states[i] != 'Z') {
                printf("killing leftover process %d (state %c)\n", (int)pids[i], states[i]);
                kill(pids[i], SIGKILL);
                killed++;
            }
            waitpid(pids[i], NULL, 0);
        }
        if (!found) break;
    }
    return killed;
}

/* Reaps the children not in keep as they exit, for up to seconds; returns
 * early once none is left. (mpirun may exit while the ranks it killed are
 * still dying.) */
static void reap_children_except(const pid_t *keep, int n_keep, double seconds) {
    double start = test_now();
    for (;;) {
        pid_t pids[256];
        char states[256];
        int n = list_children(pids, states, 256), running = 0;
        for (int i = 0; i < n; i++) {
            if (is_kept(pids[i], keep, n_keep)) continue;
            if (states[i] == 'Z')
                waitpid(pids[i], NULL, 0);
            else
                running++;
        }
        if (!running || test_now() - start > seconds) return;
        struct timespec nap = {0, 5000000};
        nanosleep(&nap, NULL);
    }
}

int test_reap_children(double seconds) {
    pid_t pids[256];
    char states[256];
    reap_children_except(NULL, 0, seconds);
    int n = list_children(pids, states, 256), running = 0;
    for (int i = 0; i < n; i++) running += states[i] != 'Z';
    return running;
}

int test_kill_children(void) {
    return kill_children_except(NULL, 0);
}

/* In the child: own process group, output to files, env added, exec. */
static void exec_job(char *const argv[], const char *const env[], const char *out_path,
                     const char *err_path) {
    setpgid(0, 0);
    if (!freopen(out_path, "wb", stdout) || !freopen(err_path, "wb", stderr)) _exit(126);
    for (int i = 0; env && env[i]; i++) {
        char name[256];
        const char *equals = strchr(env[i], '=');
        size_t length = equals ? (size_t)(equals - env[i]) : 0;
        if (length == 0 || length >= sizeof(name)) _exit(126);
        memcpy(name, env[i], length);
        name[length] = '\0';
        setenv(name, equals + 1, 1);
    }
#ifdef LOCKSTEP_TEST_EMULATOR
    /* a cross build's binaries run under the emulator (qemu-aarch64) */
    char *emulated[64] = {LOCKSTEP_TEST_EMULATOR};
    int n = 1;
    for (int i = 0; argv[i] && n < 63; i++) emulated[n++] = argv[i];
    emulated[n] = NULL;
    execvp(emulated[0], emulated);
#else
    execv(argv[0], argv);
#endif
    _exit(127);
}

struct test_job test_run_job(char *const argv[], double deadline_seconds, const char *const env[]) {
    struct test_job job = {-1, 0, 0.0, 0.0, 0, NULL, 0, NULL};
    static int counter;
    char out_path[512], err_path[512], name[64];
    pid_t kept[MAX_KEPT_CHILDREN];
    snprintf(name, sizeof(name), "job%d.out", counter);
    test_tmp_path(out_path, sizeof(out_path), name);
    snprintf(name, sizeof(name), "job%d.err", counter++);
    test_tmp_path(err_path, sizeof(err_path), name);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    int n_kept = list_children(kept, NULL, MAX_KEPT_CHILDREN);
    fflush(NULL);
    job.start = test_now();
    pid_t pid = fork();
    if (pid == 0) exec_job(argv, env, out_path, err_path);
    if (pid > 0) {
        int status = 0;
        pid_t done;
        setpgid(pid, pid); /* also here: no race with the first kill(-pid) */
        while ((done = waitpid(pid, &status, WNOHANG)) == 0) {
            if (test_now() - job.start > deadline_seconds) {
                job.timed_out = 1;
                kill(-pid, SIGKILL);
                kill(pid, SIGKILL);
                done = waitpid(pid, &status, 0);
                break;
            }
            struct timespec nap = {0, 2000000};
            nanosleep(&nap, NULL);
        }
        job.seconds = test_now() - job.start;
        if (done == pid)
            job.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        reap_children_except(kept, n_kept, LEFTOVER_GRACE);
        job.leftovers = kill_children_except(kept, n_kept);
    }
    job.out = slurp(out_path, &job.out_size);
    job.err = slurp(err_path, NULL);
    remove(out_path);
    remove(err_path);
    return job;
}

int test_start_service(struct test_service *service, char *const argv[], const char *const env[]) {
    static int counter;
    char name[64];
    memset(service, 0, sizeof(*service));
    snprintf(name, sizeof(name), "service%d.out", counter);
    test_tmp_path(service->out_path, sizeof(service->out_path), name);
    snprintf(name, sizeof(name), "service%d.err", counter++);
    test_tmp_path(service->err_path, sizeof(service->err_path), name);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) exec_job(argv, env, service->out_path, service->err_path);
    if (pid < 0) return 0;
    setpgid(pid, pid);
    service->pid = (int)pid;
    return 1;
}

int test_service_running(struct test_service *service) {
    int status;
    if (!service->pid) return 0;
    pid_t done = waitpid(service->pid, &status, WNOHANG);
    if (done != service->pid) return 1;
    service->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    kill(-service->pid, SIGKILL); /* whatever it left in its group */
    service->pid = 0;
    return 0;
}

int test_wait_for_output(struct test_service *service, const char *text, double deadline_seconds) {
    double start = test_now();
    for (;;) {
        char *out = slurp(service->out_path, NULL);
        int found = out && strstr(out, text);
        free(out);
        if (found) return 1;
        if (!test_service_running(service) || test_now() - start > deadline_seconds) break;
        struct timespec nap = {0, 5000000};
        nanosleep(&nap, NULL);
    }
    char *err = slurp(service->err_path, NULL);
    printf("service did not print '%s' (exit status %d); its stderr:\n%s\n", text, service->status,
           err ? err : "");
    free(err);
    return 0;
}

int test_stop_service(struct test_service *service, double grace_seconds) {
    if (!service->pid) return service->status;
    pid_t pid = (pid_t)service->pid;
    kill(-pid, SIGTERM);
    double start = test_now();
    while (test_service_running(service) && test_now() - start < grace_seconds) {
        struct timespec nap = {0, 5000000};
        nanosleep(&nap, NULL);
    }
    if (service->pid) {
        int status;
        kill(-pid, SIGKILL);
        waitpid(pid, &status, 0);
        service->status = 128 + SIGKILL;
        service->pid = 0;
    }
    if (test_failures > 0 || service->status != 0) { /* its log explains the failure */
        char *err = slurp(service->err_path, NULL);
        printf("--- stderr of the stopped service (exit status %d):\n%s\n", service->status,
               err ? err : "");
        free(err);
    }
    remove(service->out_path);
    remove(service->err_path);
    return service->status;
}

char *test_read_file(const char *path, size_t *size) {
    return slurp(path, size);
}

void test_job_free(struct test_job *job) {
    free(job->out);
    free(job->err);
    job->out = job->err = NULL;
}

int test_write_random_model(const char *path, char *const options[]) {
    char *argv[36] = {LOCKSTEP_BIN, "convert", "--random"};
    int argc = 3;
    while (argc < 32 && options[argc - 3]) {
        argv[argc] = options[argc - 3];
        argc++;
    }
    argv[argc++] = "-o";
    argv[argc++] = (char *)path;
    argv[argc] = NULL;
    struct test_job o = test_run_job(argv, 60.0, NULL);
    CHECK_MSG(o.status == 0, "convert --random -o %s: exit %d\n%s", path, o.status, o.err);
    int ok = o.status == 0;
    test_job_free(&o);
    return ok;
}

int test_http_send(int port, const char *method, const char *path, const char *headers,
                   const char *body) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a))) {
        if (fd >= 0) close(fd);
        return -1;
    }
    size_t n = body ? strlen(body) : 0;
    char *request = malloc(1024 + (headers ? strlen(headers) : 0) + n);
    if (!request) {
        close(fd);
        return -1;
    }
    int head = sprintf(request,
                       "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s"
                       "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                       method, path, headers ? headers : "", n);
    if (body) memcpy(request + head, body, n);
    size_t total = (size_t)head + n, sent = 0;
    while (sent < total) {
        ssize_t k = send(fd, request + sent, total - sent, MSG_NOSIGNAL);
        if (k <= 0) break;
        sent += (size_t)k;
    }
    free(request);
    return fd;
}

/* Undoes chunked transfer coding in place; returns the new length. */
static size_t dechunk(char *data, size_t length) {
    size_t in = 0, out = 0;
    while (in < length) {
        char *end;
        unsigned long size = strtoul(data + in, &end, 16);
        char *line_end = strstr(end, "\r\n");
        if (!line_end || size == 0) break;
        in = (size_t)(line_end - data) + 2;
        if (in + size > length) size = length - in;
        memmove(data + out, data + in, size);
        out += size;
        in += size + 2;
    }
    data[out] = '\0';
    return out;
}

struct test_http test_http_request(int port, const char *method, const char *path,
                                   const char *headers, const char *body, double deadline) {
    struct test_http r = {-1, NULL, NULL, 0};
    int fd = test_http_send(port, method, path, headers, body);
    size_t length = 0, capacity = 65536;
    char *data = malloc(capacity);
    double start = test_now();
    while (fd >= 0 && data && test_now() - start < deadline) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        if (length + 4096 > capacity) {
            char *grown = realloc(data, capacity *= 2);
            if (!grown) break;
            data = grown;
        }
        ssize_t k = recv(fd, data + length, capacity - length - 1, 0);
        if (k <= 0) break;
        length += (size_t)k;
    }
    if (fd >= 0) close(fd);
    if (!data) return r;
    data[length] = '\0';
    char *split = strstr(data, "\r\n\r\n");
    if (split && sscanf(data, "HTTP/1.%*d %d", &r.status) == 1) {
        *split = '\0';
        r.headers = strdup(data);
        r.length = length - (size_t)(split + 4 - data);
        r.body = malloc(r.length + 1);
        memcpy(r.body, split + 4, r.length);
        r.body[r.length] = '\0';
        if (strcasestr(r.headers, "Transfer-Encoding: chunked"))
            r.length = dechunk(r.body, r.length);
    } else {
        r.status = -1;
    }
    free(data);
    return r;
}

void test_http_free(struct test_http *response) {
    free(response->headers);
    free(response->body);
    response->headers = response->body = NULL;
}

struct tokenizer *test_load_vocabulary(const char *path) {
    char err[512];
    struct gguf_file *file;
    struct tokenizer *tok = NULL;
    if (gguf_open(&file, path, err, sizeof(err)) != 0) {
        CHECK_MSG(0, "gguf_open %s: %s", path, err);
        return NULL;
    }
    if (tokenizer_load_gguf(&tok, file, err, sizeof(err)) != 0)
        CHECK_MSG(0, "load %s: %s", path, err);
    gguf_close(file);
    return tok;
}

int test_start_gateway(struct test_service *service, const char *model, char *const extra[],
                       const char *const env[], double deadline) {
    char *argv[48] = {LOCKSTEP_BIN, "serve", "-m", (char *)model, "--port", "0", NULL};
    int n = 6;
#ifdef LOCKSTEP_TEST_EMULATOR
    argv[n++] = "--runner-wrapper";
    argv[n++] = LOCKSTEP_TEST_EMULATOR;
#endif
    for (int i = 0; extra && extra[i] && n < 46; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    if (!test_start_service(service, argv, env) ||
        !test_wait_for_output(service, "listening on", deadline))
        return 0;
    char *out = slurp(service->out_path, NULL);
    const char *at = out ? strstr(out, "127.0.0.1:") : NULL;
    int port = at ? atoi(at + 10) : 0;
    free(out);
    for (double start = test_now(); port && test_now() - start < deadline;) {
        struct test_http h = test_http_request(port, "GET", "/health", NULL, NULL, 10);
        int ready = h.status == 200;
        test_http_free(&h);
        if (ready) return port;
        struct timespec nap = {0, 20000000};
        nanosleep(&nap, NULL);
    }
    return 0;
}
