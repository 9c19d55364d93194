/* dashboard.c -- which embedded dashboard file a URL asks for.
 *
 * The page lives in src/gateway/http/dashboard/ and is compiled into the
 * binary (cmake/embed.cmake writes the table dashboard_files); http.c
 * serves what this finds. The page itself holds no data: it reads
 * GET /v1/cluster, /v1/models and /metrics with the key the user types in,
 * so it is served without a key. */
#include "gateway/http/dashboard.h"

#include <string.h>

#define DASHBOARD_PREFIX "/dashboard/"

static const struct dashboard_file *find_file(const char *name) {
    for (int i = 0; i < dashboard_n_files; i++)
        if (!strcmp(dashboard_files[i].name, name)) return &dashboard_files[i];
    return NULL;
}

int http_dashboard_asset(const char *url, const unsigned char **body, size_t *length,
                         const char **content_type) {
    const struct dashboard_file *file = NULL;
    size_t prefix = strlen(DASHBOARD_PREFIX);
    if (!strcmp(url, "/") || !strcmp(url, "/dashboard") || !strcmp(url, DASHBOARD_PREFIX))
        file = find_file("index.html");
    else if (!strncmp(url, DASHBOARD_PREFIX, prefix))
        /* the page is reached as "/", never as a file of its own */
        file = strcmp(url + prefix, "index.html") ? find_file(url + prefix) : NULL;
    else
        return 0;
    if (!file) return -1;
    *body = file->bytes;
    *length = file->length;
    *content_type = file->content_type;
    return 1;
}
