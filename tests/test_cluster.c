/* test_cluster.c -- the cluster module's parsers and spellings: Open MPI
 * hostfiles (good files, and every error with its exact path:line message),
 * sizes with K/M/G/T suffixes, this machine as a host, the probe line
 * (this machine's, its round trip, and malformed lines refused naming the
 * field), `lockstep probe` itself, and the placement spellings ("a:2+b",
 * `--place NAME=tp:2,hosts:a+b`). The placement policy has its own table
 * test (test_cluster_place.c), model sizes theirs (test_cluster_need.c). */
#include "cluster/cluster.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Parses text as hostfile "f"; the error (or "") into err. */
static int parse(const char *text, struct cluster_host *hosts, int *n, char *err, size_t errlen) {
    err[0] = '\0';
    return cluster_hostfile_parse(text, strlen(text), "f", hosts, n, err, errlen);
}

static void test_hostfile_good(void) {
    struct cluster_host hosts[CLUSTER_HOSTS_MAX];
    char err[256];
    int n = -1;
    const char *text = "# the cluster\n"
                       "node-a.example slots=2 memory=16G\n"
                       "\n"
                       "   node-b\tslots=4 max_slots=8   # the big one\r\n"
                       "node_c\n"
                       "localhost memory=1.5GiB\n"
                       "127.0.0.1";
    CHECK_MSG(parse(text, hosts, &n, err, sizeof(err)) == 0, "%s", err);
    CHECK(n == 5);
    if (n != 5) return;
    CHECK(!strcmp(hosts[0].name, "node-a.example") && hosts[0].slots == 2);
    CHECK(hosts[0].memory_limit == (int64_t)16 << 30 && hosts[0].max_slots == 0);
    CHECK(!strcmp(hosts[1].name, "node-b") && hosts[1].slots == 4 && hosts[1].max_slots == 8);
    CHECK(hosts[1].memory_limit == 0);
    CHECK(!strcmp(hosts[2].name, "node_c") && hosts[2].slots == 1); /* Open MPI's default */
    CHECK(hosts[3].memory_limit == (int64_t)3 << 29 && hosts[3].local == 1);
    CHECK(hosts[4].local == 1 && hosts[0].local == cluster_host_is_local("node-a.example"));
    for (int i = 0; i < n; i++) CHECK(!hosts[i].probed && !hosts[i].lost && hosts[i].cores == 0);
    CHECK(cluster_host_find(hosts, n, "node_c") == 2 && cluster_host_find(hosts, n, "x") == -1);
    for (int i = 0; i < n; i++) CHECK(!cluster_host_own_program(&hosts[i]));
}

/* lockstep=PATH and wrapper=PROGRAM: what runs lockstep on a host of
 * another architecture (its own binary, under an emulator here). */
static void test_hostfile_programs(void) {
    struct cluster_host hosts[CLUSTER_HOSTS_MAX];
    char err[512], text[700], path[CLUSTER_PATH_MAX];
    int n = -1;
    /* the longest path taken: 255 bytes */
    memset(path, 'p', sizeof(path) - 1);
    path[0] = '/';
    path[sizeof(path) - 1] = '\0';
    snprintf(text, sizeof(text),
             "x86 slots=2\n"
             "arm lockstep=/opt/lockstep-arm64/bin/lockstep wrapper=qemu-aarch64 slots=2\n"
             "emulated wrapper=/usr/bin/qemu-aarch64   # the gateway's binary, emulated\n"
             "own lockstep=/usr/local/bin/lockstep\n"
             "long lockstep=%s wrapper=a:b,c\n",
             path);
    CHECK_MSG(parse(text, hosts, &n, err, sizeof(err)) == 0, "%s", err);
    CHECK(n == 5);
    if (n != 5) return;
    CHECK(!hosts[0].lockstep[0] && !hosts[0].wrapper[0] && !cluster_host_own_program(&hosts[0]));
    CHECK(!strcmp(hosts[1].lockstep, "/opt/lockstep-arm64/bin/lockstep"));
    CHECK(!strcmp(hosts[1].wrapper, "qemu-aarch64") && hosts[1].slots == 2);
    CHECK(!hosts[2].lockstep[0] && !strcmp(hosts[2].wrapper, "/usr/bin/qemu-aarch64"));
    CHECK(!strcmp(hosts[3].lockstep, "/usr/local/bin/lockstep") && !hosts[3].wrapper[0]);
    CHECK(!strcmp(hosts[4].lockstep, path) && !strcmp(hosts[4].wrapper, "a:b,c"));
    for (int i = 1; i < n; i++) CHECK(cluster_host_own_program(&hosts[i]));
}

