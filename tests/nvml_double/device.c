/* NVML per-device queries of the test double. Every call goes through dbl_enter() (trace, hang,
 * delay, UNINITIALIZED, lost GPU, injected error) and answers from the GPU's control values. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "double.h"

#define ENTER(device)                                       \
    dbl_gpu_t *g;                                           \
    nvmlReturn_t ret = dbl_enter(__func__, (device), &g);   \
    if (ret != NVML_SUCCESS)                                \
        return ret

#define LEAVE()          \
    dbl_unlock_state(); \
    return ret

/* A query with one output pointer: *out = expr. */
#define ONE_VALUE(fn, type, expr)                     \
    nvmlReturn_t fn(nvmlDevice_t device, type *out) { \
        ENTER(device);                                \
        if (out == NULL)                              \
            ret = NVML_ERROR_INVALID_ARGUMENT;        \
        else                                          \
            *out = (expr);                            \
        LEAVE();                                      \
    }

ONE_VALUE(nvmlDeviceGetMinorNumber, unsigned int, g->minor)
ONE_VALUE(nvmlDeviceGetPowerUsage, unsigned int, g->power_mw)
ONE_VALUE(nvmlDeviceGetEnforcedPowerLimit, unsigned int, g->power_limit_mw)
ONE_VALUE(nvmlDeviceGetTotalEnergyConsumption, unsigned long long, g->energy_mj)
ONE_VALUE(nvmlDeviceGetPcieReplayCounter, unsigned int, g->pcie_replay)
ONE_VALUE(nvmlDeviceGetCurrPcieLinkGeneration, unsigned int, g->pcie_gen)
ONE_VALUE(nvmlDeviceGetMaxPcieLinkGeneration, unsigned int, g->pcie_gen_max)
ONE_VALUE(nvmlDeviceGetCurrPcieLinkWidth, unsigned int, g->pcie_width)
ONE_VALUE(nvmlDeviceGetMaxPcieLinkWidth, unsigned int, g->pcie_width_max)
ONE_VALUE(nvmlDeviceGetCurrentClocksEventReasons, unsigned long long, g->clock_event_reasons)

/* nvml.h: nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node); a host
 * without NUMA information answers (unsigned) -1, a platform that cannot tell NOT_SUPPORTED. */
nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node) {
    ENTER(device);
    if (node == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else if (g->numa_node == DBL_NUMA_UNSUPPORTED)
        ret = NVML_ERROR_NOT_SUPPORTED;
    else
        *node = (unsigned int)g->numa_node;
    LEAVE();
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    ENTER(device);
    ret = dbl_copy_string(name, length, g->name);
    LEAVE();
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    ENTER(device);
    dbl_mig_t *m = dbl_mig_of(device, g);
    ret = dbl_copy_string(uuid, length, m ? m->uuid : g->uuid);
    LEAVE();
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    ENTER(device);
    if (pci == NULL) {
        ret = NVML_ERROR_INVALID_ARGUMENT;
        LEAVE();
    }
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%s", g->pci_bus_id);
    unsigned int domain = 0, bus = 0, dev = 0;
    if (sscanf(g->pci_bus_id, "%x:%x:%x", &domain, &bus, &dev) == 3) {
        pci->domain = domain;
        pci->bus = bus;
        pci->device = dev;
    }
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", domain & 0xffff, bus, dev);
    pci->pciDeviceId = 0x20B210DE;
    LEAVE();
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    ENTER(device);
    if (memory == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else {
        memory->total = g->memory_total;
        memory->free = g->memory_free;
        memory->used = g->memory_used + g->memory_reserved; /* v1 "used" includes the reserved part */
    }
    LEAVE();
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    ENTER(device);
    if (memory == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else if (memory->version != nvmlMemory_v2)
        ret = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    else if (dbl_mig_of(device, g) != NULL) { /* a MIG device: its GPU instance's memory */
        const dbl_mig_t *m = dbl_mig_of(device, g);
        memory->total = m->memory_total;
        memory->reserved = 0;
        memory->free = m->memory_free;
        memory->used = m->memory_used;
    } else {
        memory->total = g->memory_total;
        memory->reserved = g->memory_reserved;
        memory->free = g->memory_free;
        memory->used = g->memory_used;
    }
    LEAVE();
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    ENTER(device);
    if (dbl_mig_of(device, g) != NULL || g->mig_mode == 1) /* no utilization in MIG mode */
        ret = NVML_ERROR_NOT_SUPPORTED;
    else if (utilization == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else {
        utilization->gpu = g->util_gpu;
        utilization->memory = g->util_memory;
    }
    LEAVE();
}

static nvmlReturn_t codec_util(unsigned int value, unsigned int *utilization, unsigned int *period_us) {
    if (utilization == NULL || period_us == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *utilization = value;
    *period_us = 167000;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs) {
    ENTER(device);
    ret = codec_util(g->util_encoder, utilization, samplingPeriodUs);
    LEAVE();
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs) {
    ENTER(device);
    ret = codec_util(g->util_decoder, utilization, samplingPeriodUs);
    LEAVE();
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temperature) {
    ENTER(device);
    if (temperature == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else if (temperature->version != nvmlTemperature_v1)
        ret = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    else if (temperature->sensorType != NVML_TEMPERATURE_GPU)
        ret = NVML_ERROR_NOT_SUPPORTED;
    else
        temperature->temperature = g->temp_gpu;
    LEAVE();
}

static nvmlReturn_t clock_of(const dbl_gpu_t *g, nvmlClockType_t type, int max, unsigned int *clock) {
    if (clock == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (type == NVML_CLOCK_SM)
        *clock = max ? g->clock_sm_max : g->clock_sm;
    else if (type == NVML_CLOCK_MEM)
        *clock = max ? g->clock_mem_max : g->clock_mem;
    else
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    ENTER(device);
    ret = clock_of(g, type, 0, clock);
    LEAVE();
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock) {
    ENTER(device);
    ret = clock_of(g, type, 1, clock);
    LEAVE();
}

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current, nvmlEnableState_t *pending) {
    ENTER(device);
    if (current == NULL || pending == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else
        *current = *pending = (nvmlEnableState_t)g->ecc_mode;
    LEAVE();
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType, unsigned long long *eccCounts) {
    ENTER(device);
    (void)counterType; /* volatile and aggregate counts are the same here */
    if (eccCounts == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else if (g->ecc_mode != NVML_FEATURE_ENABLED)
        ret = NVML_ERROR_NOT_SUPPORTED;
    else if (errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED)
        *eccCounts = g->ecc_corrected;
    else if (errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
        *eccCounts = g->ecc_uncorrected;
    else
        ret = NVML_ERROR_INVALID_ARGUMENT;
    LEAVE();
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos) {
    ENTER(device);
    const dbl_mig_t *m = dbl_mig_of(device, g); /* a MIG device lists its GPU instance's only */
    unsigned int n = 0;
    for (unsigned int i = 0; i < g->nprocs; i++)
        n += m == NULL || g->procs[i].gi_id == m->gi_id;
    if (infoCount == NULL) {
        ret = NVML_ERROR_INVALID_ARGUMENT;
    } else if (*infoCount < n || (infos == NULL && n > 0)) {
        *infoCount = n;
        ret = NVML_ERROR_INSUFFICIENT_SIZE;
    } else {
        unsigned int k = 0;
        for (unsigned int i = 0; i < g->nprocs; i++) {
            if (m != NULL && g->procs[i].gi_id != m->gi_id)
                continue;
            infos[k].pid = g->procs[i].pid;
            infos[k].usedGpuMemory = g->procs[i].used_bytes;
            infos[k].gpuInstanceId = g->procs[i].gi_id;
            infos[k].computeInstanceId = g->procs[i].gi_id == 0xFFFFFFFFu ? 0xFFFFFFFFu : 0;
            k++;
        }
        *infoCount = n;
    }
    LEAVE();
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter, unsigned int *value) {
    ENTER(device);
    if (value == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else if (counter == NVML_PCIE_UTIL_TX_BYTES)
        *value = g->pcie_tx_kbps;
    else if (counter == NVML_PCIE_UTIL_RX_BYTES)
        *value = g->pcie_rx_kbps;
    else
        ret = NVML_ERROR_INVALID_ARGUMENT;
    LEAVE();
}

/* One field id: 0 when filled, else the nvmlReturn_t for that entry. State locked. */
static nvmlReturn_t field_value(const dbl_gpu_t *g, nvmlFieldValue_t *v) {
    char rule[32];
    snprintf(rule, sizeof rule, "field.%u", v->fieldId);
    nvmlReturn_t injected = dbl_rule_error(rule, g);
    if (injected != NVML_SUCCESS)
        return injected;
    switch (v->fieldId) {
    case NVML_FI_DEV_MEMORY_TEMP:
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        v->value.uiVal = g->temp_memory;
        return NVML_SUCCESS;
    case NVML_FI_DEV_ECC_SBE_VOL_TOTAL: /* as nvmlDeviceGetTotalEccErrors(CORRECTED, VOLATILE) */
    case NVML_FI_DEV_ECC_DBE_VOL_TOTAL:
        if (g->ecc_mode != NVML_FEATURE_ENABLED)
            return NVML_ERROR_NOT_SUPPORTED;
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        v->value.ullVal = v->fieldId == NVML_FI_DEV_ECC_SBE_VOL_TOTAL ? g->ecc_corrected : g->ecc_uncorrected;
        return NVML_SUCCESS;
    case NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        v->value.ullVal = g->energy_mj;
        return NVML_SUCCESS;
    case NVML_FI_DEV_PCIE_REPLAY_COUNTER:
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        v->value.uiVal = g->pcie_replay;
        return NVML_SUCCESS;
    default:
        return NVML_ERROR_NOT_SUPPORTED;
    }
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
    ENTER(device);
    if (values == NULL || valuesCount < 0) {
        ret = NVML_ERROR_INVALID_ARGUMENT;
        LEAVE();
    }
    struct timeval now;
    gettimeofday(&now, NULL);
    for (int i = 0; i < valuesCount; i++) {
        values[i].timestamp = (long long)now.tv_sec * 1000000LL + now.tv_usec;
        values[i].latencyUsec = 0;
        values[i].nvmlReturn = field_value(g, &values[i]);
    }
    LEAVE();
}
