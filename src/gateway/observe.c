/* observe.c -- GET /metrics: what is read only when it is asked (each
 * host's state, each instance's state and the age of its oldest request),
 * then every family of src/gateway/core's registry. */
#include "gateway_internal.h"

char *gateway_metrics_text(struct gateway *g) {
    uint64_t now = clock_now_us();
    pthread_mutex_lock(&g->cluster_lock);
    for (int i = 0; i < g->n_hosts; i++)
        gateway_observe_host(&g->metrics, g->hosts[i].name, !g->hosts[i].lost);
    for (int i = 0; i < g->n_instances; i++) {
        struct gateway_instance *in = g->instances[i];
        struct supervisor_view view;
        double oldest = supervisor_oldest(&in->supervisor, now);
        supervisor_view(&in->supervisor, &view);
        gateway_observe_state(&g->metrics, in->name, in->id, supervisor_state_names,
                              SUPERVISOR_STATES, (int)view.state, oldest);
    }
    pthread_mutex_unlock(&g->cluster_lock);
    return gateway_metrics_render(&g->metrics);
}