/* A file of 65 hosts: one too many. */
static void test_hostfile_too_many(void) {
    struct cluster_host hosts[CLUSTER_HOSTS_MAX];
    char text[2048], err[256];
    size_t used = 0;
    int n;
    for (int i = 0; i <= CLUSTER_HOSTS_MAX; i++)
        used += (size_t)snprintf(text + used, sizeof(text) - used, "h%d\n", i);
    CHECK(parse(text, hosts, &n, err, sizeof(err)) == -1);
    CHECK_MSG(!strcmp(err, "f:65: host 'h64' is one too many (at most 64)"), "%s", err);
}

static void test_hostfile_errors(void) {
    static const struct {
        const char *text, *message;
    } cases[] = {
        {"a slots=x", "f:1: bad number in 'slots=x' (1 to 65536)"},
        {"a slots=0", "f:1: bad number in 'slots=0' (1 to 65536)"},
        {"a slots=70000", "f:1: bad number in 'slots=70000' (1 to 65536)"},
        {"a slots=2x", "f:1: bad number in 'slots=2x' (1 to 65536)"},
        {"a\nb foo=1", "f:2: unknown key in 'foo=1' (slots, max_slots, memory, lockstep, wrapper)"},
        {"a\n\n# c\nb\na slots=2", "f:5: duplicate host 'a'"},
        {"slots=2", "f:1: 'slots=2' where a host name should start the line"},
        {"a slots", "f:1: 'slots' is not KEY=VALUE (slots, max_slots, memory, lockstep, wrapper)"},
        {"a lockstep=bin/lockstep", "f:1: bad path in 'lockstep=bin/lockstep' (the lockstep binary "
                                    "on that host: an absolute path below 256 bytes)"},
        {"a lockstep=", "f:1: bad path in 'lockstep=' (the lockstep binary on that host: an "
                        "absolute path below 256 bytes)"},
        {"a\nb lockstep=lockstep", "f:2: bad path in 'lockstep=lockstep' (the lockstep binary on "
                                   "that host: an absolute path below 256 bytes)"},
        {"a wrapper=./qemu", "f:1: bad program in 'wrapper=./qemu' (what runs lockstep there: a "
                             "name found on PATH or an absolute path, below 256 bytes)"},
        {"a wrapper=", "f:1: bad program in 'wrapper=' (what runs lockstep there: a name found on "
                       "PATH or an absolute path, below 256 bytes)"},
        {"a wrapper=q\x01", "f:1: bad program in 'wrapper=q\x01' (what runs lockstep there: a "
                            "name found on PATH or an absolute path, below 256 bytes)"},
        {"a memory=12Q", "f:1: bad size in 'memory=12Q' (e.g. memory=16G, memory=512MiB)"},
        {"a memory=0", "f:1: bad size in 'memory=0' (e.g. memory=16G, memory=512MiB)"},
        {"a max_slots=1 slots=2", "f:1: host 'a': max_slots=1 is below slots=2"},
        {"a+b", "f:1: bad host name 'a+b' (1 to 63 letters, digits, '.', '-', '_')"},
        {"host:2", "f:1: bad host name 'host:2' (1 to 63 letters, digits, '.', '-', '_')"},
        {"", "f: no host (lines are `NAME [slots=N] [memory=SIZE]`)"},
        {"# only a comment\n\n  \n", "f: no host (lines are `NAME [slots=N] [memory=SIZE]`)"},
    };
    struct cluster_host hosts[CLUSTER_HOSTS_MAX];
    char err[640];
    int n;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CHECK_MSG(parse(cases[i].text, hosts, &n, err, sizeof(err)) == -1, "'%s' accepted",
                  cases[i].text);
        CHECK_MSG(!strcmp(err, cases[i].message), "'%s': got '%s'", cases[i].text, err);
    }
    /* a NUL byte inside the text, and a word longer than any line needs */
    CHECK(cluster_hostfile_parse("a\nb\0c", 5, "f", hosts, &n, err, sizeof(err)) == -1);
    CHECK_MSG(!strcmp(err, "f:2: a NUL byte (not a text file)"), "%s", err);
    char long_word[300];
    memset(long_word, 'x', sizeof(long_word) - 1);
    long_word[sizeof(long_word) - 1] = '\0';
    CHECK(parse(long_word, hosts, &n, err, sizeof(err)) == -1);
    CHECK_MSG(!strcmp(err, "f:1: a word of 272 bytes or more"), "%s", err);
    /* a path of 256 bytes: one too many (the word itself fits) */
    char long_path[300];
    int at = snprintf(long_path, sizeof(long_path), "a lockstep=/");
    memset(long_path + at, 'p', 255);
    long_path[at + 255] = '\0';
    CHECK(parse(long_path, hosts, &n, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, "f:1: bad path in 'lockstep=/ppp") &&
                  strstr(err, "an absolute path below 256 bytes"),
              "%s", err);
    test_hostfile_too_many();
}

