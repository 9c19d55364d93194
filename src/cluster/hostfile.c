/* hostfile.c -- the hosts of the cluster as an Open MPI hostfile names them
 * (`lockstep serve --cluster FILE`), this machine alone without one, and the
 * sizes (memory=16G) hostfiles and messages spell.
 *
 * The file is what `mpirun --hostfile` reads too, plus keys of our own:
 * memory=SIZE, a cap on what placement may use there, and for a cluster
 * whose hosts differ, lockstep=PATH (the binary there: an arm64 host has
 * its own build at its own path) and wrapper=PROGRAM (what runs it, say
 * qemu-aarch64). Each line is checked whole: a mistake is an error naming path:line
 * and the word, never a host silently skipped. */
#include "base/base.h"
#include "cluster_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HOSTFILE_MAX_BYTES (1 << 20)               /* far above any real cluster's file */
#define WORD_MAX           (CLUSTER_PATH_MAX + 16) /* longest word: lockstep=PATH */
#define SIZE_LIMIT         ((int64_t)1 << 62)

int cluster_name_valid(const char *name, size_t length) {
    if (length == 0 || length >= CLUSTER_HOST_NAME_MAX) return 0;
    for (size_t i = 0; i < length; i++) {
        unsigned char c = (unsigned char)name[i];
        if (!isalnum(c) && c != '.' && c != '-' && c != '_') return 0;
    }
    return 1;
}

/* The first label of a name ("node1" of "node1.example.org"): its length. */
static size_t first_label(const char *name) {
    const char *dot = strchr(name, '.');
    return dot ? (size_t)(dot - name) : strlen(name);
}

/* 1 for "127." followed by digits and dots only. */
static int loopback_ipv4(const char *name) {
    if (strncmp(name, "127.", 4) != 0) return 0;
    for (const char *p = name + 4; *p; p++)
        if (!isdigit((unsigned char)*p) && *p != '.') return 0;
    return 1;
}

int cluster_host_is_local(const char *name) {
    char self[256];
    if (!strcmp(name, "localhost") || !strcmp(name, "::1") || loopback_ipv4(name)) return 1;
    if (gethostname(self, sizeof(self)) != 0) return 0;
    self[sizeof(self) - 1] = '\0';
    if (!strcmp(name, self)) return 1;
    /* "node1" in the file for a machine called node1.example.org, or the reverse */
    size_t a = first_label(name), b = first_label(self);
    int one_short = name[a] == '\0' || self[b] == '\0';
    return one_short && a == b && strncmp(name, self, a) == 0;
}

int cluster_host_find(const struct cluster_host *hosts, int n_hosts, const char *name) {
    for (int i = 0; i < n_hosts; i++)
        if (!strcmp(hosts[i].name, name)) return i;
    return -1;
}

int cluster_host_own_program(const struct cluster_host *host) {
    return host->lockstep[0] || host->wrapper[0];
}

void cluster_host_local(struct cluster_host *host) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    memset(host, 0, sizeof(*host));
    snprintf(host->name, sizeof(host->name), "localhost");
    host->slots = cores >= 1 && cores <= 1 << 16 ? (int)cores : 1;
    host->local = 1;
}

/* K, M, G or T (either case) as a power of 1024; 0 for another letter. */
static int64_t unit_of(char c) {
    switch (toupper((unsigned char)c)) {
    case 'K':
        return (int64_t)1 << 10;
    case 'M':
        return (int64_t)1 << 20;
    case 'G':
        return (int64_t)1 << 30;
    case 'T':
        return (int64_t)1 << 40;
    default:
        return 0;
    }
}

int cluster_size_parse(const char *text, int64_t *out) {
    const char *p = text;
    int64_t whole = 0, unit = 1;
    uint64_t fraction = 0, scale = 1;
    if (!isdigit((unsigned char)*p)) return -1;
    for (; isdigit((unsigned char)*p); p++) {
        if (whole > SIZE_LIMIT / 10) return -1;
        whole = whole * 10 + (*p - '0');
    }
    if (*p == '.') {
        if (!isdigit((unsigned char)*++p)) return -1;
        for (; isdigit((unsigned char)*p); p++) {
            if (scale >= 1000000000u) return -1; /* nine digits are plenty */
            fraction = fraction * 10 + (uint64_t)(*p - '0');
            scale *= 10;
        }
    }
    if (*p && unit_of(*p)) {
        unit = unit_of(*p++);
        if (!strcmp(p, "iB") || !strcmp(p, "B")) p += strlen(p);
    } else if (!strcmp(p, "B")) {
        p++;
    }
    if (*p || (scale > 1 && unit == 1)) return -1; /* trailing text, or a fraction of a byte */
    if (whole > SIZE_LIMIT / unit) return -1;
    int64_t bytes = whole * unit + (int64_t)((long double)fraction * unit / scale);
    if (bytes > SIZE_LIMIT) return -1;
    *out = bytes;
    return 0;
}

