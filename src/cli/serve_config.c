/* serve_config.c -- `lockstep serve --config FILE`: the settings as a JSON
 * object, read with cJSON, and `--check-config`'s report of what is in
 * effect.
 *
 * Keys are the option table's (serve_options.c), so the file takes exactly
 * what the command line takes, with the same checks; "models" is an array
 * of objects, each with a "path" and model options (and its own
 * "runner_args"); model options at the top level are defaults for every
 * model. Every error names the file, the line and the key. cJSON keeps no
 * line numbers, so a small scanner walks the (already validated) text once
 * and records the line of every key and array element by its path
 * ("models[1].tp"). Keys are never written in the file: it is often
 * readable by others, so api_key_file or api_key_env name where the key
 * is. */
#include "serve_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CONFIG_BYTES_MAX (1 << 20) /* a larger file is not a configuration */
#define CONFIG_PATH_MAX  96        /* bytes of a key's path */

/* Where a key (or an array element) is in the file. */
struct config_key {
    char path[CONFIG_PATH_MAX]; /* "port", "models[0].tp", "cors_origins[2]" */
    int line;                   /* 1-based */
};

/* A file being read. */
struct config {
    const char *file;        /* its path, for messages */
    struct serve_options *o; /* what it sets */
    struct config_key *keys; /* (n_keys) every key's line */
    int n_keys, capacity;
    char *err; /* the first error */
    size_t errlen;
};

/* ---------------------------- key lines ---------------------------- */

/* Records path's line; a key given twice is an error (cJSON would keep
 * both, and which one counts would be a surprise). */
static int record(struct config *c, const char *path, int line) {
    for (int i = 0; i < c->n_keys; i++)
        if (!strcmp(c->keys[i].path, path)) {
            snprintf(c->err, c->errlen, "%s:%d: %s: given twice (first on line %d)", c->file, line,
                     path, c->keys[i].line);
            return -1;
        }
    if (c->n_keys == c->capacity) {
        int capacity = c->capacity ? 2 * c->capacity : 64;
        struct config_key *keys = realloc(c->keys, (size_t)capacity * sizeof(*keys));
        if (!keys) {
            snprintf(c->err, c->errlen, "%s: out of memory", c->file);
            return -1;
        }
        c->keys = keys;
        c->capacity = capacity;
    }
    snprintf(c->keys[c->n_keys].path, CONFIG_PATH_MAX, "%s", path);
    c->keys[c->n_keys++].line = line;
    return 0;
}

static int line_of(const struct config *c, const char *path) {
    for (int i = 0; i < c->n_keys; i++)
        if (!strcmp(c->keys[i].path, path)) return c->keys[i].line;
    return 1;
}

static const char *skip_space(const char *s, int *line) {
    for (; *s == ' ' || *s == '\t' || *s == '\r' || *s == '\n'; s++)
        if (*s == '\n') ++*line;
    return s;
}

/* s at a string's opening quote: returns past its closing one. */
static const char *skip_string(const char *s) {
    for (s++; *s && *s != '"'; s++)
        if (*s == '\\' && s[1]) s++;
    return *s ? s + 1 : s;
}

/* 1 if the string from s (its opening quote) to end holds the escape
 * \u0000: cJSON would end the value there, cutting it silently. */
static int holds_nul(const char *s, const char *end) {
    for (s++; s + 5 < end; s++) {
        if (*s != '\\') continue;
        if (s[1] == 'u' && !strncmp(s + 2, "0000", 4)) return 1;
        s++; /* the escaped character */
    }
    return 0;
}

/* Walks one value of text cJSON accepted, recording the line of each key
 * and element below path; returns past the value, or NULL on an error. */