static void test_hostfile_load(void) {
    struct cluster_host hosts[CLUSTER_HOSTS_MAX];
    char path[512], err[512];
    int n = 0;
    test_tmp_path(path, sizeof(path), "cluster_hosts.txt");
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs("alpha slots=2\nbeta slots=2 memory=4G\n", f);
    fclose(f);
    CHECK_MSG(cluster_hostfile_load(path, hosts, &n, err, sizeof(err)) == 0, "%s", err);
    CHECK(n == 2 && !strcmp(hosts[1].name, "beta") && hosts[1].memory_limit == (int64_t)4 << 30);
    remove(path);
    CHECK(cluster_hostfile_load(path, hosts, &n, err, sizeof(err)) == -1);
    CHECK_MSG(strstr(err, path) && strstr(err, "cannot open"), "%s", err);
}

static void test_sizes(void) {
    static const struct {
        const char *text;
        int64_t bytes;
    } good[] = {
        {"0", 0},
        {"512", 512},
        {"100B", 100},
        {"1K", 1024},
        {"1k", 1024},
        {"2M", (int64_t)2 << 20},
        {"2MiB", (int64_t)2 << 20},
        {"3G", (int64_t)3 << 30},
        {"16GB", (int64_t)16 << 30},
        {"1T", (int64_t)1 << 40},
        {"1.5G", (int64_t)3 << 29},
        {"0.25KiB", 256},
    };
    static const char *const bad[] = {"",    "G",   "1.5",          "1x",  "1GiBs",        "-1",
                                      "1.G", ".5G", "99999999999T", "1 G", "1.0000000001G"};
    int64_t v;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        v = -1;
        CHECK_MSG(cluster_size_parse(good[i].text, &v) == 0 && v == good[i].bytes, "'%s' gave %lld",
                  good[i].text, (long long)v);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK_MSG(cluster_size_parse(bad[i], &v) == -1, "'%s' accepted", bad[i]);
    char text[32];
    cluster_size_format(512, text, sizeof(text));
    CHECK_MSG(!strcmp(text, "512 B"), "%s", text);
    cluster_size_format(1536, text, sizeof(text));
    CHECK_MSG(!strcmp(text, "1.5 KiB"), "%s", text);
    cluster_size_format((int64_t)2 << 30, text, sizeof(text));
    CHECK_MSG(!strcmp(text, "2.0 GiB"), "%s", text);
}

static void test_local_host(void) {
    struct cluster_host host;
    char self[256];
    cluster_host_local(&host);
    CHECK(!strcmp(host.name, "localhost") && host.local == 1);
    CHECK(host.slots == (int)sysconf(_SC_NPROCESSORS_ONLN) && host.memory_limit == 0);
    CHECK(cluster_host_is_local("localhost") && cluster_host_is_local("127.0.0.5"));
    CHECK(cluster_host_is_local("::1"));
    CHECK(!cluster_host_is_local("10.0.0.1") && !cluster_host_is_local("127.x"));
    CHECK(!cluster_host_is_local("no-such-host.invalid"));
    if (gethostname(self, sizeof(self)) == 0) CHECK(cluster_host_is_local(self));
}

