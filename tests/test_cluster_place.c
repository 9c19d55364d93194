/* test_cluster_place.c -- the placement policy (cluster_place) as a table:
 * each case is a cluster (hosts with slots, memory limits or probed
 * memory, lost, drained and excluded ones, what is already placed and its load) and
 * a request (ranks, bytes per rank, pinned hosts), and either the placement
 * expected, spelt as cluster_placement_format spells it ("b:2+a"), or a
 * substring of the reason it is refused with. Every placement is also
 * checked against the rules it must keep whatever the case: tp ranks in
 * all, no host twice, none lost, drained or excluded, slots and memory
 * respected, one numerics contract.
 *
 * A second table does the same for pipelines (cluster_place_stages): hosts,
 * stages of tp ranks, the layers and what each costs, a split asked for or
 * none; the placement and the layer split expected, or the refusal. Every
 * pipeline placement keeps the layers' sum, at least one a stage, and each
 * host's memory.
 *
 * A third table is the policy's own choice of shape (cluster_choose_shape):
 * the same clusters with links measured or not, and the shape, placement
 * and split it chooses, or the refusal. */
#include "cluster/cluster.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define MIB ((int64_t)1 << 20)

struct place_case {
    const char *what;
    /* hosts, '|' between them: NAME SLOTS, then any of limit=MIB (memory=),
     * probed=MIB (a probe's memory_total), used=SLOTS and used_mib=MIB (what is
     * placed there), load=TOKENS, arch=NAME and numerics=NAME (a probe's),
     * and the words lost, drained and excluded */
    const char *hosts;
    int tp;
    int64_t mib_per_rank;
    const char *pinned; /* "c+a", or NULL */
    const char *expect; /* the placement, or NULL if refused */
    const char *reason; /* a substring of the refusal */
};

