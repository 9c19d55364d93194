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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* 1 if isa is one the tensor module names. */
static int isa_known(const char *isa) {
    return tensor_isa_parse(isa) >= 0;
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
    else if (!isa_known(p->isa))
        bad = "isa";
    else if (!(p->load >= 0 && p->load <= PROBE_LOAD_MAX))
        bad = "load";
    if (!bad) return 0;
    snprintf(err, errlen, "probe: %s is out of range", bad);
    return -1;
}

int cluster_probe_format(const struct cluster_probe *p, char *out, size_t size) {
    char err[64];
    if (probe_check(p, err, sizeof(err))) return -1;
    /* host names and ISA names need no JSON escaping (probe_check) */
    int n = snprintf(out, size,
                     "{\"hostname\":\"%s\",\"cores\":%d,\"memory_total\":%lld,"
                     "\"memory_available\":%lld,\"isa\":\"%s\",\"load\":%.2f}",
                     p->hostname, p->cores, (long long)p->memory_total,
                     (long long)p->memory_available, p->isa, p->load);
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

/* The fields of the object into out; unknown keys and missing ones refused
 * ("load", which older probes did not send, may be missing: 0). */
static int probe_fields(const cJSON *root, struct cluster_probe *out, char *err, size_t errlen) {
    static const char *const keys[] = {"hostname",         "cores", "memory_total",
                                       "memory_available", "isa",   "load"};
    enum { N_KEYS = 6, N_REQUIRED = 5 };
    int64_t cores = 0;
    int seen[N_KEYS] = {0};
    const cJSON *item, *load = cJSON_GetObjectItemCaseSensitive(root, "load");
    cJSON_ArrayForEach(item, root) {
        size_t k = 0;
        while (k < N_KEYS && strcmp(item->string, keys[k]) != 0) k++;
        if (k == N_KEYS || seen[k]++) {
            snprintf(err, errlen, "probe: %s key \"%.*s\"", k == N_KEYS ? "unknown" : "duplicate",
                     printable_prefix(item->string, 40), item->string);
            return -1;
        }
    }
    if (load && !cJSON_IsNumber(load)) {
        snprintf(err, errlen, "probe: \"load\" is not a number");
        return -1;
    }
    out->load = load ? load->valuedouble : 0;
    for (size_t k = 0; k < N_REQUIRED; k++)
        if (!seen[k]) {
            snprintf(err, errlen, "probe: no \"%s\"", keys[k]);
            return -1;
        }
    if (probe_string(cJSON_GetObjectItemCaseSensitive(root, "hostname"), "hostname", out->hostname,
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
}