static void test_probe_local(void) {
    struct cluster_probe p, back;
    char err[256], line[512];
    CHECK_MSG(cluster_probe_local(&p, err, sizeof(err)) == 0, "%s", err);
    CHECK(p.cores >= 1 && p.memory_total > 0);
    CHECK(p.memory_available >= 0 && p.memory_available <= p.memory_total);
    CHECK(p.isa[0] != '\0' && p.arch[0] != '\0' && strcmp(p.arch, CLUSTER_UNKNOWN) != 0);
    CHECK(!strcmp(p.numerics, CLUSTER_NUMERICS));
#if defined(__x86_64__)
    CHECK_MSG(!strcmp(p.arch, "x86_64"), "arch %s", p.arch);
#elif defined(__aarch64__)
    CHECK_MSG(!strcmp(p.arch, "aarch64"), "arch %s", p.arch);
#endif
    int n = cluster_probe_format(&p, line, sizeof(line));
    CHECK(n > 0 && (size_t)n == strlen(line) && !strchr(line, '\n'));
    CHECK_MSG(cluster_probe_parse(line, &back, err, sizeof(err)) == 0, "%s", err);
    CHECK(!strcmp(back.hostname, p.hostname) && back.cores == p.cores);
    CHECK(back.memory_total == p.memory_total && back.memory_available == p.memory_available);
    CHECK(p.load >= 0 && back.load >= p.load - 0.01 && back.load <= p.load + 0.01);
    CHECK(!strcmp(back.isa, p.isa) && !strcmp(back.arch, p.arch));
    CHECK(!strcmp(back.numerics, p.numerics));
    CHECK(cluster_probe_format(&p, line, 20) == -1); /* too small a buffer */
}

static void test_probe_exact(void) {
    struct cluster_probe p = {.hostname = "node1",
                              .cores = 8,
                              .memory_total = (int64_t)64 << 30,
                              .memory_available = (int64_t)60 << 30,
                              .isa = "avx2",
                              .load = 1.5,
                              .arch = "x86_64",
                              .numerics = "lockstep-canonical-1"},
                         back;
    char line[512], err[256];
    CHECK(cluster_probe_format(&p, line, sizeof(line)) > 0);
    CHECK_MSG(!strcmp(line, "{\"hostname\":\"node1\",\"cores\":8,\"memory_total\":68719476736,"
                            "\"memory_available\":64424509440,\"isa\":\"avx2\",\"load\":1.50,"
                            "\"arch\":\"x86_64\",\"numerics\":\"lockstep-canonical-1\"}"),
              "%s", line);
    /* whitespace and another key order are still the same probe */
    CHECK(cluster_probe_parse(" {\"isa\":\"scalar\", \"cores\":1, \"hostname\":\"h\", "
                              "\"memory_available\":0, \"memory_total\":1}\n",
                              &back, err, sizeof(err)) == 0);
    CHECK(back.cores == 1 && back.memory_total == 1 && !strcmp(back.isa, "scalar"));
    struct cluster_probe bad = p;
    bad.numerics[0] = '\0';
    CHECK(cluster_probe_format(&bad, line, sizeof(line)) == -1);
    bad = p;
    bad.memory_available = bad.memory_total + 1;
    CHECK(cluster_probe_format(&bad, line, sizeof(line)) == -1);
}