/* clang-format off */
static const struct place_case cases[] = {
    {"one host that fits", "a 4 limit=8192", 2, 2048, NULL, "a:2", NULL},
    {"a host whose memory holds one of two ranks", "a 4 limit=3072", 2, 2048, NULL, NULL,
     "2 ranks of 2.0 GiB do not fit; host a: 3.0 GiB free holds 1 of 2.0 GiB"},
    {"a host whose memory holds no rank", "a 4 limit=1024", 1, 2048, NULL, NULL,
     "host a: 1.0 GiB free, needs 2.0 GiB per rank"},
    {"probed memory when no limit is given", "a 4 probed=3072 | b 4 probed=8192 load=9", 2, 2048,
     NULL, "b:2", NULL},
    {"a limit overrides the probe", "a 4 limit=1024 probed=65536 | b 4 load=5", 1, 2048, NULL, "b",
     NULL},
    {"memory already used", "a 4 limit=8192 used=1 used_mib=6144 | b 4 limit=8192 used=1 load=7",
     1, 4096, NULL, "b", NULL},
    {"unknown memory counts as fits", "a 2", 2, 100 * 1024, NULL, "a:2", NULL},
    {"the fewest hosts over spreading", "a 2 | b 4 load=50", 4, 1, NULL, "b:4", NULL},
    {"the least loaded of equals", "a 4 load=5 | b 4 load=1 | c 4 load=3", 2, 1, NULL, "b:2", NULL},
    {"fewest slots used breaks a load tie", "a 4 used=2 | b 4", 2, 1, NULL, "b:2", NULL},
    {"hostfile order breaks a full tie", "a 4 | b 4", 2, 1, NULL, "a:2", NULL},
    {"a lost host is skipped", "a 4 lost | b 4 load=9", 2, 1, NULL, "b:2", NULL},
    {"an excluded host is skipped", "a 4 excluded | b 4 load=9", 1, 1, NULL, "b", NULL},
    {"a drained host is skipped", "a 4 drained | b 4 load=9", 2, 1, NULL, "b:2", NULL},
    {"every host drained", "a 4 drained | b 4 lost", 1, 1, NULL, NULL,
     "0 are free on 0 hosts; host a is drained; host b is lost"},
    {"a pinned host drained", "a 4 | b 4 drained", 2, 1, "a+b", NULL,
     "host b is drained (POST /admin/hosts/b/undrain)"},
    {"spread when no host holds all", "a 2 | b 2 | c 2", 4, 1, NULL, "a:2+b:2", NULL},
    {"spread over the least loaded", "a 2 load=3 | b 2 load=2 | c 2 load=1", 4, 1, NULL, "c:2+b:2",
     NULL},
    {"the leader on the least loaded host", "a 2 load=3 | b 2 load=1", 3, 1, NULL, "b:2+a", NULL},
    {"memory caps a host's share", "a 4 limit=4096 | b 4 limit=4096 load=1", 4, 2048, NULL,
     "a:2+b:2", NULL},
    {"a host with room for all over two", "a 4 limit=4096 | b 4 limit=8192 load=1", 4, 2048, NULL,
     "b:4", NULL},
    {"uneven capacities, as even as they allow", "a 3 | b 1 load=1 | c 2 load=2", 4, 1, NULL,
     "a:3+b", NULL},
    {"a loaded big host over two idle small ones", "a 1 | b 1 | c 2 load=99", 2, 1, NULL, "c:2",
     NULL},
    {"more ranks than slots", "a 1 | b 1 | c 1", 4, 1, NULL, NULL,
     "4 ranks need 4 slots; 3 are free on 3 hosts"},
    {"slots taken by other instances", "a 2 used=2 | b 2 used=1", 2, 1, NULL, NULL,
     "2 ranks need 2 slots; 1 are free on 1 hosts"},
    {"every host lost", "a 4 lost | b 4 lost", 1, 1, NULL, NULL,
     "1 ranks need 1 slots; 0 are free on 0 hosts; host a is lost; host b is lost"},
    {"memory short across hosts", "a 4 limit=4096 | b 4 limit=1024", 3, 2048, NULL, NULL,
     "3 ranks of 2.0 GiB do not fit; host a: 4.0 GiB free holds 2 of 2.0 GiB; "
     "host b: 1.0 GiB free, needs 2.0 GiB per rank"},
    {"pinned hosts honoured in their order", "a 4 | b 4 | c 4", 4, 1, "c+a", "c:2+a:2", NULL},
    {"pinned ignores load", "a 4 load=100 | b 4", 2, 1, "a", "a:2", NULL},
    {"a pinned host lost", "a 4 | b 4 lost", 2, 1, "a+b", NULL, "host b is lost"},
    {"a pinned host excluded", "a 4 excluded | b 4", 2, 1, "a+b", NULL, "host a is excluded"},
    {"a pinned host short of memory", "a 4 limit=8192 | b 4 limit=3072", 4, 2048, "a+b", NULL,
     "host b: 3.0 GiB free, needs 2.0 GiB per rank for 2 ranks"},
    {"a pinned host short of slots", "a 1 | b 4", 4, 1, "a+b", NULL,
     "host a: 1 slots free, needs 2"},
    {"pinned hosts that do not divide tp", "a 4 | b 4", 3, 1, "a+b", NULL,
     "3 ranks do not divide evenly over 2 pinned hosts"},
    {"mixed numerics, neither contract's hosts hold all", "a 2 numerics=c1 | b 2 numerics=c2", 4,
     1, NULL, NULL,
     "4 ranks fit on the hosts of no one numerics contract (ranks of one instance must compute "
     "the same bits): c1: 4 ranks need 4 slots; 2 are free on 1 hosts / c2: 4 ranks need 4 "
     "slots; 2 are free on 1 hosts"},
    {"an older build's host (numerics unknown) does not join this build's",
     "a 2 numerics=lockstep-canonical-1 | b 2 numerics=unknown", 3, 1, NULL, NULL,
     "lockstep-canonical-1: 3 ranks need 3 slots; 2 are free on 1 hosts / unknown: 3 ranks"},
    {"mixed numerics, one contract's hosts hold all",
     "a 2 numerics=c1 | b 2 numerics=c2 load=1 | c 2 numerics=c2 load=1", 4, 1, NULL, "b:2+c:2",
     NULL},
    {"mixed arch, one numerics: shared", "a 2 arch=x86_64 numerics=c1 | b 2 arch=aarch64 numerics=c1",
     4, 1, NULL, "a:2+b:2", NULL},
    {"probed hosts of this build, x86 and arm", "a 2 probed=4096 | b 2 probed=4096 arch=aarch64", 4,
     1024, NULL, "a:2+b:2", NULL},
    {"an unprobed host joins any contract", "a 2 numerics=c1 | b 2 | c 2 numerics=c2 load=5", 4, 1,
     NULL, "a:2+b:2", NULL},
    {"the fewest hosts whatever the contract",
     "a 2 numerics=c1 | b 2 numerics=c1 | c 4 numerics=c2 load=9", 4, 1, NULL, "c:4", NULL},
    {"the least loaded leader across contracts", "a 4 numerics=c1 load=5 | b 4 numerics=c2 load=1",
     2, 1, NULL, "b:2", NULL},
    {"the contract seen first on a full tie", "a 4 numerics=c2 | b 4 numerics=c1", 2, 1, NULL,
     "a:2", NULL},
    {"a lost host's contract does not narrow", "a 2 numerics=c1 | b 2 numerics=c2 lost", 4, 1, NULL,
     NULL, "4 ranks need 4 slots; 2 are free on 1 hosts; host b is lost"},
    {"a contract whose hosts are full", "a 2 numerics=c1 used=2 | b 2 numerics=c2", 2, 1, NULL,
     "b:2", NULL},
    {"pinned hosts of two contracts", "a 4 numerics=c1 | b 4 numerics=c2", 2, 1, "a+b", NULL,
     "host b computes with numerics c2, the instance's other ranks with c1: ranks of one instance "
     "must compute the same bits"},
    {"pinned hosts of two arches, one contract",
     "a 4 arch=x86_64 numerics=c1 | b 4 arch=aarch64 numerics=c1", 2, 1, "b+a", "b+a", NULL},
    {"pinned with an unprobed host between two contracts", "a 4 | b 4 numerics=c1 | c 4 numerics=c2",
     3, 1, "a+b+c", NULL, "host c computes with numerics c2, the instance's other ranks with c1"},
    {"no ranks", "a 4", 0, 1, NULL, NULL, "0 ranks is out of range (1 to 64)"},
    {"more ranks than a runner has", "a 128", 65, 1, NULL, NULL,
     "65 ranks is out of range (1 to 64)"},
};
/* clang-format on */

