/* links.c -- the links between hosts as one JSON line: `lockstep probe
 * --links`, run under mpirun with a rank on each host, measures every
 * ordered pair and prints the line; the gateway parses it back into the
 * matrix the shape policy weighs (shape.c).
 *
 * The line crosses machines, so the parser trusts nothing: every pair
 * once, indices in range, figures finite and positive, no other key. */
#include "cluster_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINKS_LATENCY_MAX_US 1e8  /* 100 s one way is not a link */
#define LINKS_RATE_MAX       1e13 /* 10 TB/s is not a network */

int cluster_links_format(const struct cluster_link *links, int n, char *out, size_t size) {
    /* 17 digits: a figure parses back to the same double */
    size_t used = (size_t)snprintf(out, size, "{\"links\":[");
    for (int from = 0; from < n; from++)
        for (int to = 0; to < n; to++) {
            const struct cluster_link *l = &links[from * n + to];
            if (from == to || used >= size) continue;
            used += (size_t)snprintf(out + used, size - used,
                                     "%s{\"from\":%d,\"to\":%d,\"latency_us\":%.17g,"
                                     "\"bytes_per_second\":%.17g}",
                                     out[used - 1] == '[' ? "" : ",", from, to, l->latency_us,
                                     l->bytes_per_second);
        }
    if (used < size) used += (size_t)snprintf(out + used, size - used, "]}");
    return used < size ? (int)used : -1;
}

/* One {"from","to","latency_us","bytes_per_second"} into links; -1 with
 * err naming the item. */
static int parse_link(const cJSON *item, int index, int n, struct cluster_link *links,
                      unsigned char *seen, char *err, size_t errlen) {
    const cJSON *from = cJSON_GetObjectItemCaseSensitive(item, "from");
    const cJSON *to = cJSON_GetObjectItemCaseSensitive(item, "to");
    const cJSON *latency = cJSON_GetObjectItemCaseSensitive(item, "latency_us");
    const cJSON *rate = cJSON_GetObjectItemCaseSensitive(item, "bytes_per_second");
    if (!cJSON_IsObject(item) || cJSON_GetArraySize(item) != 4 || !cJSON_IsNumber(from) ||
        !cJSON_IsNumber(to) || !cJSON_IsNumber(latency) || !cJSON_IsNumber(rate)) {
        snprintf(err, errlen,
                 "link %d: not {\"from\",\"to\",\"latency_us\",\"bytes_per_second\"} numbers",
                 index);
        return -1;
    }
    double a = from->valuedouble, b = to->valuedouble;
    if (a != floor(a) || b != floor(b) || a < 0 || b < 0 || a >= n || b >= n || a == b) {
        snprintf(err, errlen, "link %d: hosts %g to %g is not a pair of the %d hosts", index, a, b,
                 n);
        return -1;
    }
    int i = (int)a * n + (int)b;
    if (seen[i]++) {
        snprintf(err, errlen, "link %d: hosts %d to %d given twice", index, (int)a, (int)b);
        return -1;
    }
    double us = latency->valuedouble, bps = rate->valuedouble;
    if (!isfinite(us) || us <= 0 || us > LINKS_LATENCY_MAX_US || !isfinite(bps) || bps <= 0 ||
        bps > LINKS_RATE_MAX) {
        snprintf(err, errlen, "link %d: latency %g us, %g bytes/s is not a measurement", index, us,
                 bps);
        return -1;
    }
    links[i] = (struct cluster_link){us, bps};
    return 0;
}

int cluster_links_parse(const char *line, int n, struct cluster_link *links, char *err,
                        size_t errlen) {
    unsigned char seen[CLUSTER_HOSTS_MAX * CLUSTER_HOSTS_MAX] = {0};
    if (n < 2 || n > CLUSTER_HOSTS_MAX) {
        snprintf(err, errlen, "%d hosts: links need 2 to %d", n, CLUSTER_HOSTS_MAX);
        return -1;
    }
    cJSON *j = cJSON_Parse(line);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "links"), *item;
    int rc = 0, index = 0;
    if (!cJSON_IsObject(j) || cJSON_GetArraySize(j) != 1 || !cJSON_IsArray(list)) {
        snprintf(err, errlen, "not a {\"links\":[...]} line");
        rc = -1;
    }
    memset(links, 0, (size_t)n * (size_t)n * sizeof(*links));
    cJSON_ArrayForEach(item, list) {
        if (rc || (rc = parse_link(item, index++, n, links, seen, err, errlen))) break;
    }
    if (rc == 0 && index != n * (n - 1)) {
        snprintf(err, errlen, "%d links for %d hosts: every ordered pair is measured (%d)", index,
                 n, n * (n - 1));
        rc = -1;
    }
    cJSON_Delete(j);
    if (rc) memset(links, 0, (size_t)n * (size_t)n * sizeof(*links));
    return rc;
}
