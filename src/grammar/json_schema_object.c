/* json_schema_object.c -- the rules of object schemas for the JSON Schema
 * converter (json_schema.c, which calls schema_gen_object for the type
 * "object"; json_schema_internal.h is what the two share).
 *
 * An object's rule has the declared properties in the schema's order (an
 * optional one may be left out, a required one may not), then the
 * additional members (additionalProperties false: none; true or absent:
 * any value; a schema: that schema); what may follow each declared member
 * is a rule of its own. An additional key is any string without escapes
 * that is none of the declared names, written as a trie of the names'
 * characters with one rule per node.
 */
#include "json_schema_internal.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One declared property of an object schema. */
struct prop {
    const cJSON *schema; /* its schema (properties/<name>) */
    const char *name;    /* its name */
    int required;        /* it is listed in "required" */
};

/* The declared properties of s and their required flags into *props. */
static int object_props(struct schema_ctx *ctx, const cJSON *s, const char *path,
                        struct prop **props, int *n) {
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    *props = NULL;
    *n = 0;
    if (pr && !cJSON_IsObject(pr))
        return schema_fail(ctx, "\"properties\" must be an object at %s", schema_where(path));
    if (req && !cJSON_IsArray(req))
        return schema_fail(ctx, "\"required\" must be an array of strings at %s",
                           schema_where(path));
    int count = cJSON_GetArraySize(pr);
    *props = calloc((size_t)count + 1, sizeof **props);
    if (*props == NULL) return schema_fail_oom(ctx);
    for (const cJSON *p = pr ? pr->child : NULL; p; p = p->next, (*n)++)
        (*props)[*n] = (struct prop){p, p->string, 0};
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r))
            return schema_fail(ctx, "\"required\" must be an array of strings at %s",
                               schema_where(path));
        int i = 0;
        while (i < *n && strcmp((*props)[i].name, r->valuestring) != 0) i++;
        if (i == *n)
            return schema_fail(ctx,
                               "\"required\" names \"%s\", which is not in \"properties\", at %s",
                               r->valuestring, schema_where(path));
        (*props)[i].required = 1;
    }
    return 0;
}

/* A name can be written without escapes (so an additional key may equal it). */
static int plain_name(const char *name) {
    for (const unsigned char *s = (const unsigned char *)name; *s; s++)
        if (*s < 0x20 || *s == '"' || *s == '\\') return 0;
    return 1;
}

/* Appends a character class item for code point cp (UTF-8 bytes at s, len). */
static void put_class_char(struct strbuf *b, const char *s, int len, long cp) {
    if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
        cp >= 0x80)
        schema_sb_putn(b, s, (size_t)len);
    else
        schema_sb_printf(b, "\\x%02lX", cp);
}

/* The number of distinct characters that follow the first depth bytes of
 * names[0..n) (sorted); *ends is set when one of the names ends there. */
static int key_groups(const char **names, int n, size_t depth, int *ends) {
    int groups = 0, len = 1;
    *ends = 0;
    for (int i = 0; i < n; i++) {
        if (names[i][depth] == '\0') {
            *ends = 1;
            continue;
        }
        schema_utf8_next((const unsigned char *)names[i] + depth, &len);
        if (i == 0 || names[i - 1][depth] == '\0' ||
            strncmp(names[i - 1] + depth, names[i] + depth, (size_t)len) != 0)
            groups++;
    }
    return groups;
}

/* Emits the rule called name for the rest of an additional key (after its
 * opening quote) whose first depth bytes equal those of names[0..n) (plain,
 * distinct, sorted): any escape-free rest that makes the key none of them.
 * A chain of single children is walked in a loop and recursion happens only
 * where the names branch, so a long name costs no stack. */