/* One word of a host's description into host, its usage and exclusion. */
static void apply_word(const char *word, struct cluster_host *host, struct cluster_usage *usage,
                       int *exclude) {
    long long v = 0;
    const char *eq = strchr(word, '=');
    if (eq) v = atoll(eq + 1);
    if (!strcmp(word, "lost"))
        cluster_host_update(host, NULL);
    else if (!strcmp(word, "drained"))
        host->drained = 1;
    else if (!strcmp(word, "excluded"))
        *exclude = 1;
    else if (!strncmp(word, "limit=", 6))
        host->memory_limit = v * MIB;
    else if (!strncmp(word, "probed=", 7)) {
        struct cluster_probe p = {.hostname = "x",
                                  .cores = 2,
                                  .memory_total = v * MIB,
                                  .memory_available = v * MIB,
                                  .isa = "avx2",
                                  .arch = "x86_64",
                                  .numerics = CLUSTER_NUMERICS};
        int lost = host->lost;
        cluster_host_update(host, &p);
        host->lost = lost;
    } else if (!strncmp(word, "arch=", 5))
        snprintf(host->arch, sizeof(host->arch), "%s", eq + 1);
    else if (!strncmp(word, "numerics=", 9))
        snprintf(host->numerics, sizeof(host->numerics), "%s", eq + 1);
    else if (!strncmp(word, "used=", 5))
        usage->slots_used = (int)v;
    else if (!strncmp(word, "used_mib=", 9))
        usage->memory_used = v * MIB;
    else if (!strncmp(word, "load=", 5))
        usage->load = (double)v;
    else
        CHECK_MSG(0, "bad word '%s' in a case", word);
}

/* The hosts and usage of a description, the pinned hosts and exclusions
 * into r; the number of hosts. */
static int build_hosts(const char *description, const char *pinned, struct cluster_host *hosts,
                       struct cluster_usage *usage, struct cluster_request *r) {
    char text[256], *save_host = NULL;
    int n = 0;
    snprintf(text, sizeof(text), "%s", description);
    for (char *h = strtok_r(text, "|", &save_host); h && n < 8;
         h = strtok_r(NULL, "|", &save_host), n++) {
        char *save = NULL, *name = strtok_r(h, " ", &save), *slots = strtok_r(NULL, " ", &save);
        memset(&hosts[n], 0, sizeof(hosts[n]));
        memset(&usage[n], 0, sizeof(usage[n]));
        snprintf(hosts[n].name, sizeof(hosts[n].name), "%s", name ? name : "?");
        hosts[n].slots = slots ? atoi(slots) : 0;
        for (char *w = strtok_r(NULL, " ", &save); w; w = strtok_r(NULL, " ", &save))
            apply_word(w, &hosts[n], &usage[n], &r->exclude[n]);
    }
    char names[64];
    snprintf(names, sizeof(names), "%s", pinned ? pinned : "");
    for (char *save = NULL, *name = strtok_r(names, "+", &save); name;
         name = strtok_r(NULL, "+", &save))
        r->pinned[r->n_pinned++] = cluster_host_find(hosts, n, name);
    return n;
}