static void test_probe_malformed(void) {
#define FIELDS_AFTER_HOST                                                                          \
    "\"cores\":2,\"memory_total\":100,\"memory_available\":50,\"isa\":\"avx2\"}"
    static const struct {
        const char *line, *message;
    } cases[] = {
        {"", "probe: not a JSON object: ''"},
        {"hello", "probe: not a JSON object: 'hello'"},
        {"[1,2]", "probe: not a JSON object: '[1,2]'"},
        {"x\ny", "probe: not a JSON object: 'x'"},
        {"{\"hostname\":\"a\"," FIELDS_AFTER_HOST " x", "probe: not a JSON object"},
        {"{\"hostname\":\"a\",\"cores\":2,\"memory_total\":100,\"isa\":\"avx2\"}",
         "probe: no \"memory_available\""},
        {"{\"hostname\":\"a\",\"gpu\":1," FIELDS_AFTER_HOST, "probe: unknown key \"gpu\""},
        {"{\"hostname\":\"a\",\"hostname\":\"b\"," FIELDS_AFTER_HOST,
         "probe: duplicate key \"hostname\""},
        {"{\"hostname\":\"a b\"," FIELDS_AFTER_HOST, "probe: hostname is out of range"},
        {"{\"hostname\":\"\"," FIELDS_AFTER_HOST, "probe: hostname is out of range"},
        {"{\"hostname\":7," FIELDS_AFTER_HOST,
         "probe: \"hostname\" is not a string of at most 63 bytes"},
        {"{\"hostname\":\"a\",\"cores\":0,\"memory_total\":100,\"memory_available\":50,"
         "\"isa\":\"avx2\"}",
         "probe: cores is out of range"},
        {"{\"hostname\":\"a\",\"cores\":\"2\",\"memory_total\":100,\"memory_available\":50,"
         "\"isa\":\"avx2\"}",
         "probe: \"cores\" is not a whole number from 0 to 65536"},
        {"{\"hostname\":\"a\",\"cores\":2.5,\"memory_total\":100,\"memory_available\":50,"
         "\"isa\":\"avx2\"}",
         "probe: \"cores\" is not a whole number from 0 to 65536"},
        {"{\"hostname\":\"a\",\"cores\":2,\"memory_total\":1e300,\"memory_available\":50,"
         "\"isa\":\"avx2\"}",
         "probe: \"memory_total\" is not a whole number from 0 to 9007199254740992"},
        {"{\"hostname\":\"a\",\"cores\":2,\"memory_total\":100,\"memory_available\":-5,"
         "\"isa\":\"avx2\"}",
         "probe: \"memory_available\" is not a whole number from 0 to 9007199254740992"},
        {"{\"hostname\":\"a\",\"cores\":2,\"memory_total\":100,\"memory_available\":101,"
         "\"isa\":\"avx2\"}",
         "probe: memory_available is out of range"},
        {"{\"hostname\":\"a\",\"cores\":2,\"memory_total\":100,\"memory_available\":50,"
         "\"isa\":\"SSE2\"}",
         "probe: isa 'SSE2' is not 1 to 15 characters of [a-z0-9_]"},
        {"{\"hostname\":\"a\",\"cores\":2,\"memory_total\":100,\"memory_available\":50,"
         "\"isa\":\"\"}",
         "probe: isa '' is not 1 to 15 characters of [a-z0-9_]"},
        {"{\"hostname\":\"a\",\"cores\":2,\"memory_total\":100,\"memory_available\":50,"
         "\"isa\":\"avx512_vnni_bf16x\"}",
         "probe: \"isa\" is not a string of at most 15 bytes"},
        {"{\"hostname\":\"a\",\"arch\":\"x86-64\"," FIELDS_AFTER_HOST,
         "probe: arch 'x86-64' is not 1 to 15 characters of [a-z0-9_]"},
        {"{\"hostname\":\"a\",\"arch\":1," FIELDS_AFTER_HOST,
         "probe: \"arch\" is not a string of at most 15 bytes"},
        {"{\"hostname\":\"a\",\"numerics\":\"\"," FIELDS_AFTER_HOST,
         "probe: numerics '' is not 1 to 31 characters of [a-z0-9._-]"},
        {"{\"hostname\":\"a\",\"numerics\":\"Canonical 1\"," FIELDS_AFTER_HOST,
         "probe: numerics 'Canonical 1' is not 1 to 31 characters of [a-z0-9._-]"},
        {"{\"hostname\":\"a\",\"numerics\":\"lockstep-canonical-1-and-much-"
         "more\"," FIELDS_AFTER_HOST,
         "probe: \"numerics\" is not a string of at most 31 bytes"},
        {"{\"hostname\":\"a\",\"numerics\":null," FIELDS_AFTER_HOST,
         "probe: \"numerics\" is not a string of at most 31 bytes"},
        {"{\"hostname\":\"a\",\"numerics\":\"x\",\"numerics\":\"x\"," FIELDS_AFTER_HOST,
         "probe: duplicate key \"numerics\""},
        {"{\"hostname\":\"a\",\"load\":\"high\"," FIELDS_AFTER_HOST,
         "probe: \"load\" is not a number"},
        {"{\"hostname\":\"a\",\"load\":-1," FIELDS_AFTER_HOST, "probe: load is out of range"},
        {"{\"hostname\":\"a\",\"load\":1e300," FIELDS_AFTER_HOST, "probe: load is out of range"},
    };
#undef FIELDS_AFTER_HOST
    struct cluster_probe p;
    char err[256];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        err[0] = '\0';
        CHECK_MSG(cluster_probe_parse(cases[i].line, &p, err, sizeof(err)) == -1, "'%s' accepted",
                  cases[i].line);
        CHECK_MSG(!strncmp(err, cases[i].message, strlen(cases[i].message)), "'%s': got '%s'",
                  cases[i].line, err);
        CHECK(p.cores == 0 && p.hostname[0] == '\0'); /* nothing half-filled */
    }
}

/* A probe from a build older than arch and numerics still parses: its host
 * is CLUSTER_UNKNOWN for both, a contract that matches no build that names
 * one. An ISA this build cannot name (another architecture's) is taken. */
