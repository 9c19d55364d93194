/* probe.c -- what a host can hold: `lockstep probe` measures the machine it
 * runs on and prints one JSON line, which the gateway (having run it there
 * through mpirun) parses back and records on the host.
 *
 * The line crosses machines, so the parser trusts nothing: every field must
 * be present with its type and a sane value, and no other key may appear. */
#include "cluster_internal.h"
#include "tensor/tensor.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#define PROBE_CORES_MAX  (1 << 16)
#define PROBE_MEMORY_MAX ((int64_t)1 << 53) /* exact as a JSON number (a double) */
#define PROBE_LOAD_MAX   1e6                /* a load average past this is not a reading */

/* The value of a "Name:   123 kB" line of /proc/meminfo in bytes, or -1. */
static int64_t meminfo_value(const char *text, const char *name) {
    const char *line = strstr(text, name);
    while (line && line != text && line[-1] != '\n') line = strstr(line + 1, name);
    if (!line) return -1;
    long long kib;
    if (sscanf(line + strlen(name), " %lld kB", &kib) != 1 || kib < 0 ||
        kib > PROBE_MEMORY_MAX / 1024)
        return -1;
    return (int64_t)kib * 1024;
}

/* MemTotal and MemAvailable from /proc/meminfo. */
static int read_meminfo(int64_t *total, int64_t *available, char *err, size_t errlen) {
    char text[8192];
    FILE *f = fopen("/proc/meminfo", "r");
    size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
    if (f) fclose(f);
    text[n] = '\0';
    *total = meminfo_value(text, "MemTotal:");
    *available = meminfo_value(text, "MemAvailable:");
    if (*total <= 0 || *available < 0) {
        snprintf(err, errlen, "/proc/meminfo: no MemTotal or MemAvailable line");
        return -1;
    }
    if (*available > *total) *available = *total;
    return 0;
}

int cluster_probe_local(struct cluster_probe *out, char *err, size_t errlen) {
    char name[256];
    memset(out, 0, sizeof(*out));
    if (gethostname(name, sizeof(name)) != 0) {
        snprintf(err, errlen, "gethostname failed");
        return -1;
    }
    name[sizeof(name) - 1] = '\0';
    if (!cluster_name_valid(name, strlen(name))) {
        snprintf(err, errlen, "this machine's name '%.64s' is not a host name lockstep takes",
                 name);
        return -1;
    }
    memcpy(out->hostname, name, strlen(name) + 1); /* shorter than hostname (valid) */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    out->cores = cores >= 1 && cores <= PROBE_CORES_MAX ? (int)cores : 1;
    snprintf(out->isa, sizeof(out->isa), "%s", tensor_isa_name(tensor_isa_current()));
    struct utsname machine;
    cluster_arch_normalize(uname(&machine) == 0 ? machine.machine : "", out->arch,
                           sizeof(out->arch));
    snprintf(out->numerics, sizeof(out->numerics), "%s", CLUSTER_NUMERICS);
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f || fscanf(f, "%lf", &out->load) != 1 || !(out->load >= 0)) out->load = 0;
    if (f) fclose(f);
    return read_meminfo(&out->memory_total, &out->memory_available, err, errlen);
}

/* The length of s's start up to max bytes and before any control
 * character: what a one-line message may quote of it. */
static int printable_prefix(const char *s, int max) {
    int n = 0;
    while (n < max && (unsigned char)s[n] >= ' ' && s[n] != 0x7f) n++;
    return n;
}

/* 1 if s is 1 to size - 1 bytes of [a-z0-9_] or of the characters in
 * extra. A word of this charset needs no JSON escaping and cannot smuggle
 * anything into a log line or the dashboard. The ISA is checked this way
 * rather than against the tensor module's enum because the host may be of
 * another architecture, whose instruction sets this build cannot name. */
static int probe_word_valid(const char *s, size_t size, const char *extra) {
    size_t n = strnlen(s, size);
    if (n == 0 || n == size) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || strchr(extra, c)))
            return 0;
    }
    return 1;
}

void cluster_arch_normalize(const char *machine, char *out, size_t size) {
    char lower[CLUSTER_ARCH_MAX] = "";
    size_t n = strlen(machine);
    for (size_t i = 0; i < n && i < sizeof(lower) - 1; i++)
        lower[i] =
            machine[i] >= 'A' && machine[i] <= 'Z' ? (char)(machine[i] - 'A' + 'a') : machine[i];
    /* the BSDs and macOS say amd64 and arm64 for what Linux calls these */
    const char *name = !strcmp(lower, "amd64")   ? "x86_64"
                       : !strcmp(lower, "arm64") ? "aarch64"
                       : n < sizeof(lower) && probe_word_valid(lower, sizeof(lower), "")
                           ? lower
                           : CLUSTER_UNKNOWN;
    snprintf(out, size, "%s", name);
}

