/* fuzz_cluster.c -- libFuzzer harness for the cluster module's parsers of
 * text that comes from outside: hostfiles (cluster_hostfile_parse), probe
 * lines from other machines (cluster_probe_parse), link probe lines
 * (cluster_links_parse, for 2 and 3 hosts) and `--place` specs
 * (cluster_place_spec_parse). Each input goes to all four. A refusal must
 * come with a one-line message; an accepted hostfile must hold 1 to 64
 * distinct hosts with valid names and slot counts, and placing one rank on
 * it must either succeed within it or say why; an accepted probe must
 * format and parse back to itself, and so must accepted links, every
 * figure positive; an accepted spec must keep its ranges.
 * Built by tests/fuzz/CMakeLists.txt when LOCKSTEP_FUZZ=ON. */
#include "cluster/cluster.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A refusal's message: non-empty, one line. */
static void check_message(const char *err) {
    if (err[0] == '\0' || strchr(err, '\n')) abort();
}

static void check_hostfile(const char *text, size_t size) {
    static struct cluster_host hosts[CLUSTER_HOSTS_MAX];
    char err[512] = "";
    int n = -1;
    if (cluster_hostfile_parse(text, size, "fuzz", hosts, &n, err, sizeof(err))) {
        check_message(err);
        return;
    }
    if (n < 1 || n > CLUSTER_HOSTS_MAX) abort();
    for (int i = 0; i < n; i++) {
        const struct cluster_host *h = &hosts[i];
        if (h->name[0] == '\0' || strlen(h->name) >= CLUSTER_HOST_NAME_MAX) abort();
        if (strpbrk(h->name, " \t#=+:,") || cluster_host_find(hosts, n, h->name) != i) abort();
        if (h->slots < 1 || (h->max_slots && h->max_slots < h->slots) || h->memory_limit < 0)
            abort();
    }
    struct cluster_request request = {.tp = 1, .bytes_per_rank = 1};
    struct cluster_placement p;
    if (cluster_place(hosts, NULL, n, &request, &p, err, sizeof(err)) == 0) {
        if (p.n_hosts != 1 || p.ranks[0] != 1 || p.host[0] < 0 || p.host[0] >= n) abort();
    } else {
        check_message(err);
    }
}

static void check_probe(const char *line) {
    struct cluster_probe p, back;
    char err[512] = "", text[512];
    if (cluster_probe_parse(line, &p, err, sizeof(err))) {
        check_message(err);
        return;
    }
    if (cluster_probe_format(&p, text, sizeof(text)) <= 0) abort();
    if (cluster_probe_parse(text, &back, err, sizeof(err))) abort();
    if (strcmp(p.hostname, back.hostname) || p.cores != back.cores ||
        p.memory_total != back.memory_total || p.memory_available != back.memory_available ||
        strcmp(p.isa, back.isa) || strcmp(p.arch, back.arch) || strcmp(p.numerics, back.numerics))
        abort();
}

static void check_links(const char *line, int n) {
    struct cluster_link links[9], back[9];
    char err[512] = "", text[2048];
    if (cluster_links_parse(line, n, links, err, sizeof(err))) {
        check_message(err);
        return;
    }
    for (int i = 0; i < n * n; i++)
        if ((i % (n + 1) == 0) != (links[i].latency_us == 0 && links[i].bytes_per_second == 0) ||
            links[i].latency_us < 0 || links[i].bytes_per_second < 0)
            abort();
    if (cluster_links_format(links, n, text, sizeof(text)) <= 0) abort();
    if (cluster_links_parse(text, n, back, err, sizeof(err))) abort();
    if (memcmp(links, back, (size_t)n * (size_t)n * sizeof(*links))) abort();
}

static void check_spec(const char *text) {
    struct cluster_place_spec s;
    char err[512] = "";
    if (cluster_place_spec_parse(text, &s, err, sizeof(err))) {
        check_message(err);
        return;
    }
    int stages = 0;
    while (stages < CLUSTER_STAGES_MAX && s.layers[stages] > 0) stages++;
    if (s.model[0] == '\0' || s.tp < 1 || s.tp > CLUSTER_RANKS_MAX || s.n_hosts < 0 ||
        s.n_hosts > CLUSTER_HOSTS_MAX || s.pp < 1 || s.pp > CLUSTER_STAGES_MAX ||
        s.tp * s.pp > CLUSTER_RANKS_MAX || (stages && stages != s.pp))
        abort();
    /* hosts: tp's divisors without stages, at most one a stage with them */
    if (s.pp == 1 ? s.n_hosts && s.tp % s.n_hosts : s.n_hosts > s.pp) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    check_hostfile(text, size);
    check_probe(text);
    check_links(text, 2);
    check_links(text, 3);
    check_spec(text);
    free(text);
    return 0;
}
