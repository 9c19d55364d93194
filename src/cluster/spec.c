/* spec.c -- how placements are spelt: "a+b" or "a:2+b:2" in logs and the
 * admin API, and `--place NAME=tp:2,pp:2,layers:6+10,hosts:a+b`, which
 * pins an instance at start. Host names never hold ':', '+', ',' or '=' (cluster_name_valid), so
 * the spellings cannot be ambiguous. */
#include "cluster_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cluster_placement_format(const struct cluster_host *hosts, const struct cluster_placement *p,
                             char *out, size_t size) {
    size_t used = 0;
    if (size == 0) return -1;
    out[0] = '\0';
    for (int k = 0; k < p->n_hosts; k++) {
        const char *name = hosts[p->host[k]].name, *plus = k ? "+" : "";
        int n = p->ranks[k] == 1
                    ? snprintf(out + used, size - used, "%s%s", plus, name)
                    : snprintf(out + used, size - used, "%s%s:%d", plus, name, p->ranks[k]);
        if (n < 0 || (size_t)n >= size - used) return -1;
        used += (size_t)n;
    }
    return (int)used;
}

/* tp:N's value: 1..max. */
static int parse_count(const char *text, size_t length, int max, int *out) {
    char digits[8];
    if (length == 0 || length >= sizeof(digits)) return -1;
    memcpy(digits, text, length);
    digits[length] = '\0';
    char *end;
    errno = 0;
    long value = strtol(digits, &end, 10);
    if (digits[0] < '0' || digits[0] > '9' || *end || errno || value < 1 || value > max) return -1;
    *out = (int)value;
    return 0;
}

/* hosts:a+b's value into out. */
static int parse_hosts(const char *text, size_t length, struct cluster_place_spec *out, char *err,
                       size_t errlen) {
    const char *p = text, *end = text + length;
    while (p <= end) {
        const char *plus = memchr(p, '+', (size_t)(end - p));
        const char *stop = plus ? plus : end;
        size_t n = (size_t)(stop - p);
        if (!cluster_name_valid(p, n)) {
            snprintf(err, errlen,
                     "--place: bad host name '%.*s' in hosts:%.*s (names only, "
                     "joined by '+')",
                     (int)(n < 80 ? n : 80), p, (int)(length < 80 ? length : 80), text);
            return -1;
        }
        if (out->n_hosts >= CLUSTER_HOSTS_MAX) {
            snprintf(err, errlen, "--place: more than %d hosts", CLUSTER_HOSTS_MAX);
            return -1;
        }
        memcpy(out->hosts[out->n_hosts], p, n);
        out->hosts[out->n_hosts][n] = '\0';
        for (int k = 0; k < out->n_hosts; k++)
            if (!strcmp(out->hosts[k], out->hosts[out->n_hosts])) {
                snprintf(err, errlen, "--place: host '%s' named twice", out->hosts[k]);
                return -1;
            }
        out->n_hosts++;
        p = stop + 1;
    }
    return 0;
}

/* layers:A+B's value into out; -1 if it is not 1 to CLUSTER_STAGES_MAX
 * counts of 1 or more. */
static int parse_layers(const char *text, size_t length, struct cluster_place_spec *out) {
    const char *p = text, *end = text + length;
    for (int s = 0; p <= end; s++) {
        const char *plus = memchr(p, '+', (size_t)(end - p));
        const char *stop = plus ? plus : end;
        if (s == CLUSTER_STAGES_MAX || parse_count(p, (size_t)(stop - p), 1 << 14, &out->layers[s]))
            return -1;
        p = stop + 1;
    }
    return 0;
}

/* Which of the spec's counted items an item is, or -1. */
static int count_item(const char *item, size_t length) {
    static const char *const keys[] = {"tp:", "pp:", "layers:"};
    for (int k = 0; k < 3; k++)
        if (length >= strlen(keys[k]) && !strncmp(item, keys[k], strlen(keys[k]))) return k;
    return -1;
}

/* One KEY:VALUE item of the spec (length bytes at item) into out; seen
 * counts tp, pp and layers. */