static int gen_key_node(struct schema_ctx *ctx, const char **names, int n, size_t depth,
                        const char *name) {
    char own[64], child[64];
    snprintf(own, sizeof own, "%s", name);
    for (;;) {
        int ends, groups = key_groups(names, n, depth, &ends), alts = 0, rc = 0, len = 1;
        int next_n = 0;
        const char **next_names = NULL;
        size_t next_depth = 0;
        struct strbuf body = {0}, cls = {0};
        schema_sb_puts(&cls, "[^\"\\\\\\x00-\\x1F");
        for (int i = 0, j; i < n && rc == 0; i = j) {
            j = i + 1;
            if (names[i][depth] == '\0') continue;
            long cp = schema_utf8_next((const unsigned char *)names[i] + depth, &len);
            while (j < n && strncmp(names[j] + depth, names[i] + depth, (size_t)len) == 0) j++;
            put_class_char(&cls, names[i] + depth, len, cp);
            schema_rule_name(ctx, "key", "", child, sizeof child);
            schema_sb_puts(&body, alts++ ? " | \"" : "\"");
            schema_put_literal_text(&body, names[i] + depth, (size_t)len);
            schema_sb_printf(&body, "\" %s", child);
            next_names = names + i;
            next_n = j - i;
            next_depth = depth + (size_t)len;
            if (groups > 1) rc = gen_key_node(ctx, next_names, next_n, next_depth, child);
        }
        schema_sb_printf(&body, "%s%s] key-free", alts ? " | " : "", cls.p ? cls.p : "");
        if (!ends) schema_sb_puts(&body, " | \"\\\"\"");
        if (rc == 0 && (body.oom || cls.oom)) rc = schema_fail_oom(ctx);
        if (rc == 0) schema_sb_printf(&ctx->rules, "%s ::= %s\n", own, body.p);
        free(body.p);
        free(cls.p);
        if (rc || groups != 1) return rc;
        names = next_names;
        n = next_n;
        depth = next_depth;
        snprintf(own, sizeof own, "%s", child);
    }
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Expression for the key of an additional property: any string without
 * escapes that is none of the declared names (any string when none). */
static int gen_extra_key(struct schema_ctx *ctx, const struct prop *props, int n,
                         struct strbuf *out) {
    if (n == 0) {
        ctx->used |= USE_STRING;
        schema_sb_puts(out, "string");
        return 0;
    }
    const char **names = calloc((size_t)n, sizeof *names);
    if (names == NULL) return schema_fail_oom(ctx);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (plain_name(props[i].name)) names[m++] = props[i].name;
    qsort(names, (size_t)m, sizeof *names, compare_names);
    char root[64];
    schema_rule_name(ctx, "key", "", root, sizeof root);
    ctx->used |= USE_KEY_FREE;
    schema_sb_printf(out, "( \"\\\"\" %s )", root);
    int rc = gen_key_node(ctx, names, m, 0, root);
    free(names);
    return rc;
}

/* Expression for one additional member ("key" ws ":" ws value), or empty
 * (out untouched) when additionalProperties is false. */
static int gen_extra_member(struct schema_ctx *ctx, const cJSON *s, const char *path,
                            const struct prop *props, int n, struct strbuf *out) {
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (cJSON_IsFalse(ap)) return 0;
    if (gen_extra_key(ctx, props, n, out)) return -1;
    schema_sb_puts(out, " ws \":\" ws ");
    if (ap == NULL || cJSON_IsTrue(ap)) {
        ctx->used |= USE_VALUE;
        schema_sb_puts(out, "value");
        return 0;
    }
    return schema_gen_child(ctx, ap, path, "additionalProperties", NULL, out);
}

/* Expressions "key" ws ":" ws value of every declared property into kv[]. */
static int gen_members(struct schema_ctx *ctx, const char *path, const struct prop *props, int n,
                       struct strbuf *kv) {
    for (int i = 0; i < n; i++) {
        char *ppath = schema_child_path(path, "properties", props[i].name);
        if (ppath == NULL) return schema_fail_oom(ctx);
        int rc = schema_gen_string_value(ctx, props[i].name, ppath, &kv[i]);
        schema_sb_puts(&kv[i], " ws \":\" ws ");
        rc = rc ? rc : schema_gen_schema(ctx, props[i].schema, ppath, &kv[i]);
        free(ppath);
        if (rc) return rc;
        if (kv[i].oom) return schema_fail_oom(ctx);
    }
    return 0;
}

/* The rules rest[i] (i = 1..n): the members after the i-th declared one,
 * each with its comma; rest[i] is left empty when nothing can follow. */
static int gen_rests(struct schema_ctx *ctx, const char *path, const struct prop *props, int n,
                     const struct strbuf *kv, const char *extra, struct strbuf *rest) {
    for (int i = n; i >= 1; i--) {
        struct strbuf body = {0};
        if (i == n && extra[0]) schema_sb_printf(&body, "( \",\" ws %s ws )*", extra);
        if (i < n) {
            schema_sb_printf(&body, props[i].required ? "\",\" ws %s ws" : "( \",\" ws %s ws )?",
                             kv[i].p);
            if (rest[i + 1].p) schema_sb_printf(&body, " %s", rest[i + 1].p);
        }
        int rc = body.p ? schema_add_rule(ctx, "rest", schema_path_hint(path), &body, &rest[i]) : 0;
        free(body.p);
        if (rc) return rc;
    }
    return 0;
}

/* The inside of an object: "{" ws inside "}". Members come in the declared
 * order, each optional one may be left out, additional ones come last. */
static void gen_inside(const struct prop *props, int n, const struct strbuf *kv, const char *extra,
                       const struct strbuf *rest, struct strbuf *out) {
    int alts = 0, first_required = n;
    for (int i = 0; i < n; i++)
        if (props[i].required) {
            first_required = i;
            break;
        }
    schema_sb_puts(out, "( ");
    for (int j = 0; j < n && j <= first_required; j++) {
        schema_sb_printf(out, "%s%s ws", alts++ ? " | " : "", kv[j].p);
        if (rest[j + 1].p) schema_sb_printf(out, " %s", rest[j + 1].p);
    }
    if (first_required == n && extra[0]) {
        schema_sb_printf(out, "%s%s ws ( \",\" ws %s ws )*", alts++ ? " | " : "", extra, extra);
    }
    schema_sb_puts(out, first_required == n ? " )?" : " )");
    if (alts == 0) {
        out->n = 0;
        if (out->p) out->p[0] = '\0';
    }
}

int schema_gen_object(struct schema_ctx *ctx, const cJSON *s, const char *path,
                      struct strbuf *out) {
    struct prop *props;
    int n, rc;
    if (object_props(ctx, s, path, &props, &n)) {
        free(props);
        return -1;
    }
    struct strbuf *kv = calloc((size_t)n + 1, sizeof *kv);
    struct strbuf *rest = calloc((size_t)n + 2, sizeof *rest);
    struct strbuf extra = {0}, inside = {0}, body = {0};
    ctx->used |= USE_WS;
    if (kv == NULL || rest == NULL)
        rc = schema_fail_oom(ctx);
    else
        rc = gen_members(ctx, path, props, n, kv);
    if (rc == 0) rc = gen_extra_member(ctx, s, path, props, n, &extra);
    if (rc == 0 && extra.oom) rc = schema_fail_oom(ctx);
    if (rc == 0) rc = gen_rests(ctx, path, props, n, kv, extra.p ? extra.p : "", rest);
    if (rc == 0) gen_inside(props, n, kv, extra.p ? extra.p : "", rest, &inside);
    if (rc == 0 && inside.oom) rc = schema_fail_oom(ctx);
    if (rc == 0) {
        schema_sb_printf(&body, "\"{\" ws %s%s\"}\"", inside.p ? inside.p : "",
                         inside.n ? " " : "");
        rc = schema_add_rule(ctx, "obj", schema_path_hint(path), &body, out);
    }
    for (int i = 0; kv && i < n; i++) free(kv[i].p);
    for (int i = 0; rest && i < n + 2; i++) free(rest[i].p);
    free(kv);
    free(rest);
    free(props);
    free(extra.p);
    free(inside.p);
    free(body.p);
    return rc;
}