static void test_probe_older_and_foreign(void) {
    struct cluster_probe p;
    char err[256] = "";
    CHECK_MSG(cluster_probe_parse("{\"hostname\":\"old\",\"cores\":2,\"memory_total\":100,"
                                  "\"memory_available\":50,\"isa\":\"avx2\",\"load\":0.5}",
                                  &p, err, sizeof(err)) == 0,
              "%s", err);
    CHECK(!strcmp(p.arch, CLUSTER_UNKNOWN) && !strcmp(p.numerics, CLUSTER_UNKNOWN));
    CHECK(strcmp(p.numerics, CLUSTER_NUMERICS) != 0);
    CHECK_MSG(cluster_probe_parse("{\"hostname\":\"arm1\",\"cores\":64,\"memory_total\":100,"
                                  "\"memory_available\":50,\"isa\":\"i8mm\",\"load\":0,"
                                  "\"arch\":\"aarch64\",\"numerics\":\"lockstep-canonical-1\"}",
                                  &p, err, sizeof(err)) == 0,
              "%s", err);
    CHECK(!strcmp(p.isa, "i8mm") && !strcmp(p.arch, "aarch64"));
    CHECK(!strcmp(p.numerics, CLUSTER_NUMERICS));
    CHECK_MSG(cluster_probe_parse("{\"hostname\":\"r\",\"cores\":1,\"memory_total\":1,"
                                  "\"memory_available\":1,\"isa\":\"rvv_1_0\","
                                  "\"arch\":\"riscv64\",\"numerics\":\"other.contract_2\"}",
                                  &p, err, sizeof(err)) == 0,
              "%s", err);
    CHECK(!strcmp(p.isa, "rvv_1_0") && !strcmp(p.numerics, "other.contract_2"));
}

/* uname's machine names, as a probe reports them. */
static void test_arch_normalize(void) {
    static const char *const cases[][2] = {
        {"x86_64", "x86_64"},
        {"amd64", "x86_64"},
        {"AMD64", "x86_64"},
        {"aarch64", "aarch64"},
        {"arm64", "aarch64"},
        {"armv7l", "armv7l"},
        {"ppc64le", "ppc64le"},
        {"RISCV64", "riscv64"},
        {"", CLUSTER_UNKNOWN},
        {"i86pc x", CLUSTER_UNKNOWN},
        {"a-much-too-long-machine", CLUSTER_UNKNOWN},
    };
    char out[CLUSTER_ARCH_MAX];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cluster_arch_normalize(cases[i][0], out, sizeof(out));
        CHECK_MSG(!strcmp(out, cases[i][1]), "'%s': %s, expected %s", cases[i][0], out,
                  cases[i][1]);
    }
}

static void test_host_update(void) {
    struct cluster_host host = {.name = "a", .slots = 2};
    struct cluster_probe p = {.hostname = "a",
                              .cores = 4,
                              .memory_total = 1000,
                              .memory_available = 600,
                              .isa = "neon",
                              .load = 0.25,
                              .arch = "aarch64",
                              .numerics = "lockstep-canonical-1"};
    cluster_host_update(&host, &p);
    CHECK(host.probed && !host.lost && host.cores == 4 && host.memory_total == 1000);
    CHECK(host.memory_available == 600 && !strcmp(host.isa, "neon") && host.slots == 2);
    CHECK(!strcmp(host.arch, "aarch64") && !strcmp(host.numerics, "lockstep-canonical-1"));
    cluster_host_update(&host, NULL);
    CHECK(host.lost && host.probed && host.memory_total == 1000); /* last figures kept */
    cluster_host_update(&host, &p);
    CHECK(!host.lost);
}

/* `lockstep probe` prints one line that parses; --help exits 0. */
static void test_probe_command(void) {
    char *const argv[] = {LOCKSTEP_BIN, "probe", NULL};
    struct test_job job = test_run_job(argv, 60, NULL);
    struct cluster_probe p;
    char err[256];
    CHECK_MSG(job.status == 0, "status %d: %s", job.status, job.err ? job.err : "");
    char *newline = job.out ? strchr(job.out, '\n') : NULL;
    CHECK(newline && newline[1] == '\0');
    if (newline) *newline = '\0';
    CHECK_MSG(job.out && cluster_probe_parse(job.out, &p, err, sizeof(err)) == 0, "%s", err);
    test_job_free(&job);
    char *const help[] = {LOCKSTEP_BIN, "probe", "--help", NULL};
    job = test_run_job(help, 60, NULL);
    CHECK(job.status == 0 && job.out && strstr(job.out, "usage: lockstep probe"));
    test_job_free(&job);
    char *const wrong[] = {LOCKSTEP_BIN, "probe", "--cores", NULL};
    job = test_run_job(wrong, 60, NULL);
    CHECK(job.status == 2 && job.err && strstr(job.err, "unknown argument '--cores'"));
    test_job_free(&job);
}