static const char *scan_value(struct config *c, const char *s, int *line, const char *path) {
    char child[CONFIG_PATH_MAX];
    s = skip_space(s, line);
    if (*s == '{' || *s == '[') {
        char close = *s == '{' ? '}' : ']';
        for (int index = 0;; index++) {
            s = skip_space(s + 1, line);
            if (*s == close) return s + 1;
            int at = *line;
            if (close == ']') {
                snprintf(child, sizeof(child), "%s[%d]", path, index);
            } else {
                const char *end = skip_string(s);
                snprintf(child, sizeof(child), "%s%s%.*s", path, *path ? "." : "",
                         (int)(end - s - 2), s + 1);
                s = skip_space(end, line) + 1; /* past the ':' */
            }
            if (record(c, child, at)) return NULL;
            if (!(s = scan_value(c, s, line, child))) return NULL;
            s = skip_space(s, line);
            if (*s != ',') return *s ? s + 1 : s;
        }
    }
    if (*s == '"') {
        const char *end = skip_string(s);
        if (!holds_nul(s, end)) return end;
        snprintf(c->err, c->errlen,
                 "%s:%d: %s: the string holds \\u0000 (a NUL character), which no setting may "
                 "contain",
                 c->file, *line, path);
        return NULL;
    }
    while (*s && !strchr(",]} \t\r\n", *s)) s++;
    return s;
}

/* ---------------------------- values ---------------------------- */

/* The text a row's setter takes for a JSON value, or -1 (err) if the
 * value's type is not the row's. */
static int value_text(const struct config *c, const struct serve_option *row, const cJSON *v,
                      const char *label, char *number, size_t size, const char **out) {
    if (cJSON_IsString(v) && row->kind != SERVE_INT && row->kind != SERVE_NUMBER &&
        row->kind != SERVE_FLAG) {
        *out = v->valuestring;
        return 0;
    }
    if (cJSON_IsNumber(v) && (row->kind == SERVE_INT || row->kind == SERVE_NUMBER)) {
        snprintf(number, size, "%.15g", v->valuedouble);
        *out = number;
        return 0;
    }
    if (cJSON_IsBool(v) && (row->kind == SERVE_FLAG || row->kind == SERVE_SWITCH)) {
        *out = cJSON_IsTrue(v) ? "on" : "off";
        return 0;
    }
    static const char *const expected[] = {"a string",      "an integer",
                                           "a number",      "true or false",
                                           "true or false", "a string or an array of strings"};
    snprintf(c->err, c->errlen, "%s: expected %s", label, expected[row->kind]);
    return -1;
}

static int set_one(struct config *c, const struct serve_option *row, struct gateway_model *m,
                   const cJSON *v, const char *path) {
    char label[CONFIG_PATH_MAX + 512], number[64];
    const char *text;
    snprintf(label, sizeof(label), "%s:%d: %s", c->file, line_of(c, path), path);
    if (value_text(c, row, v, label, number, sizeof(number), &text)) return -1;
    return row->set(c->o, m, row, text, label, c->err, c->errlen);
}

/* A row's value: a list takes a string or an array of them. */
static int set_value(struct config *c, const struct serve_option *row, struct gateway_model *m,
                     const cJSON *v, const char *path) {
    if (row->kind != SERVE_LIST || !cJSON_IsArray(v)) return set_one(c, row, m, v, path);
    struct serve_option single = *row;
    single.kind = SERVE_TEXT; /* each element is one string */
    int index = 0;
    for (const cJSON *e = v->child; e; e = e->next) {
        char element[CONFIG_PATH_MAX];
        snprintf(element, sizeof(element), "%s[%d]", path, index++);
        if (set_one(c, &single, m, e, element)) return -1;
    }
    return 0;
}