void cluster_size_format(int64_t bytes, char *out, size_t size) {
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (bytes < 1024) {
        snprintf(out, size, "%lld B", (long long)bytes);
        return;
    }
    double value = (double)bytes / 1024;
    int u = 0;
    while (value >= 1024 && u < 4) {
        value /= 1024;
        u++;
    }
    snprintf(out, size, "%.1f %s", value, units[u]);
}

/* Where a line is, for messages. */
struct hostfile_line {
    const char *path;
    int number; /* 1-based */
};

__attribute__((format(printf, 4, 5))) static int
line_fail(char *err, size_t errlen, const struct hostfile_line *at, const char *fmt, ...) {
    char where[320];
    snprintf(where, sizeof(where), "%s:%d", at->path, at->number);
    va_list args;
    va_start(args, fmt);
    error_vformat_at(err, errlen, where, fmt, args);
    va_end(args);
    return -1;
}

/* A count (slots, max_slots): 1..65536. */
static int parse_count(const char *text, int *out) {
    char *end;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (!isdigit((unsigned char)text[0]) || *end || errno || value < 1 || value > 1 << 16)
        return -1;
    *out = (int)value;
    return 0;
}

/* A program's path or name into out (CLUSTER_PATH_MAX bytes): 1 to
 * CLUSTER_PATH_MAX - 1 bytes, no control character (a word has no blank);
 * an absolute path when absolute, else a name without '/' (execvp looks it
 * up on PATH). 0, or -1. */
static int parse_program(const char *text, int absolute, char *out) {
    size_t length = strlen(text);
    if (length == 0 || length >= CLUSTER_PATH_MAX) return -1;
    for (size_t i = 0; i < length; i++)
        if ((unsigned char)text[i] < 0x20 || text[i] == 0x7f) return -1;
    if (absolute ? text[0] != '/' : text[0] != '/' && strchr(text, '/')) return -1;
    memcpy(out, text, length + 1);
    return 0;
}

#define KEYS "slots, max_slots, memory, lockstep, wrapper"

/* One key=value word of a host's line into host. */
static int parse_option(const char *word, struct cluster_host *host, const struct hostfile_line *at,
                        char *err, size_t errlen) {
    const char *eq = strchr(word, '=');
    if (!eq) return line_fail(err, errlen, at, "'%s' is not KEY=VALUE (" KEYS ")", word);
    size_t key_length = (size_t)(eq - word);
    const char *value = eq + 1;
    if (key_length == 5 && !strncmp(word, "slots", 5)) {
        if (parse_count(value, &host->slots))
            return line_fail(err, errlen, at, "bad number in '%s' (1 to 65536)", word);
    } else if (key_length == 9 && !strncmp(word, "max_slots", 9)) {
        if (parse_count(value, &host->max_slots))
            return line_fail(err, errlen, at, "bad number in '%s' (1 to 65536)", word);
    } else if (key_length == 6 && !strncmp(word, "memory", 6)) {
        if (cluster_size_parse(value, &host->memory_limit) || host->memory_limit <= 0)
            return line_fail(err, errlen, at, "bad size in '%s' (e.g. memory=16G, memory=512MiB)",
                             word);
    } else if (key_length == 8 && !strncmp(word, "lockstep", 8)) {
        if (parse_program(value, 1, host->lockstep))
            return line_fail(err, errlen, at,
                             "bad path in '%s' (the lockstep binary on that host: an absolute "
                             "path below %d bytes)",
                             word, CLUSTER_PATH_MAX);
    } else if (key_length == 7 && !strncmp(word, "wrapper", 7)) {
        if (parse_program(value, 0, host->wrapper))
            return line_fail(err, errlen, at,
                             "bad program in '%s' (what runs lockstep there: a name found on "
                             "PATH or an absolute path, below %d bytes)",
                             word, CLUSTER_PATH_MAX);
    } else {
        return line_fail(err, errlen, at, "unknown key in '%s' (" KEYS ")", word);
    }
    return 0;
}