/* 0 if the words of p (isa, arch, numerics) are of their charset and
 * length, else -1 naming the field and quoting what it holds. */
static int probe_words_check(const struct cluster_probe *p, char *err, size_t errlen) {
    static const struct {
        const char *key, *extra, *charset;
        size_t offset, size;
    } words[] = {
        {"isa", "", "a-z0-9_", offsetof(struct cluster_probe, isa), CLUSTER_ISA_MAX},
        {"arch", "", "a-z0-9_", offsetof(struct cluster_probe, arch), CLUSTER_ARCH_MAX},
        {"numerics", ".-", "a-z0-9._-", offsetof(struct cluster_probe, numerics),
         CLUSTER_NUMERICS_MAX},
    };
    for (size_t k = 0; k < sizeof(words) / sizeof(words[0]); k++) {
        const char *word = (const char *)p + words[k].offset;
        if (probe_word_valid(word, words[k].size, words[k].extra)) continue;
        snprintf(err, errlen, "probe: %s '%.*s' is not 1 to %zu characters of [%s]", words[k].key,
                 printable_prefix(word, (int)strnlen(word, words[k].size)), word, words[k].size - 1,
                 words[k].charset);
        return -1;
    }
    return 0;
}

/* 0 if p's fields are what a probe can report, else -1 naming the field. */
static int probe_check(const struct cluster_probe *p, char *err, size_t errlen) {
    const char *bad = NULL;
    if (!cluster_name_valid(p->hostname, strnlen(p->hostname, CLUSTER_HOST_NAME_MAX)))
        bad = "hostname";
    else if (p->cores < 1 || p->cores > PROBE_CORES_MAX)
        bad = "cores";
    else if (p->memory_total < 1 || p->memory_total > PROBE_MEMORY_MAX)
        bad = "memory_total";
    else if (p->memory_available < 0 || p->memory_available > p->memory_total)
        bad = "memory_available";
    else if (!(p->load >= 0 && p->load <= PROBE_LOAD_MAX))
        bad = "load";
    if (!bad) return probe_words_check(p, err, errlen);
    snprintf(err, errlen, "probe: %s is out of range", bad);
    return -1;
}

int cluster_probe_format(const struct cluster_probe *p, char *out, size_t size) {
    char err[128];
    if (probe_check(p, err, sizeof(err))) return -1;
    /* host names, ISA, arch and numerics names need no JSON escaping (probe_check) */
    int n = snprintf(out, size,
                     "{\"hostname\":\"%s\",\"cores\":%d,\"memory_total\":%lld,"
                     "\"memory_available\":%lld,\"isa\":\"%s\",\"load\":%.2f,"
                     "\"arch\":\"%s\",\"numerics\":\"%s\"}",
                     p->hostname, p->cores, (long long)p->memory_total,
                     (long long)p->memory_available, p->isa, p->load, p->arch, p->numerics);
    return n >= 0 && (size_t)n < size ? n : -1;
}