/* The hosts, usage and request of case c; the number of hosts. */
static int build(const struct place_case *c, struct cluster_host *hosts,
                 struct cluster_usage *usage, struct cluster_request *r) {
    memset(r, 0, sizeof(*r));
    int n = build_hosts(c->hosts, c->pinned, hosts, usage, r);
    r->tp = c->tp;
    r->bytes_per_rank = c->mib_per_rank * MIB;
    return n;
}

/* The rules every placement keeps, whatever the case. */
static void check_rules(const struct place_case *c, const struct cluster_host *hosts,
                        const struct cluster_usage *usage, const struct cluster_request *r,
                        const struct cluster_placement *p) {
    int total = 0, seen[CLUSTER_HOSTS_MAX] = {0};
    const char *numerics = r->numerics;
    CHECK_MSG(p->tp == r->tp && p->pp == 1 && p->n_hosts >= 1, "%s", c->what);
    for (int k = 0; k < p->n_hosts; k++) {
        int i = p->host[k];
        total += p->ranks[k];
        CHECK_MSG(!seen[i]++ && !hosts[i].lost && !hosts[i].drained && !r->exclude[i] &&
                      p->ranks[k] >= 1,
                  "%s", c->what);
        CHECK_MSG(usage[i].slots_used + p->ranks[k] <= hosts[i].slots, "%s: slots", c->what);
        if (hosts[i].numerics[0] && !numerics[0]) numerics = hosts[i].numerics;
        CHECK_MSG(!hosts[i].numerics[0] || !strcmp(hosts[i].numerics, numerics),
                  "%s: numerics %s and %s", c->what, numerics, hosts[i].numerics);
        int64_t memory = hosts[i].memory_limit ? hosts[i].memory_limit : hosts[i].memory_total;
        if (memory)
            CHECK_MSG(usage[i].memory_used + p->ranks[k] * r->bytes_per_rank <= memory,
                      "%s: memory", c->what);
    }
    CHECK_MSG(total == r->tp, "%s: %d ranks placed", c->what, total);
}

static void run_case(const struct place_case *c) {
    struct cluster_host hosts[8];
    struct cluster_usage usage[8];
    struct cluster_request r;
    struct cluster_placement p;
    char why[512] = "", text[128] = "";
    int n = build(c, hosts, usage, &r);
    int rc = cluster_place(hosts, usage, n, &r, &p, why, sizeof(why));
    if (c->expect) {
        CHECK_MSG(rc == 0, "%s: refused: %s", c->what, why);
        if (rc != 0) return;
        cluster_placement_format(hosts, &p, text, sizeof(text));
        CHECK_MSG(!strcmp(text, c->expect), "%s: placed %s, expected %s", c->what, text, c->expect);
        check_rules(c, hosts, usage, &r, &p);
    } else {
        if (rc == 0) cluster_placement_format(hosts, &p, text, sizeof(text));
        CHECK_MSG(rc == -1, "%s: placed %s", c->what, text);
        CHECK_MSG(strstr(why, c->reason), "%s: reason '%s', expected '%s'", c->what, why,
                  c->reason);
    }
}

/* The same state gives the same answer, and without usage nothing is
 * placed yet. */
static void test_deterministic(void) {
    struct cluster_host hosts[3] = {
        {.name = "a", .slots = 2}, {.name = "b", .slots = 2}, {.name = "c", .slots = 2}};
    struct cluster_request r = {.tp = 4};
    struct cluster_placement p1, p2;
    char why[256], t1[64], t2[64];
    CHECK(cluster_place(hosts, NULL, 3, &r, &p1, why, sizeof(why)) == 0);
    CHECK(cluster_place(hosts, NULL, 3, &r, &p2, why, sizeof(why)) == 0);
    cluster_placement_format(hosts, &p1, t1, sizeof(t1));
    cluster_placement_format(hosts, &p2, t2, sizeof(t2));
    CHECK_MSG(!strcmp(t1, "a:2+b:2") && !strcmp(t1, t2), "%s %s", t1, t2);
    r.n_pinned = 1;
    r.pinned[0] = 7;
    r.tp = 2;
    CHECK(cluster_place(hosts, NULL, 3, &r, &p1, why, sizeof(why)) == -1);
    CHECK_MSG(strstr(why, "pinned host index 7 is not one of the 3 hosts"), "%s", why);
}

