/* NVML event calls of the test double: event sets, registration and waiting for XID events.
 *
 * A GPU's XID events are its `xids` key (control.c), oldest first. Each event is delivered once:
 * the double counts, per GPU, how many have been handed out (across event sets, so a set made
 * after NVML is initialised again does not repeat old ones). nvmlEventSetWait_v2 polls the
 * control file every few milliseconds without holding the state lock, so other calls go on while
 * a wait is pending; `hang.nvmlEventSetWait_v2=1` makes every wait block. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "double.h"

#define SET_MAGIC 0x45565453u
#define POLL_MS 5

struct nvmlEventSet_st {
    unsigned int magic;
    unsigned long long types[DBL_MAX_GPUS]; /* registered event types per GPU slot */
};

static unsigned int delivered[DBL_MAX_GPUS]; /* XID events handed out so far, per GPU slot */

static long long monotonic_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000LL + ts.tv_nsec / 1000000L;
}

static void nap(void) {
    struct timespec ts = {0, POLL_MS * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    nvmlReturn_t ret = dbl_enter(__func__, NULL, NULL);
    if (ret != NVML_SUCCESS)
        return ret;
    dbl_unlock_state();
    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlEventSet_st *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NVML_ERROR_MEMORY;
    s->magic = SET_MAGIC;
    *set = s;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    nvmlReturn_t ret = dbl_enter(__func__, NULL, NULL);
    if (ret != NVML_SUCCESS)
        return ret;
    dbl_unlock_state();
    if (set == NULL || set->magic != SET_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    set->magic = 0;
    free(set);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes) {
    dbl_gpu_t *g;
    nvmlReturn_t ret = dbl_enter(__func__, device, &g);
    if (ret != NVML_SUCCESS)
        return ret;
    if (eventTypes == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else
        *eventTypes = nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError;
    dbl_unlock_state();
    return ret;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set) {
    if (device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    dbl_gpu_t *g;
    nvmlReturn_t ret = dbl_enter(__func__, device, &g);
    if (ret != NVML_SUCCESS)
        return ret;
    if (set == NULL || set->magic != SET_MAGIC || device->mig >= 0)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else
        set->types[device->slot] |= eventTypes;
    dbl_unlock_state();
    return ret;
}

/* The next undelivered XID event of a GPU registered in `set`: 1 and `data` filled, or 0. Locked. */
static int next_event(nvmlEventSet_t set, nvmlEventData_t *data) {
    for (unsigned int slot = 0; slot < dbl_state.gpus; slot++) {
        const dbl_gpu_t *g = &dbl_state.gpu[slot];
        if (!(set->types[slot] & nvmlEventTypeXidCriticalError) || !g->present || g->lost)
            continue;
        if (delivered[slot] > g->nxids) /* the list was shortened: deliver what is added to it */
            delivered[slot] = g->nxids;
        if (delivered[slot] == g->nxids)
            continue;
        const dbl_xid_t *x = &g->xids[delivered[slot]++];
        data->device = &dbl_devices[slot];
        data->eventType = nvmlEventTypeXidCriticalError;
        data->eventData = x->xid;
        data->gpuInstanceId = x->gi_id;
        data->computeInstanceId = x->gi_id == 0xFFFFFFFFu ? 0xFFFFFFFFu : 0;
        return 1;
    }
    return 0;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    nvmlReturn_t ret = dbl_enter(__func__, NULL, NULL);
    if (ret != NVML_SUCCESS)
        return ret;
    if (set == NULL || set->magic != SET_MAGIC || data == NULL) {
        dbl_unlock_state();
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    long long deadline = monotonic_ms() + timeoutms;
    for (;;) {
        if (dbl_init_count == 0) {
            ret = NVML_ERROR_UNINITIALIZED; /* NVML was shut down while waiting */
            break;
        }
        if (next_event(set, data)) {
            ret = NVML_SUCCESS;
            break;
        }
        if (monotonic_ms() >= deadline) {
            ret = NVML_ERROR_TIMEOUT;
            break;
        }
        dbl_unlock_state();
        nap();
        dbl_lock_state();
    }
    dbl_unlock_state();
    return ret;
}
