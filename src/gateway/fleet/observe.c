/* observe.c -- GET /metrics: what is read only when it is asked (each
 * host's state, each instance's state and the age of its oldest request),
 * then every family of src/gateway/core's registry. */
#include "gateway/fleet/fleet.h"

char *fleet_metrics_text(struct fleet *f) {
    uint64_t now = clock_now_us();
    pthread_mutex_lock(&f->cluster_lock);
    for (int i = 0; i < f->n_hosts; i++)
        gateway_observe_host(f->metrics, f->hosts[i].name, !f->hosts[i].lost);
    for (int i = 0; i < f->n_instances; i++) {
        struct fleet_instance *in = f->instances[i];
        struct supervisor_view view;
        double oldest = supervisor_oldest(&in->supervisor, now);
        supervisor_view(&in->supervisor, &view);
        gateway_observe_state(f->metrics, in->name, in->id, supervisor_state_names,
                              SUPERVISOR_STATES, (int)view.state, oldest);
    }
    pthread_mutex_unlock(&f->cluster_lock);
    return gateway_metrics_render(f->metrics);
}