/* "cluster": a hostfile's path, or its lines inline (["a slots=4", ...]). */
static int set_cluster(struct config *c, const struct serve_option *row, const cJSON *v) {
    if (!cJSON_IsArray(v)) return set_value(c, row, NULL, v, "cluster");
    char text[CLUSTER_HOSTS_MAX * 160] = "", why[512], element[CONFIG_PATH_MAX];
    size_t used = 0;
    int index = 0;
    for (const cJSON *e = v->child; e; e = e->next, index++) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '\n') ||
            used + strlen(e->valuestring) + 2 > sizeof(text)) {
            snprintf(element, sizeof(element), "cluster[%d]", index);
            snprintf(c->err, c->errlen, "%s:%d: %s: expected a host line (NAME slots=N)", c->file,
                     line_of(c, element), element);
            return -1;
        }
        used += (size_t)snprintf(text + used, sizeof(text) - used, "%s\n", e->valuestring);
    }
    /* the hostfile parser names its lines: here they are the array's elements */
    if (cluster_hostfile_parse(text, used, "cluster", c->o->hosts, &c->o->params.n_hosts, why,
                               sizeof(why))) {
        int host = 0, skip = 0;
        if (sscanf(why, "cluster:%d: %n", &host, &skip) == 1 && skip > 0 && host >= 1) {
            snprintf(element, sizeof(element), "cluster[%d]", host - 1);
            snprintf(c->err, c->errlen, "%s:%d: %s: %s", c->file, line_of(c, element), element,
                     why + skip);
        } else {
            snprintf(c->err, c->errlen, "%s:%d: %s", c->file, line_of(c, "cluster"), why);
        }
        return -1;
    }
    c->o->params.hosts = c->o->hosts;
    return 0;
}

static int refuse_literal_key(struct config *c, const char *key) {
    snprintf(c->err, c->errlen,
             "%s:%d: %s: a key is not written in the configuration file, which is often "
             "readable by others (and copied to backups); give %s_file (a file only its "
             "owner may read) or %s_env (an environment variable) instead",
             c->file, line_of(c, key), key, key, key);
    return -1;
}

/* ---------------------------- models ---------------------------- */

/* A model's own "runner_args": an array of strings. */
static int set_own_args(struct config *c, int index, const cJSON *v, const char *path) {
    struct serve_options *o = c->o;
    int ok = cJSON_IsArray(v) && cJSON_GetArraySize(v) <= SERVE_MAX_RUNNER_ARGS;
    for (const cJSON *e = ok ? v->child : NULL; e && ok; e = e->next) {
        ok = cJSON_IsString(e);
        if (ok) o->own_args[index][o->n_own_args[index]++] = e->valuestring;
    }
    if (ok) return 0;
    snprintf(c->err, c->errlen, "%s:%d: %s: expected an array of at most %d strings", c->file,
             line_of(c, path), path, SERVE_MAX_RUNNER_ARGS);
    return -1;
}

static int set_model(struct config *c, int index, const cJSON *object) {
    struct gateway_model *m = &c->o->models[index];
    char path[CONFIG_PATH_MAX];
    *m = c->o->defaults;
    m->name = NULL;
    for (const cJSON *v = object->child; v; v = v->next) {
        const struct serve_option *row = serve_option_by_key(v->string);
        snprintf(path, sizeof(path), "models[%d].%s", index, v->string);
        if (!strcmp(v->string, "path") && cJSON_IsString(v)) {
            m->path = v->valuestring;
        } else if (!strcmp(v->string, "runner_args")) {
            if (set_own_args(c, index, v, path)) return -1;
        } else if (row && row->model) {
            if (set_value(c, row, m, v, path)) return -1;
        } else {
            snprintf(c->err, c->errlen, "%s:%d: %s: %s", c->file, line_of(c, path), path,
                     !strcmp(v->string, "path") ? "expected a string (the model file)"
                     : row ? "not a model setting (it belongs at the top level)"
                           : "unknown key");
            return -1;
        }
    }
    if (m->path) return 0;
    snprintf(path, sizeof(path), "models[%d]", index);
    snprintf(c->err, c->errlen, "%s:%d: %s: no \"path\" (the model file)", c->file,
             line_of(c, path), path);
    return -1;
}

