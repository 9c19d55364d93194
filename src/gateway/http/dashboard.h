/* dashboard.h -- the cluster dashboard's files, embedded in the binary
 * (internal to src/gateway).
 *
 * The page (src/gateway/http/dashboard/: index.html, dashboard.js,
 * dashboard.css) is turned into a C table at build time by
 * cmake/embed.cmake, so the gateway serves it with nothing read from disk
 * and nothing fetched from elsewhere. http.c asks http_dashboard_asset
 * for every GET and answers the ones it knows with the headers below. */
#ifndef LOCKSTEP_GATEWAY_DASHBOARD_H
#define LOCKSTEP_GATEWAY_DASHBOARD_H

#include <stddef.h>

/* Headers every dashboard file is sent with: a browser revalidates it
 * (the page changes with the binary), and may load nothing from any other
 * origin: no script, style, font or connection (data: images only, for the
 * empty favicon). */
#define DASHBOARD_CACHE_CONTROL "no-cache"
#define DASHBOARD_CSP                                                                              \
    "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; "             \
    "script-src 'self'"

/* One embedded file (the generated table's entries). */
struct dashboard_file {
    const char *name;           /* its name under src/gateway/http/dashboard/ */
    const char *content_type;   /* its Content-Type */
    const unsigned char *bytes; /* its contents, plus a NUL not counted */
    size_t length;              /* bytes in bytes */
};

/* The table cmake/embed.cmake writes (dashboard_files.c in the build tree). */
extern const struct dashboard_file dashboard_files[];
extern const int dashboard_n_files;

/* What GET url is for the dashboard: 1 and the file to send (body, length,
 * content type) for "/", "/dashboard", "/dashboard/" (the page) and
 * "/dashboard/NAME" (its other files); -1 for any other URL under
 * "/dashboard/" (answered 404); 0 for URLs that are not the dashboard's. */
int http_dashboard_asset(const char *url, const unsigned char **body, size_t *length,
                         const char **content_type);

#endif
