/* json_schema_ref.c -- "$ref" for the JSON Schema converter (json_schema.c
 * calls schema_gen_ref for a schema with "$ref", and
 * schema_check_left_cycles once the whole document is converted;
 * json_schema_internal.h is what they share).
 *
 * A local reference ("#/$defs/node", any JSON pointer into the document)
 * becomes a rule of its own, made once per target, so a recursive schema
 * is a recursive grammar. A recursion that consumes no input before it
 * comes back (a left recursion) would never end in a grammar engine: the
 * references reached at the start of a referred schema are recorded as
 * edges, and a cycle among them is refused, naming the reference. */
#include "json_schema_internal.h"

#include <cjson/cJSON.h>

#include <stdlib.h>
#include <string.h>

/* A $ref target that has a rule. */
struct ref_rule {
    const cJSON *target; /* the schema referred to */
    const char *pointer; /* the $ref's text that first named it (in the schema) */
    char name[48];       /* its rule's name */
};

/* A $ref met without consuming input since the start of a referred schema:
 * from (index in refs, or -1 for the root) reaches to first. */
struct left_edge {
    int from; /* the schema whose rule begins with the reference */
    int to;   /* the schema referred to */
};

/* The schema that a local JSON pointer (after '#') names in the root. */
static const cJSON *resolve_pointer(const cJSON *root, const char *pointer) {
    const cJSON *node = root;
    char token[256];
    while (node && *pointer == '/') {
        size_t n = 0;
        for (pointer++; *pointer && *pointer != '/'; pointer++) {
            char c = *pointer;
            if (c == '~' && (pointer[1] == '0' || pointer[1] == '1'))
                c = *++pointer == '0' ? '~' : '/';
            if (n + 1 >= sizeof token) return NULL;
            token[n++] = c;
        }
        token[n] = '\0';
        if (cJSON_IsArray(node)) {
            char *end;
            long k = strtol(token, &end, 10);
            node = (n && *end == '\0' && k >= 0) ? cJSON_GetArrayItem(node, (int)k) : NULL;
        } else {
            node = cJSON_GetObjectItemCaseSensitive(node, token);
        }
    }
    return *pointer ? NULL : node;
}

static int add_edge(struct schema_ctx *ctx, int to) {
    if (ctx->n_edges == ctx->cap_edges) {
        int cap = ctx->cap_edges ? 2 * ctx->cap_edges : 16;
        struct left_edge *e = realloc(ctx->edges, (size_t)cap * sizeof *e);
        if (e == NULL) return schema_fail_oom(ctx);
        ctx->edges = e;
        ctx->cap_edges = cap;
    }
    ctx->edges[ctx->n_edges++] = (struct left_edge){ctx->current, to};
    return 0;
}

/* A new entry in refs for target, with a fresh rule name; its index or -1. */
static int new_ref(struct schema_ctx *ctx, const cJSON *target, const char *pointer) {
    if (ctx->n_refs == ctx->cap_refs) {
        int cap = ctx->cap_refs ? 2 * ctx->cap_refs : 16;
        struct ref_rule *r = realloc(ctx->refs, (size_t)cap * sizeof *r);
        if (r == NULL) return schema_fail_oom(ctx);
        ctx->refs = r;
        ctx->cap_refs = cap;
    }
    struct ref_rule *r = &ctx->refs[ctx->n_refs];
    r->target = target;
    r->pointer = pointer;
    schema_rule_name(ctx, "ref", schema_path_hint(pointer + 1), r->name, sizeof r->name);
    return ctx->n_refs++;
}

/* Emits the rule of refs[index]: its target's expression. */
static int gen_ref_rule(struct schema_ctx *ctx, int index, const char *pointer) {
    struct strbuf body = {0};
    int saved_current = ctx->current, saved_consumed = ctx->consumed;
    ctx->current = index;
    ctx->consumed = 0;
    int rc = schema_gen_schema(ctx, ctx->refs[index].target, pointer, &body);
    ctx->current = saved_current;
    ctx->consumed = saved_consumed;
    if (rc == 0 && (body.oom || body.p == NULL)) rc = schema_fail_oom(ctx);
    if (rc == 0) schema_sb_printf(&ctx->rules, "%s ::= %s\n", ctx->refs[index].name, body.p);
    free(body.p);
    return rc;
}

int schema_gen_ref(struct schema_ctx *ctx, const cJSON *s, const char *path, struct strbuf *out) {
    static const char *const none[] = {NULL};
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (schema_check_siblings(ctx, s, path, "$ref", none)) return -1;
    if (!cJSON_IsString(ref))
        return schema_fail(ctx, "\"$ref\" must be a string at %s", schema_where(path));
    const char *pointer = ref->valuestring;
    if (pointer[0] != '#')
        return schema_fail(ctx, "\"$ref\" to another document (\"%s\") is not supported at %s",
                           pointer, schema_where(path));
    const cJSON *target = resolve_pointer(ctx->root, pointer + 1);
    if (target == NULL)
        return schema_fail(ctx, "\"$ref\" \"%s\" does not resolve at %s", pointer,
                           schema_where(path));
    int index = 0;
    while (index < ctx->n_refs && ctx->refs[index].target != target) index++;
    int fresh = index == ctx->n_refs;
    if (fresh && new_ref(ctx, target, pointer) < 0) return -1;
    if (!ctx->consumed && add_edge(ctx, index)) return -1;
    schema_sb_puts(out, ctx->refs[index].name);
    return fresh ? gen_ref_rule(ctx, index, pointer + 1) : 0;
}

int schema_check_left_cycles(struct schema_ctx *ctx) {
    int n = ctx->n_refs;
    char *state = calloc((size_t)n + 1, 1); /* 0 new, 1 on the path, 2 done */
    int *stack = malloc(((size_t)n + 1) * sizeof *stack);
    int *next = calloc((size_t)n + 1, sizeof *next); /* next edge to try */
    int rc = 0;
    if (state == NULL || stack == NULL || next == NULL) {
        free(state);
        free(stack);
        free(next);
        return schema_fail_oom(ctx);
    }
    for (int start = 0; start < n && rc == 0; start++) {
        if (state[start]) continue;
        int depth = 0;
        stack[depth++] = start;
        state[start] = 1;
        while (depth > 0 && rc == 0) {
            int v = stack[depth - 1], e = next[v]++;
            if (e >= ctx->n_edges) {
                state[v] = 2;
                depth--;
            } else if (ctx->edges[e].from == v && state[ctx->edges[e].to] == 1) {
                rc = schema_fail(ctx, "\"$ref\" cycle that consumes no input through \"%s\"",
                                 ctx->refs[ctx->edges[e].to].pointer);
            } else if (ctx->edges[e].from == v && state[ctx->edges[e].to] == 0) {
                state[ctx->edges[e].to] = 1;
                stack[depth++] = ctx->edges[e].to;
            }
        }
    }
    free(state);
    free(stack);
    free(next);
    return rc;
}