/* The next whitespace-separated word of [*p, end) into word (NUL-ended);
 * 0 at the end of the line, -1 if it is too long. */
static int next_word(const char **p, const char *end, char *word, size_t *length) {
    while (*p < end && (**p == ' ' || **p == '\t' || **p == '\r')) (*p)++;
    const char *start = *p;
    while (*p < end && **p != ' ' && **p != '\t' && **p != '\r') (*p)++;
    *length = (size_t)(*p - start);
    if (*length >= WORD_MAX) return -1;
    memcpy(word, start, *length);
    word[*length] = '\0';
    return *length > 0;
}

/* One line (without its newline and comment) into hosts; blank lines add
 * nothing. */
static int parse_line(const char *line, const char *end, const struct hostfile_line *at,
                      struct cluster_host *hosts, int *n_hosts, char *err, size_t errlen) {
    char word[WORD_MAX];
    size_t length;
    const char *p = line;
    int got = next_word(&p, end, word, &length);
    if (got == 0) return 0;
    if (got < 0) return line_fail(err, errlen, at, "a word of %d bytes or more", WORD_MAX);
    if (memchr(word, '=', length))
        return line_fail(err, errlen, at, "'%s' where a host name should start the line", word);
    if (!cluster_name_valid(word, length))
        return line_fail(err, errlen, at,
                         "bad host name '%s' (1 to %d letters, digits, '.', '-', '_')", word,
                         CLUSTER_HOST_NAME_MAX - 1);
    if (cluster_host_find(hosts, *n_hosts, word) >= 0)
        return line_fail(err, errlen, at, "duplicate host '%s'", word);
    if (*n_hosts >= CLUSTER_HOSTS_MAX)
        return line_fail(err, errlen, at, "host '%s' is one too many (at most %d)", word,
                         CLUSTER_HOSTS_MAX);
    struct cluster_host host = {.slots = 1};
    memcpy(host.name, word, length + 1);
    host.local = cluster_host_is_local(host.name);
    while ((got = next_word(&p, end, word, &length)) > 0)
        if (parse_option(word, &host, at, err, errlen)) return -1;
    if (got < 0) return line_fail(err, errlen, at, "a word of %d bytes or more", WORD_MAX);
    if (host.max_slots && host.max_slots < host.slots)
        return line_fail(err, errlen, at, "host '%s': max_slots=%d is below slots=%d", host.name,
                         host.max_slots, host.slots);
    hosts[(*n_hosts)++] = host;
    return 0;
}

int cluster_hostfile_parse(const char *text, size_t length, const char *path,
                           struct cluster_host *hosts, int *n_hosts, char *err, size_t errlen) {
    const char *p = text, *end = text + length;
    struct hostfile_line at = {path, 0};
    *n_hosts = 0;
    while (p < end) {
        const char *newline = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = newline ? newline : end;
        const char *comment = memchr(p, '#', (size_t)(line_end - p));
        at.number++;
        if (memchr(p, '\0', (size_t)(line_end - p)))
            return line_fail(err, errlen, &at, "a NUL byte (not a text file)");
        if (parse_line(p, comment ? comment : line_end, &at, hosts, n_hosts, err, errlen))
            return -1;
        p = newline ? newline + 1 : end;
    }
    if (*n_hosts == 0) {
        snprintf(err, errlen, "%s: no host (lines are `NAME [slots=N] [memory=SIZE]`)", path);
        return -1;
    }
    return 0;
}

int cluster_hostfile_load(const char *path, struct cluster_host *hosts, int *n_hosts, char *err,
                          size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    char *text = malloc(HOSTFILE_MAX_BYTES + 1);
    size_t length = text ? fread(text, 1, HOSTFILE_MAX_BYTES + 1, f) : 0;
    int failed = !text || ferror(f);
    fclose(f);
    int rc = -1;
    if (failed)
        snprintf(err, errlen, "%s: cannot read it", path);
    else if (length > HOSTFILE_MAX_BYTES)
        snprintf(err, errlen, "%s: larger than %d bytes: not a hostfile", path, HOSTFILE_MAX_BYTES);
    else
        rc = cluster_hostfile_parse(text, length, path, hosts, n_hosts, err, errlen);
    free(text);
    return rc;
}
