/* serve_show.c -- `lockstep serve --check-config`: the settings in effect,
 * once the defaults, the file and the command line are combined, as one
 * JSON object on stdout, with the file's key names.
 *
 * Keys are never printed, only where they came from ("(from file X)",
 * "(from $ENV)"). Model files are not loaded: each model says whether its
 * file exists ("found"), which is all a check of the settings looks at. */
#include "serve_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void add_text(cJSON *object, const char *key, const char *text) {
    cJSON_AddItemToObject(object, key, text ? cJSON_CreateString(text) : cJSON_CreateNull());
}

static void add_list(cJSON *object, const char *key, const char *const *items, int n) {
    cJSON *list = cJSON_AddArrayToObject(object, key);
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(list, cJSON_CreateString(items[i]));
}

/* A placement as --place spells it: NAME=tp:N[,hosts:a+b]. */
static void add_places(cJSON *object, const struct gateway_params *p) {
    cJSON *list = cJSON_AddArrayToObject(object, "place");
    for (int i = 0; i < p->n_places; i++) {
        const struct cluster_place_spec *s = &p->places[i];
        char text[128 + 16 + CLUSTER_HOSTS_MAX * CLUSTER_HOST_NAME_MAX];
        size_t n = (size_t)snprintf(text, sizeof(text), "%s=tp:%d", s->model, s->tp);
        for (int h = 0; h < s->n_hosts && n < sizeof(text); h++)
            n += (size_t)snprintf(text + n, sizeof(text) - n, "%s%s",
                                  h ? "+" : ",hosts:", s->hosts[h]);
        cJSON_AddItemToArray(list, cJSON_CreateString(text));
    }
}

/* The hosts as hostfile lines; none means this machine alone. */
static void add_hosts(cJSON *object, const struct gateway_params *p) {
    cJSON *list = cJSON_AddArrayToObject(object, "cluster");
    for (int i = 0; i < p->n_hosts; i++) {
        const struct cluster_host *h = &p->hosts[i];
        char text[CLUSTER_HOST_NAME_MAX + 2 * CLUSTER_PATH_MAX + 64];
        size_t n = (size_t)snprintf(text, sizeof(text), "%s slots=%d", h->name, h->slots);
        if (h->memory_limit)
            n += (size_t)snprintf(text + n, sizeof(text) - n, " memory=%lld",
                                  (long long)h->memory_limit);
        if (h->lockstep[0])
            n += (size_t)snprintf(text + n, sizeof(text) - n, " lockstep=%s", h->lockstep);
        if (h->wrapper[0]) snprintf(text + n, sizeof(text) - n, " wrapper=%s", h->wrapper);
        cJSON_AddItemToArray(list, cJSON_CreateString(text));
    }
}

static void add_models(cJSON *object, const struct serve_options *o) {
    cJSON *list = cJSON_AddArrayToObject(object, "models");
    for (int i = 0; i < o->params.n_models; i++) {
        const struct gateway_model *m = &o->models[i];
        cJSON *model = cJSON_CreateObject();
        int n_args = 0;
        while (m->runner_args && m->runner_args[n_args]) n_args++;
        /* the first two are --log-format's, shown as log_format */
        add_text(model, "path", m->path);
        cJSON_AddBoolToObject(model, "found", access(m->path, R_OK) == 0);
        add_text(model, "name", m->name);
        add_text(model, "tokenizer", m->tokenizer_path);
        cJSON_AddNumberToObject(model, "tp", m->tp);
        cJSON_AddNumberToObject(model, "threads", m->threads);
        add_text(model, "launcher", m->launcher == GATEWAY_LAUNCHER_MPI ? "mpi" : "local");
        add_text(model, "hosts", m->hosts);
        add_text(model, "chat_template", m->chat_template);
        add_text(model, "pooling", m->pooling);
        add_list(model, "runner_args", n_args > 2 ? m->runner_args + 2 : NULL, n_args - 2);
        cJSON_AddItemToArray(list, model);
    }
}

static void add_server(cJSON *object, const struct serve_options *o) {
    const struct gateway_params *p = &o->params;
    add_text(object, "host", p->host);
    cJSON_AddNumberToObject(object, "port", p->port);
    add_text(object, "api_key", p->api_key ? o->api_key_source : NULL);
    add_text(object, "admin_key", p->admin_key ? o->admin_key_source : NULL);
    cJSON_AddNumberToObject(object, "max_body", (double)p->max_body_bytes);
    cJSON_AddNumberToObject(object, "max_prompt_tokens", p->max_prompt_tokens);
    cJSON_AddNumberToObject(object, "max_tokens", p->max_tokens_limit);
    cJSON_AddNumberToObject(object, "max_concurrent", p->max_concurrent);
    cJSON_AddNumberToObject(object, "keep_alive", p->keep_alive_seconds);
    cJSON_AddNumberToObject(object, "watchdog", p->watchdog_seconds);
    cJSON_AddNumberToObject(object, "drain_timeout", p->drain_seconds);
    cJSON_AddNumberToObject(object, "connection_timeout", p->connection_timeout_seconds);
    cJSON_AddNumberToObject(object, "max_client_connections", p->max_client_connections);
    add_list(object, "cors_origins", p->cors_origins, p->n_cors_origins);
    cJSON_AddBoolToObject(object, "enable_faults", p->enable_faults);
    add_text(object, "prefix_cache",
             o->prefix_cache < 0 ? "default"
             : o->prefix_cache   ? "on"
                                 : "off");
    add_list(object, "runner_args", o->runner_args, o->n_runner_args);
    add_hosts(object, p);
    add_places(object, p);
    cJSON_AddNumberToObject(object, "probe_interval", p->probe_seconds);
    add_text(object, "log_format", o->log_format == LOG_FORMAT_JSON ? "json" : "text");
    cJSON_AddBoolToObject(object, "log_requests", p->log_requests);
}

void serve_config_print(const struct serve_options *o) {
    cJSON *settings = cJSON_CreateObject();
    add_text(settings, "config", o->config_path);
    add_server(settings, o);
    add_models(settings, o);
    char *text = cJSON_Print(settings);
    if (text) printf("%s\n", text);
    free(text);
    cJSON_Delete(settings);
}