/* A request that names its contract (a move keeps its instance's): only
 * hosts of it (or unprobed ones), and a refusal names it. */
static void test_request_numerics(void) {
    struct cluster_host hosts[3] = {{.name = "a", .slots = 2, .numerics = "c1"},
                                    {.name = "b", .slots = 2, .numerics = "c2"},
                                    {.name = "c", .slots = 2}};
    struct cluster_usage usage[3] = {{.load = 0}, {.load = 5}, {.load = 9}};
    struct cluster_request r = {.tp = 2, .numerics = "c2"};
    struct cluster_placement p;
    char why[512] = "", text[64] = "";
    CHECK_MSG(cluster_place(hosts, usage, 3, &r, &p, why, sizeof(why)) == 0, "%s", why);
    cluster_placement_format(hosts, &p, text, sizeof(text));
    CHECK_MSG(!strcmp(text, "b:2"), "placed %s", text);
    r.tp = 4; /* b and the unprobed c */
    CHECK_MSG(cluster_place(hosts, usage, 3, &r, &p, why, sizeof(why)) == 0, "%s", why);
    cluster_placement_format(hosts, &p, text, sizeof(text));
    CHECK_MSG(!strcmp(text, "b:2+c:2"), "placed %s", text);
    snprintf(r.numerics, sizeof(r.numerics), "c3");
    r.tp = 3;
    CHECK(cluster_place(hosts, usage, 3, &r, &p, why, sizeof(why)) == -1);
    CHECK_MSG(strstr(why, "on the hosts of numerics c3 (ranks of one instance must compute the "
                          "same bits): 3 ranks need 3 slots; 2 are free on 1 hosts"),
              "%s", why);
    r.n_pinned = 1;
    r.pinned[0] = 0;
    r.tp = 2;
    CHECK(cluster_place(hosts, usage, 3, &r, &p, why, sizeof(why)) == -1);
    CHECK_MSG(strstr(why, "host a computes with numerics c1, the instance's other ranks with c3"),
              "%s", why);
}

/* A placement's contract, and whether hosts may take its ranks (what a
 * move checks before it leaves). */
static void test_numerics_check(void) {
    struct cluster_host hosts[3] = {{.name = "a", .slots = 2},
                                    {.name = "b", .slots = 2, .numerics = "c1"},
                                    {.name = "c", .slots = 2, .numerics = "c2"}};
    struct cluster_placement p = {.tp = 2, .n_hosts = 2, .host = {0, 1}, .ranks = {1, 1}};
    char why[256] = "";
    CHECK(!strcmp(cluster_placement_numerics(hosts, &p), "c1")); /* a is unprobed */
    p.n_hosts = 1;
    CHECK(!strcmp(cluster_placement_numerics(hosts, &p), ""));
    int to[2] = {0, 1};
    CHECK(cluster_numerics_check(hosts, "c1", to, 2, why, sizeof(why)) == 0);
    to[1] = 2;
    CHECK(cluster_numerics_check(hosts, "c1", to, 2, why, sizeof(why)) == -1);
    CHECK_MSG(!strcmp(why, "host c computes with numerics c2, not c1"), "%s", why);
    CHECK(cluster_numerics_check(hosts, "", to, 2, why, sizeof(why)) == 0);
}

/* A pipeline case: every stage's rank needs stage_mib, the first
 * first_mib more, the last last_mib more, and each layer layer_mib. */
struct stage_case {
    const char *what;
    const char *hosts; /* as in place_case */
    int tp, pp, n_layers;
    int64_t layer_mib, stage_mib, first_mib, last_mib;
    const char *split;  /* "3,9" asked for, or NULL */
    const char *pinned; /* "a+b", or NULL */
    const char *expect; /* the placement, or NULL if refused */
    const char *layers; /* the split expected */
    const char *reason; /* a substring of the refusal */
};