static void test_placement_format(void) {
    struct cluster_host hosts[2] = {{.name = "a"}, {.name = "node-b"}};
    struct cluster_placement p = {.tp = 3, .n_hosts = 2, .host = {1, 0}, .ranks = {2, 1}};
    char text[64];
    CHECK(cluster_placement_format(hosts, &p, text, sizeof(text)) == 10);
    CHECK_MSG(!strcmp(text, "node-b:2+a"), "%s", text);
    CHECK(cluster_placement_format(hosts, &p, text, 6) == -1);
}

static void test_place_spec(void) {
    struct cluster_place_spec s;
    char err[256];
    CHECK(cluster_place_spec_parse("llama", &s, err, sizeof(err)) == 0);
    CHECK(!strcmp(s.model, "llama") && s.tp == 1 && s.n_hosts == 0);
    CHECK_MSG(cluster_place_spec_parse("m-1.q8=tp:4,hosts:a+node-b", &s, err, sizeof(err)) == 0,
              "%s", err);
    CHECK(!strcmp(s.model, "m-1.q8") && s.tp == 4 && s.n_hosts == 2);
    CHECK(!strcmp(s.hosts[0], "a") && !strcmp(s.hosts[1], "node-b"));
    CHECK(cluster_place_spec_parse("m=hosts:c,tp:2", &s, err, sizeof(err)) == 0);
    CHECK(s.tp == 2 && s.n_hosts == 1 && !strcmp(s.hosts[0], "c"));
    CHECK_MSG(cluster_place_spec_parse("m=pp:2,tp:2,layers:6+10,hosts:a+b", &s, err, sizeof(err)) ==
                  0,
              "%s", err);
    CHECK(s.pp == 2 && s.tp == 2 && s.layers[0] == 6 && s.layers[1] == 10 && s.layers[2] == 0 &&
          s.n_hosts == 2);
    CHECK(cluster_place_spec_parse("m=pp:3,hosts:a", &s, err, sizeof(err)) == 0 && s.pp == 3);
    static const struct {
        const char *text, *message;
    } bad[] = {
        {"=tp:2", "--place: the model name must be 1 to 127 bytes, in NAME=tp:N,..."},
        {"a b=tp:2", "--place: the model name 'a b' holds a space or ','"},
        {"m=", "--place: nothing after 'm=' (tp:N, hosts:A+B)"},
        {"m=tp:0", "--place: bad 'tp:0' (tp:N, N from 1 to 64)"},
        {"m=tp:65", "--place: bad 'tp:65' (tp:N, N from 1 to 64)"},
        {"m=tp:x", "--place: bad 'tp:x' (tp:N, N from 1 to 64)"},
        {"m=tp:", "--place: bad 'tp:' (tp:N, N from 1 to 64)"},
        {"m=tp:2,tp:2", "--place: tp given twice"},
        {"m=tp:2,,hosts:a", "--place: unknown '' (tp:N, pp:N, layers:A+B, hosts:A+B)"},
        {"m=gpus:1", "--place: unknown 'gpus:1' (tp:N, pp:N, layers:A+B, hosts:A+B)"},
        {"m=pp:9", "--place: bad 'pp:9' (pp:N, N from 1 to 8)"},
        {"m=pp:2,layers:3+0", "--place: bad 'layers:3+0' (layers:A+B, each stage's layers, 1 to "
                              "8 stages)"},
        {"m=pp:2,layers:3+4+5", "--place: layers names 3 stages, pp is 2"},
        {"m=pp:2,hosts:a+b+c", "--place: 3 hosts for pp:2 (a stage is on one host)"},
        {"m=tp:16,pp:8", "--place: tp:16 x pp:8 is more than 64 ranks"},
        {"m=pp:2,pp:3", "--place: pp given twice"},
        {"m=hosts:a+a,tp:2", "--place: host 'a' named twice"},
        {"m=hosts:a+", "--place: bad host name '' in hosts:a+ (names only, joined by '+')"},
        {"m=hosts:a:2", "--place: bad host name 'a:2' in hosts:a:2 (names only, joined by '+')"},
        {"m=hosts:a,hosts:b", "--place: hosts given twice"},
        {"m=tp:3,hosts:a+b", "--place: tp:3 does not divide evenly over 2 hosts"},
        {"m=tp:2\n", "--place: a control character at byte 6"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        CHECK_MSG(cluster_place_spec_parse(bad[i].text, &s, err, sizeof(err)) == -1,
                  "'%s' accepted", bad[i].text);
        CHECK_MSG(!strcmp(err, bad[i].message), "'%s': got '%s'", bad[i].text, err);
    }
}

/* The link probe's line: formatted and parsed back exactly, and every
 * malformed line refused naming what is wrong, with the links zeroed. */
static void test_links_line(void) {
    struct cluster_link links[9] = {{0}}, back[9];
    char line[1024], err[200];
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            if (a != b) links[a * 3 + b] = (struct cluster_link){10.5 * (a + 1), 1e8 * (b + 1)};
    CHECK(cluster_links_format(links, 3, line, sizeof(line)) > 0);
    CHECK_MSG(cluster_links_parse(line, 3, back, err, sizeof(err)) == 0, "%s: %s", line, err);
    CHECK(!memcmp(links, back, sizeof(links)));
    CHECK(cluster_links_format(links, 3, line, 40) == -1);
    static const struct {
        const char *line, *reason;
    } bad[] = {
        {"[]", "not a {\"links\":[...]} line"},
        {"{\"links\":[],\"x\":1}", "not a {\"links\":[...]} line"},
        {"{\"links\":[{\"from\":0,\"to\":1,\"latency_us\":5,\"bytes_per_second\":1e9}]}",
         "1 links for 2 hosts: every ordered pair is measured (2)"},
        {"{\"links\":[{\"from\":0,\"to\":0,\"latency_us\":5,\"bytes_per_second\":1e9}]}",
         "link 0: hosts 0 to 0 is not a pair of the 2 hosts"},
        {"{\"links\":[{\"from\":0,\"to\":2,\"latency_us\":5,\"bytes_per_second\":1e9}]}",
         "link 0: hosts 0 to 2 is not a pair"},
        {"{\"links\":[{\"from\":0.5,\"to\":1,\"latency_us\":5,\"bytes_per_second\":1e9}]}",
         "is not a pair"},
        {"{\"links\":[{\"from\":0,\"to\":1,\"latency_us\":-5,\"bytes_per_second\":1e9}]}",
         "link 0: latency -5 us, 1e+09 bytes/s is not a measurement"},
        {"{\"links\":[{\"from\":0,\"to\":1,\"latency_us\":5,\"bytes_per_second\":0}]}",
         "is not a measurement"},
        {"{\"links\":[{\"from\":0,\"to\":1,\"latency_us\":5}]}", "link 0: not {"},
        {"{\"links\":[{\"from\":0,\"to\":1,\"latency_us\":5,\"bytes_per_second\":1,\"y\":2}]}",
         "link 0: not {"},
        {"{\"links\":[{\"from\":0,\"to\":1,\"latency_us\":5,\"bytes_per_second\":1},"
         "{\"from\":0,\"to\":1,\"latency_us\":5,\"bytes_per_second\":1}]}",
         "link 1: hosts 0 to 1 given twice"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        back[1] = (struct cluster_link){1, 1};
        CHECK_MSG(cluster_links_parse(bad[i].line, 2, back, err, sizeof(err)) == -1,
                  "'%s' accepted", bad[i].line);
        CHECK_MSG(strstr(err, bad[i].reason), "'%s': '%s', expected '%s'", bad[i].line, err,
                  bad[i].reason);
        CHECK_MSG(back[1].latency_us == 0, "'%s' left a link", bad[i].line);
    }
    CHECK(cluster_links_parse("{\"links\":[]}", 1, back, err, sizeof(err)) == -1);
}

int main(void) {
    test_links_line();
    test_hostfile_good();
    test_hostfile_programs();
    test_hostfile_errors();
    test_hostfile_load();
    test_sizes();
    test_local_host();
    test_probe_local();
    test_probe_exact();
    test_probe_malformed();
    test_probe_older_and_foreign();
    test_arch_normalize();
    test_host_update();
    test_probe_command();
    test_placement_format();
    test_place_spec();
    return test_status("test_cluster");
}