/* The whole number in item, or -1 naming the field. */
static int probe_integer(const cJSON *item, const char *key, int64_t max, int64_t *out, char *err,
                         size_t errlen) {
    double v = cJSON_IsNumber(item) ? item->valuedouble : -1;
    if (!cJSON_IsNumber(item) || v != floor(v) || v < 0 || v > (double)max) {
        snprintf(err, errlen, "probe: \"%s\" is not a whole number from 0 to %lld", key,
                 (long long)max);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* A string field into out (size bytes), or -1 naming the field. */
static int probe_string(const cJSON *item, const char *key, char *out, size_t size, char *err,
                        size_t errlen) {
    if (!cJSON_IsString(item) || strlen(item->valuestring) >= size) {
        snprintf(err, errlen, "probe: \"%s\" is not a string of at most %zu bytes", key, size - 1);
        return -1;
    }
    memcpy(out, item->valuestring, strlen(item->valuestring) + 1);
    return 0;
}

/* The keys a probe may send: the first N_REQUIRED must be there; the
 * others older builds did not send. */
static const char *const probe_keys[] = {"hostname", "cores", "memory_total", "memory_available",
                                         "isa",      "load",  "arch",         "numerics"};
enum { PROBE_N_KEYS = 8, PROBE_N_REQUIRED = 5 };

/* 0 if root has each key at most once, no other key and every required
 * one; else -1 naming the key. */
static int probe_keys_check(const cJSON *root, char *err, size_t errlen) {
    int seen[PROBE_N_KEYS] = {0};
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        size_t k = 0;
        while (k < PROBE_N_KEYS && strcmp(item->string, probe_keys[k]) != 0) k++;
        if (k == PROBE_N_KEYS || seen[k]++) {
            snprintf(err, errlen, "probe: %s key \"%.*s\"",
                     k == PROBE_N_KEYS ? "unknown" : "duplicate",
                     printable_prefix(item->string, 40), item->string);
            return -1;
        }
    }
    for (size_t k = 0; k < PROBE_N_REQUIRED; k++)
        if (!seen[k]) {
            snprintf(err, errlen, "probe: no \"%s\"", probe_keys[k]);
            return -1;
        }
    return 0;
}

/* The fields older builds did not send: load (missing: 0), arch and
 * numerics (missing: CLUSTER_UNKNOWN, a contract of its own that matches
 * no build that names one, since nobody can say which order its kernels
 * reduce in). */
static int probe_optional(const cJSON *root, struct cluster_probe *out, char *err, size_t errlen) {
    const cJSON *load = cJSON_GetObjectItemCaseSensitive(root, "load");
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "arch");
    const cJSON *numerics = cJSON_GetObjectItemCaseSensitive(root, "numerics");
    if (load && !cJSON_IsNumber(load)) {
        snprintf(err, errlen, "probe: \"load\" is not a number");
        return -1;
    }
    out->load = load ? load->valuedouble : 0;
    snprintf(out->arch, sizeof(out->arch), "%s", CLUSTER_UNKNOWN);
    snprintf(out->numerics, sizeof(out->numerics), "%s", CLUSTER_UNKNOWN);
    if (arch && probe_string(arch, "arch", out->arch, sizeof(out->arch), err, errlen)) return -1;
    if (numerics &&
        probe_string(numerics, "numerics", out->numerics, sizeof(out->numerics), err, errlen))
        return -1;
    return 0;
}

/* The fields of the object into out; unknown keys and missing required
 * ones refused. */
static int probe_fields(const cJSON *root, struct cluster_probe *out, char *err, size_t errlen) {
    int64_t cores = 0;
    if (probe_keys_check(root, err, errlen) || probe_optional(root, out, err, errlen) ||
        probe_string(cJSON_GetObjectItemCaseSensitive(root, "hostname"), "hostname", out->hostname,
                     sizeof(out->hostname), err, errlen) ||
        probe_integer(cJSON_GetObjectItemCaseSensitive(root, "cores"), "cores", PROBE_CORES_MAX,
                      &cores, err, errlen) ||
        probe_integer(cJSON_GetObjectItemCaseSensitive(root, "memory_total"), "memory_total",
                      PROBE_MEMORY_MAX, &out->memory_total, err, errlen) ||
        probe_integer(cJSON_GetObjectItemCaseSensitive(root, "memory_available"),
                      "memory_available", PROBE_MEMORY_MAX, &out->memory_available, err, errlen) ||
        probe_string(cJSON_GetObjectItemCaseSensitive(root, "isa"), "isa", out->isa,
                     sizeof(out->isa), err, errlen))
        return -1;
    out->cores = (int)cores;
    return probe_check(out, err, errlen);
}

int cluster_probe_parse(const char *line, struct cluster_probe *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    cJSON *root = cJSON_ParseWithOpts(line, NULL, 1);
    if (!cJSON_IsObject(root)) {
        snprintf(err, errlen, "probe: not a JSON object: '%.*s'", printable_prefix(line, 60), line);
        cJSON_Delete(root);
        return -1;
    }
    int rc = probe_fields(root, out, err, errlen);
    cJSON_Delete(root);
    if (rc) memset(out, 0, sizeof(*out));
    return rc;
}

void cluster_host_update(struct cluster_host *host, const struct cluster_probe *p) {
    if (!p) {
        host->lost = 1;
        return;
    }
    host->probed = 1;
    host->lost = 0;
    host->cores = p->cores;
    host->memory_total = p->memory_total;
    host->memory_available = p->memory_available;
    host->load = p->load;
    memcpy(host->isa, p->isa, sizeof(host->isa));
    memcpy(host->arch, p->arch, sizeof(host->arch));
    memcpy(host->numerics, p->numerics, sizeof(host->numerics));
}