/* clang-format off */
static const struct stage_case stage_cases[] = {
    {"two unequal hosts, split by memory", "a 2 limit=3072 | b 2 limit=6144", 1, 2, 12, 400, 64,
     100, 200, NULL, NULL, "b+a", "8,4", NULL},
    {"a model too big for twice the smaller host", "a 2 limit=2048 | b 2 limit=6144", 1, 2, 12,
     400, 64, 100, 200, NULL, NULL, "b+a", "9,3", NULL},
    {"a model too big for both", "a 2 limit=1024 | b 2 limit=2048", 1, 2, 12, 400, 64, 100, 200,
     NULL, NULL, NULL, NULL,
     "12 layers do not fit 2 stages: stage 0 on b (2.0 GiB free) holds at most 4, stage 1 on a "
     "(1.0 GiB free) holds at most 1"},
    {"a split asked for that fits", "a 2 limit=3072 | b 2 limit=6144", 1, 2, 12, 400, 64, 100, 200,
     "3,9", "a+b", "a+b", "3,9", NULL},
    {"a split asked for that does not fit", "a 2 limit=3072 | b 2 limit=6144", 1, 2, 12, 400, 64,
     100, 200, "9,3", "a+b", NULL, NULL,
     "the layer split does not fit: stage 0 on a (3.0 GiB free) holds at most 7, stage 1 on b "
     "(6.0 GiB free) holds at most 12; a split that fits: 4,8"},
    {"a split asked for where none fits", "a 2 limit=1024 | b 2 limit=2048", 1, 2, 12, 400, 64,
     100, 200, "6,6", "a+b", NULL, NULL, "holds at most 2, stage 1 on b (2.0 GiB free) holds at "
     "most 4; no split fits 12 layers"},
    {"a split that does not add up", "a 2 | b 2", 1, 2, 12, 400, 64, 100, 200, "5,5", NULL, NULL,
     NULL, "the layer split adds up to 10 layers, the model has 12"},
    {"memory unknown: even", "a 2 | b 2", 1, 2, 12, 400, 64, 100, 200, NULL, NULL, "a+b", "6,6",
     NULL},
    {"three stages on two hosts", "a 4 limit=8192 | b 4 limit=4096", 1, 3, 12, 400, 64, 100, 200,
     NULL, NULL, "a:2+b", "4,5,3", NULL},
    {"stages of two ranks", "a 2 | b 2", 2, 2, 12, 400, 64, 100, 200, NULL, NULL, "a:2+b:2", "6,6",
     NULL},
    {"a host without a stage's slots", "a 1 | b 4", 2, 2, 12, 400, 64, 100, 200, NULL, NULL, "b:4",
     "6,6", NULL},
    {"a lost host", "a 2 lost | b 2", 1, 2, 12, 400, 64, 100, 200, NULL, NULL, "b:2", "6,6", NULL},
    {"memory already used", "a 2 limit=6144 used_mib=4096 | b 2 limit=4096", 1, 2, 12, 400, 64,
     100, 200, NULL, NULL, "b+a", "9,3", NULL},
    {"more stages than layers", "a 4 | b 4", 1, 3, 2, 400, 64, 100, 200, NULL, NULL, NULL, NULL,
     "3 stages of 1 ranks for 2 layers is out of range"},
    {"a pinned host lost", "a 2 lost | b 2", 1, 2, 12, 400, 64, 100, 200, NULL, "a+b", NULL, NULL,
     "host a is lost"},
};
/* clang-format on */

/* "4,5,3" of a placement's split. */
static void format_layers(const struct cluster_placement *p, char *out, size_t size) {
    out[0] = '\0';
    for (int s = 0; s < p->pp; s++)
        snprintf(out + strlen(out), size - strlen(out), "%s%d", s ? "," : "", p->layers[s]);
}

/* The rules of every pipeline placement: tp * pp ranks, tp per stage, the
 * layers' sum, one or more a stage, each host's memory. */
static void check_stage_rules(const struct stage_case *c, const struct cluster_host *hosts,
                              const struct cluster_usage *usage,
                              const struct cluster_placement *p) {
    int ranks = 0, layers = 0;
    for (int s = 0; s < p->pp; s++) {
        layers += p->layers[s];
        CHECK_MSG(p->layers[s] >= 1, "%s: stage %d has no layer", c->what, s);
    }
    CHECK_MSG(layers == c->n_layers && p->tp == c->tp && p->pp == c->pp, "%s", c->what);
    for (int k = 0; k < p->n_hosts; k++) {
        int i = p->host[k];
        ranks += p->ranks[k];
        CHECK_MSG(p->ranks[k] % c->tp == 0, "%s: a stage split over hosts", c->what);
        int64_t memory = hosts[i].memory_limit;
        if (memory)
            CHECK_MSG(usage[i].memory_used + cluster_placement_host_bytes(p, k, 0) <= memory,
                      "%s: memory of %s", c->what, hosts[i].name);
    }
    CHECK_MSG(ranks == c->tp * c->pp, "%s: %d ranks", c->what, ranks);
}