static int parse_item(const char *item, size_t length, struct cluster_place_spec *out, int *seen,
                      char *err, size_t errlen) {
    static const char *const names[] = {"tp", "pp", "layers"};
    int shown = (int)(length < 80 ? length : 80), k = count_item(item, length);
    if (k >= 0) {
        size_t key = strlen(names[k]) + 1;
        if (seen[k]++) {
            snprintf(err, errlen, "--place: %s given twice", names[k]);
            return -1;
        }
        int rc = k == 0   ? parse_count(item + key, length - key, CLUSTER_RANKS_MAX, &out->tp)
                 : k == 1 ? parse_count(item + key, length - key, CLUSTER_STAGES_MAX, &out->pp)
                          : parse_layers(item + key, length - key, out);
        if (rc == 0) return 0;
        if (k == 2)
            snprintf(err, errlen,
                     "--place: bad '%.*s' (layers:A+B, each stage's layers, 1 to %d "
                     "stages)",
                     shown, item, CLUSTER_STAGES_MAX);
        else
            snprintf(err, errlen, "--place: bad '%.*s' (%s:N, N from 1 to %d)", shown, item,
                     names[k], k == 0 ? CLUSTER_RANKS_MAX : CLUSTER_STAGES_MAX);
        return -1;
    }
    if (length >= 6 && !strncmp(item, "hosts:", 6)) {
        if (out->n_hosts) {
            snprintf(err, errlen, "--place: hosts given twice");
            return -1;
        }
        return parse_hosts(item + 6, length - 6, out, err, errlen);
    }
    snprintf(err, errlen, "--place: unknown '%.*s' (tp:N, pp:N, layers:A+B, hosts:A+B)", shown,
             item);
    return -1;
}

/* The model name before '=' (the whole text if there is none). */
static int parse_name(const char *text, size_t length, struct cluster_place_spec *out, char *err,
                      size_t errlen) {
    if (length == 0 || length >= sizeof(out->model)) {
        snprintf(err, errlen, "--place: the model name must be 1 to %zu bytes, in NAME=tp:N,...",
                 sizeof(out->model) - 1);
        return -1;
    }
    for (size_t i = 0; i < length; i++)
        if ((unsigned char)text[i] <= ' ' || text[i] == ',') {
            snprintf(err, errlen, "--place: the model name '%.*s' holds a space or ','",
                     (int)(length < 80 ? length : 80), text);
            return -1;
        }
    memcpy(out->model, text, length);
    out->model[length] = '\0';
    return 0;
}

/* The rules between a spec's items. */
static int check_spec(const struct cluster_place_spec *out, char *err, size_t errlen) {
    int stages = 0;
    while (stages < CLUSTER_STAGES_MAX && out->layers[stages]) stages++;
    if (out->pp == 1 && out->n_hosts && out->tp % out->n_hosts) {
        snprintf(err, errlen, "--place: tp:%d does not divide evenly over %d hosts", out->tp,
                 out->n_hosts);
        return -1;
    }
    if (out->pp > 1 && out->n_hosts > out->pp) {
        snprintf(err, errlen, "--place: %d hosts for pp:%d (a stage is on one host)", out->n_hosts,
                 out->pp);
        return -1;
    }
    if (stages && stages != out->pp) {
        snprintf(err, errlen, "--place: layers names %d stages, pp is %d", stages, out->pp);
        return -1;
    }
    if (out->tp * out->pp > CLUSTER_RANKS_MAX) {
        snprintf(err, errlen, "--place: tp:%d x pp:%d is more than %d ranks", out->tp, out->pp,
                 CLUSTER_RANKS_MAX);
        return -1;
    }
    return 0;
}

int cluster_place_spec_parse(const char *text, struct cluster_place_spec *out, char *err,
                             size_t errlen) {
    memset(out, 0, sizeof(*out));
    out->tp = 1;
    out->pp = 1;
    const char *eq = strchr(text, '=');
    size_t length = strlen(text);
    for (size_t i = 0; i < length; i++)
        if ((unsigned char)text[i] < ' ' || text[i] == 0x7f) {
            snprintf(err, errlen, "--place: a control character at byte %zu", i);
            return -1;
        }
    if (parse_name(text, eq ? (size_t)(eq - text) : length, out, err, errlen)) return -1;
    if (eq) {
        const char *p = eq + 1, *end = text + length;
        int seen[3] = {0};
        if (p == end) {
            snprintf(err, errlen, "--place: nothing after '%s=' (tp:N, hosts:A+B)", out->model);
            return -1;
        }
        while (p <= end) {
            const char *comma = memchr(p, ',', (size_t)(end - p));
            const char *stop = comma ? comma : end;
            if (parse_item(p, (size_t)(stop - p), out, seen, err, errlen)) return -1;
            p = stop + 1;
        }
    }
    return check_spec(out, err, errlen);
}