static int set_models(struct config *c, const cJSON *models) {
    int n = cJSON_GetArraySize(models);
    if (!cJSON_IsArray(models) || n > SERVE_MAX_MODELS) {
        snprintf(c->err, c->errlen, "%s:%d: models: expected an array of at most %d objects",
                 c->file, line_of(c, "models"), SERVE_MAX_MODELS);
        return -1;
    }
    int index = 0;
    for (const cJSON *m = models->child; m; m = m->next, index++) {
        char path[CONFIG_PATH_MAX];
        snprintf(path, sizeof(path), "models[%d]", index);
        if (!cJSON_IsObject(m)) {
            snprintf(c->err, c->errlen, "%s:%d: %s: expected an object with a \"path\"", c->file,
                     line_of(c, path), path);
            return -1;
        }
        if (set_model(c, index, m)) return -1;
    }
    c->o->params.n_models = c->o->n_file_models = n;
    return 0;
}

/* ---------------------------- the file ---------------------------- */

static int set_top(struct config *c, const cJSON *root) {
    for (const cJSON *v = root->child; v; v = v->next) {
        const struct serve_option *row = serve_option_by_key(v->string);
        if (!strcmp(v->string, "models")) continue; /* after the defaults */
        if (!strcmp(v->string, "api_key") || !strcmp(v->string, "admin_key"))
            return refuse_literal_key(c, v->string);
        if (!row) {
            snprintf(c->err, c->errlen, "%s:%d: %s: unknown key", c->file, line_of(c, v->string),
                     v->string);
            return -1;
        }
        if (!strcmp(v->string, "cluster")
                ? set_cluster(c, row, v)
                : set_value(c, row, row->model ? &c->o->defaults : NULL, v, v->string))
            return -1;
    }
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(root, "models");
    return models ? set_models(c, models) : 0;
}

static char *read_text(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    char *text = malloc(CONFIG_BYTES_MAX + 1);
    size_t n = f && text ? fread(text, 1, CONFIG_BYTES_MAX + 1, f) : 0;
    if (!f || !text || ferror(f) || n > CONFIG_BYTES_MAX) {
        snprintf(err, errlen, "%s: %s", path,
                 !f     ? "cannot open the configuration file"
                 : text ? "cannot read it, or it is larger than 1 MiB"
                        : "out of memory");
        if (f) fclose(f);
        free(text);
        return NULL;
    }
    fclose(f);
    text[n] = '\0';
    return text;
}

static int parse_tree(struct config *c, const char *text, cJSON **root) {
    const char *end = NULL;
    *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!*root) {
        const char *at = cJSON_GetErrorPtr();
        int line = 1;
        for (const char *s = text; at && s < at && *s; s++) line += *s == '\n';
        int near = 0; /* the text there, up to its line's end */
        while (at && near < 24 && at[near] && at[near] != '\n' && at[near] != '\r') near++;
        snprintf(c->err, c->errlen, "%s:%d: not valid JSON (near '%.*s')", c->file, line, near,
                 at ? at : "");
        return -1;
    }
    if (!cJSON_IsObject(*root)) {
        snprintf(c->err, c->errlen, "%s:1: expected a JSON object of settings", c->file);
        return -1;
    }
    int line = 1;
    return scan_value(c, text, &line, "") ? 0 : -1;
}

int serve_config_load(struct serve_options *o, const char *path, char *err, size_t errlen) {
    struct config c = {path, o, NULL, 0, 0, err, errlen};
    char *text = read_text(path, err, errlen);
    if (!text) return -1;
    cJSON *root = NULL;
    int failed = parse_tree(&c, text, &root) || set_top(&c, root);
    free(text);
    free(c.keys);
    o->config_tree = root; /* the settings point into it */
    return failed ? -1 : 0;
}

void serve_config_free(struct serve_options *o) {
    cJSON_Delete(o->config_tree);
    o->config_tree = NULL;
}