static void run_stage_case(const struct stage_case *c) {
    struct cluster_host hosts[8];
    struct cluster_usage usage[8];
    struct cluster_request r;
    struct cluster_placement p;
    char why[512] = "", text[128] = "", layers[64] = "";
    memset(&r, 0, sizeof(r));
    int n = build_hosts(c->hosts, c->pinned, hosts, usage, &r);
    r.tp = c->tp;
    r.pp = c->pp;
    r.n_layers = c->n_layers;
    r.stage = (struct cluster_stage_need){c->layer_mib * MIB, c->stage_mib * MIB,
                                          c->first_mib * MIB, c->last_mib * MIB};
    for (int s = 0; c->split && s < c->pp; s++) {
        const char *at = c->split;
        for (int k = 0; k < s && at; k++) at = strchr(at, ',') ? strchr(at, ',') + 1 : NULL;
        r.layers[s] = at ? atoi(at) : 0;
    }
    int rc = cluster_place(hosts, usage, n, &r, &p, why, sizeof(why));
    if (rc == 0) {
        cluster_placement_format(hosts, &p, text, sizeof(text));
        format_layers(&p, layers, sizeof(layers));
    }
    if (c->expect) {
        CHECK_MSG(rc == 0, "%s: refused: %s", c->what, why);
        CHECK_MSG(rc != 0 || (!strcmp(text, c->expect) && !strcmp(layers, c->layers)),
                  "%s: placed %s with layers %s, expected %s with %s", c->what, text, layers,
                  c->expect, c->layers);
        if (rc == 0) check_stage_rules(c, hosts, usage, &p);
    } else {
        CHECK_MSG(rc == -1, "%s: placed %s with layers %s", c->what, text, layers);
        CHECK_MSG(strstr(why, c->reason), "%s: reason '%s', expected '%s'", c->what, why,
                  c->reason);
    }
}

/* A shape case: the model of the pipeline cases (12 layers of 400 MiB, a
 * stage 64 MiB, the first 100 more, the last 200 more: 5,164 MiB on one
 * rank, tp2_mib a rank at tp 2, 0 if it does not split so), its links all
 * of link_us and link_mb_s (0: unmeasured). */
struct shape_case {
    const char *what;
    const char *hosts; /* as in place_case */
    int64_t tp2_mib;
    double link_us, link_mb_s;
    const char *pinned; /* "a+b", or NULL */
    const char *expect; /* the placement, or NULL if refused */
    int tp, pp;         /* the shape expected */
    const char *layers; /* the split expected ("" for pp 1) */
    const char *reason; /* a substring of the refusal */
};

