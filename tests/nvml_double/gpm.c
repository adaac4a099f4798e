/* GPM calls of the test double: support query, samples (whole GPU and per MIG GPU instance) and
 * metrics over two samples.
 *
 * A sample records when it was taken and the GPU's (or GPU instance's) configured GPM values at
 * that moment (`gpm.<id>` keys, see control.c); nvmlGpmMetricsGet answers the values of the later
 * sample. As real GPM, it needs two samples of the same device, the second taken at least 100 ms
 * after the first: otherwise it answers INVALID_ARGUMENT, so a caller that samples too often fails. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "double.h"

#define MIN_SPACING_NS 100000000LL
#define SAMPLE_MAGIC 0x47504d53u

const unsigned int dbl_gpm_ids[DBL_GPM_IDS] = {
    NVML_GPM_METRIC_GRAPHICS_UTIL,           NVML_GPM_METRIC_SM_UTIL,
    NVML_GPM_METRIC_SM_OCCUPANCY,            NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    NVML_GPM_METRIC_DRAM_BW_UTIL,            NVML_GPM_METRIC_PCIE_TX_PER_SEC,
    NVML_GPM_METRIC_PCIE_RX_PER_SEC,         NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
    NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
};

static char *metric_names[DBL_GPM_IDS] = {
    "gr_util", "sm_util", "sm_occupancy", "any_tensor_util", "dram_bw_util",
    "pcie_tx", "pcie_rx", "nvlink_rx", "nvlink_tx",
};
static char percent[] = "%", mib_per_second[] = "MiB/s";

int dbl_gpm_index(unsigned int metric_id) {
    for (int i = 0; i < DBL_GPM_IDS; i++)
        if (dbl_gpm_ids[i] == metric_id)
            return i;
    return -1;
}

struct nvmlGpmSample_st {
    unsigned int magic;
    int taken;
    unsigned int slot;
    long gpu_instance; /* -1: the whole GPU */
    long long taken_ns;
    double values[DBL_GPM_IDS];
};

static long long monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport) {
    if (device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    dbl_gpu_t *g;
    nvmlReturn_t ret = dbl_enter(__func__, device, &g);
    if (ret != NVML_SUCCESS)
        return ret;
    if (gpmSupport == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION)
        ret = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    else
        gpmSupport->isSupportedDevice = g->gpm_supported != 0;
    dbl_unlock_state();
    return ret;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *gpmSample) {
    nvmlReturn_t ret = dbl_enter(__func__, NULL, NULL);
    if (ret != NVML_SUCCESS)
        return ret;
    dbl_unlock_state();
    if (gpmSample == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlGpmSample_st *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NVML_ERROR_MEMORY;
    s->magic = SAMPLE_MAGIC;
    *gpmSample = s;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample) {
    nvmlReturn_t ret = dbl_enter(__func__, NULL, NULL);
    if (ret != NVML_SUCCESS)
        return ret;
    dbl_unlock_state();
    if (gpmSample == NULL || gpmSample->magic != SAMPLE_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    gpmSample->magic = 0;
    free(gpmSample);
    return NVML_SUCCESS;
}

/* Take a sample of the whole GPU (gpu_instance < 0) or of one of its GPU instances. */
static nvmlReturn_t take(const char *fn, nvmlDevice_t device, long gpu_instance, nvmlGpmSample_t s) {
    if (device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    dbl_gpu_t *g;
    nvmlReturn_t ret = dbl_enter(fn, device, &g);
    if (ret != NVML_SUCCESS)
        return ret;
    const double *values = g->gpm;
    if (s == NULL || s->magic != SAMPLE_MAGIC || device->mig >= 0)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else if (!g->gpm_supported)
        ret = NVML_ERROR_NOT_SUPPORTED;
    else if (gpu_instance >= 0) {
        ret = g->mig_mode == 1 ? NVML_ERROR_NOT_FOUND : NVML_ERROR_INVALID_ARGUMENT;
        for (int k = 0; k < DBL_MAX_MIG && ret != NVML_SUCCESS && g->mig_mode == 1; k++) {
            if (g->mig[k].uuid[0] != '\0' && g->mig[k].gi_id == (unsigned long)gpu_instance) {
                values = g->mig[k].gpm;
                ret = NVML_SUCCESS;
            }
        }
    }
    if (ret == NVML_SUCCESS) {
        s->taken = 1;
        s->slot = device->slot;
        s->gpu_instance = gpu_instance;
        s->taken_ns = monotonic_ns();
        for (int i = 0; i < DBL_GPM_IDS; i++)
            s->values[i] = values[i];
    }
    dbl_unlock_state();
    return ret;
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample) {
    return take(__func__, device, -1, gpmSample);
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId, nvmlGpmSample_t gpmSample) {
    return take(__func__, device, (long)gpuInstanceId, gpmSample);
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet) {
    if (metricsGet == NULL || metricsGet->sample1 == NULL || metricsGet->sample2 == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct nvmlGpmSample_st *a = metricsGet->sample1, *b = metricsGet->sample2;
    if (a->magic != SAMPLE_MAGIC || b->magic != SAMPLE_MAGIC || a->slot >= DBL_MAX_GPUS)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* Enter on the samples' GPU so per-GPU fault rules apply. */
    dbl_gpu_t *g;
    nvmlReturn_t ret = dbl_enter(__func__, &dbl_devices[a->slot], &g);
    if (ret != NVML_SUCCESS)
        return ret;
    if (metricsGet->version != NVML_GPM_METRICS_GET_VERSION)
        ret = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    else if (!a->taken || !b->taken || a->slot != b->slot || a->gpu_instance != b->gpu_instance ||
             b->taken_ns - a->taken_ns < MIN_SPACING_NS || metricsGet->numMetrics > NVML_GPM_METRIC_MAX)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; ret == NVML_SUCCESS && i < metricsGet->numMetrics; i++) {
        nvmlGpmMetric_t *m = &metricsGet->metrics[i];
        char rule[32];
        snprintf(rule, sizeof rule, "gpm.%u", m->metricId);
        int index = dbl_gpm_index(m->metricId);
        m->value = 0;
        m->metricInfo.shortName = m->metricInfo.longName = m->metricInfo.unit = NULL;
        if ((m->nvmlReturn = dbl_rule_error(rule, g)) != NVML_SUCCESS)
            continue;
        if (index < 0) {
            m->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            continue;
        }
        m->value = b->values[index];
        m->metricInfo.shortName = m->metricInfo.longName = metric_names[index];
        m->metricInfo.unit = index < 5 ? percent : mib_per_second;
    }
    dbl_unlock_state();
    return ret;
}