/* clang-format off */
static const struct shape_case shape_cases[] = {
    {"fits one host: tp 1 there", "a 2 limit=8192 | b 2 limit=8192", 2650, 0, 0, NULL, "a", 1, 1,
     "", NULL},
    {"fits only the larger host", "a 2 limit=4096 | b 2 limit=6144", 2650, 0, 0, NULL, "b", 1, 1,
     "", NULL},
    {"fits no host, links unmeasured: pp by memory", "a 2 limit=3072 | b 2 limit=4096", 2650, 0, 0,
     NULL, "b+a", 1, 2, "7,5", NULL},
    {"fits no host, slow links (Wi-Fi, 2 ms): pp", "a 2 limit=3072 | b 2 limit=4096", 2650, 2000,
     40, NULL, "b+a", 1, 2, "7,5", NULL},
    {"1 GbE (0.5 ms) saves more than it costs on a 250 ms token: tp",
     "a 2 limit=3072 | b 2 limit=4096", 2650, 500, 125, NULL, "a+b", 2, 1, "", NULL},
    {"fits no host, fast links (20 us, 10 GbE): tp", "a 2 limit=3072 | b 2 limit=4096", 2650, 20,
     1250, NULL, "a+b", 2, 1, "", NULL},
    {"fast links but tp 2 does not fit: pp", "a 2 limit=2048 | b 2 limit=5000", 2650, 20, 1250,
     NULL, "b+a", 1, 2, "9,3", NULL},
    {"fast links but no tp 2 split of the model: pp", "a 2 limit=3072 | b 2 limit=4096", 0, 20,
     1250, NULL, "b+a", 1, 2, "7,5", NULL},
    {"three small hosts: three stages", "a 1 limit=2048 | b 1 limit=2048 | c 1 limit=2048", 2650,
     0, 0, NULL, "a+b+c", 1, 3, "4,4,4", NULL},
    {"pinned hosts, fast links: tp over them", "a 2 limit=8192 | b 2 limit=8192", 2650, 20, 1250,
     "a+b", "a+b", 2, 1, "", NULL},
    {"pinned hosts, unmeasured links: pp over them", "a 2 limit=8192 | b 2 limit=8192", 2650, 0, 0,
     "b+a", "b+a", 1, 2, "6,6", NULL},
    {"a lost host leaves one too small", "a 2 limit=3072 | b 2 limit=4096 lost", 2650, 0, 0, NULL,
     NULL, 0, 0, NULL, "host a: 3.0 GiB free, needs 5.0 GiB per rank; host b is lost), and 1 open host cannot "
     "split it"},
    {"too big for both", "a 2 limit=1024 | b 2 limit=2048", 2650, 0, 0, NULL, NULL, 0, 0, NULL,
     "nor 2 stages on 2 hosts (12 layers do not fit 2 stages"},
};
/* clang-format on */

static void run_shape_case(const struct shape_case *c) {
    struct cluster_host hosts[8];
    struct cluster_usage usage[8];
    struct cluster_shape_request r;
    struct cluster_link links[8 * 8];
    struct cluster_placement p;
    char why[512] = "", text[128] = "", layers[64] = "";
    memset(&r, 0, sizeof(r));
    int n = build_hosts(c->hosts, c->pinned, hosts, usage, &r.place);
    r.n_layers = 12;
    r.stage = (struct cluster_stage_need){400 * MIB, 64 * MIB, 100 * MIB, 200 * MIB};
    r.bytes_per_rank[1] = (12 * 400 + 64 + 100 + 200) * MIB;
    r.bytes_per_rank[2] = c->tp2_mib * MIB;
    r.weight_bytes = 12 * 400 * MIB;
    r.hidden_bytes = 2048 * 4;
    for (int i = 0; i < n * n; i++)
        links[i] = (struct cluster_link){c->link_us, c->link_mb_s * 1e6};
    r.links = links;
    int rc = cluster_choose_shape(hosts, usage, n, &r, &p, why, sizeof(why));
    if (rc == 0) {
        cluster_placement_format(hosts, &p, text, sizeof(text));
        if (p.pp > 1) format_layers(&p, layers, sizeof(layers));
    }
    if (c->expect) {
        CHECK_MSG(rc == 0, "%s: refused: %s", c->what, why);
        CHECK_MSG(rc != 0 || (!strcmp(text, c->expect) && !strcmp(layers, c->layers) &&
                              p.tp == c->tp && (p.pp > 1 ? p.pp : 1) == c->pp),
                  "%s: placed %s (tp %d, pp %d) with layers '%s', expected %s (tp %d, pp %d) "
                  "with '%s'",
                  c->what, text, p.tp, p.pp, layers, c->expect, c->tp, c->pp, c->layers);
    } else {
        CHECK_MSG(rc == -1, "%s: placed %s", c->what, text);
        CHECK_MSG(strstr(why, c->reason), "%s: reason '%s', expected '%s'", c->what, why,
                  c->reason);
    }
}

int main(void) {
    int n_cases = (int)(sizeof(cases) / sizeof(cases[0]));
    int n_stage_cases = (int)(sizeof(stage_cases) / sizeof(stage_cases[0]));
    for (int i = 0; i < n_cases; i++) run_case(&cases[i]);
    for (int i = 0; i < n_stage_cases; i++) run_stage_case(&stage_cases[i]);
    printf("%d pipeline placement cases\n", n_stage_cases);
    int n_shape_cases = (int)(sizeof(shape_cases) / sizeof(shape_cases[0]));
    for (int i = 0; i < n_shape_cases; i++) run_shape_case(&shape_cases[i]);
    printf("%d shape cases\n", n_shape_cases);
    test_deterministic();
    test_request_numerics();
    test_numerics_check();
    printf("%d placement cases\n", n_cases);
    return test_status("test_cluster_place");
}
