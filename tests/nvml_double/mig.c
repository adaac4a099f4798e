/* MIG calls of the test double: MIG mode, MIG device handles, GPU instances and their profiles.
 *
 * A GPU's MIG devices are the `gpu.<slot>.mig.<k>.*` keys (see control.c); index k with an empty
 * uuid has no MIG device. GPU instance profiles come from the table below (an 80 GB A100/H100's,
 * as nvidia-smi mig -lgip lists them); a profile index not in it answers NOT_SUPPORTED. */
#include <string.h>

#include "double.h"

#define ENTER(device)                                     \
    if ((device) == NULL)                                 \
        return NVML_ERROR_INVALID_ARGUMENT;               \
    dbl_gpu_t *g;                                         \
    nvmlReturn_t ret = dbl_enter(__func__, (device), &g); \
    if (ret != NVML_SUCCESS)                              \
        return ret

#define LEAVE()         \
    dbl_unlock_state(); \
    return ret

static const struct {
    unsigned int index; /* NVML_GPU_INSTANCE_PROFILE_* */
    unsigned int id;    /* profile id (nvmlGpuInstanceInfo_t.profileId) */
    unsigned int slices, instances, sms;
    unsigned long long memory_mb;
    const char *name;
} profiles[] = {
    {NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, 1, 7, 16, 9856, "MIG 1g.10gb"},
    {NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, 2, 3, 32, 19968, "MIG 2g.20gb"},
    {NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, 3, 2, 60, 40192, "MIG 3g.40gb"},
    {NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, 4, 1, 64, 40192, "MIG 4g.40gb"},
    {NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, 7, 1, 132, 80768, "MIG 7g.80gb"},
    {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, 1, 1, 16, 9856, "MIG 1g.10gb+me"},
    {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, 1, 4, 26, 19968, "MIG 1g.20gb"},
};

/* nvmlGpuInstance_t handles: one per (GPU slot, MIG device index). */
struct nvmlGpuInstance_st {
    unsigned int slot;
    unsigned int k;
};
static struct nvmlGpuInstance_st instances[DBL_MAX_GPUS][DBL_MAX_MIG];

/* A MIG device's handle only makes sense on a MIG-enabled GPU; calls that need the GPU itself
 * answer INVALID_ARGUMENT for a MIG handle and NOT_SUPPORTED when MIG is not supported. */
static nvmlReturn_t need_parent(nvmlDevice_t device, const dbl_gpu_t *g) {
    if (device->mig >= 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    return g->mig_mode > 1 ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
    ENTER(device);
    if ((ret = need_parent(device, g)) == NVML_SUCCESS) {
        if (currentMode == NULL || pendingMode == NULL)
            ret = NVML_ERROR_INVALID_ARGUMENT;
        else
            *currentMode = *pendingMode = g->mig_mode;
    }
    LEAVE();
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    ENTER(device);
    if ((ret = need_parent(device, g)) == NVML_SUCCESS) {
        if (count == NULL)
            ret = NVML_ERROR_INVALID_ARGUMENT;
        else
            *count = g->mig_mode == 1 ? 7 : 0;
    }
    LEAVE();
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice) {
    ENTER(device);
    if ((ret = need_parent(device, g)) != NVML_SUCCESS) {
        LEAVE();
    }
    if (migDevice == NULL || index >= DBL_MAX_MIG)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else if (g->mig_mode != 1 || g->mig[index].uuid[0] == '\0')
        ret = NVML_ERROR_NOT_FOUND;
    else
        *migDevice = &dbl_mig_devices[device->slot][index];
    LEAVE();
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    ENTER(device);
    if (isMigDevice == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else
        *isMigDevice = device->mig >= 0;
    LEAVE();
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device) {
    ENTER(migDevice);
    if (device == NULL || migDevice->mig < 0)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else
        *device = &dbl_devices[migDevice->slot];
    LEAVE();
}

static nvmlReturn_t mig_id(nvmlDevice_t device, const dbl_gpu_t *g, int gpu_instance, unsigned int *id) {
    const dbl_mig_t *m = device->mig >= 0 ? &g->mig[device->mig] : NULL;
    if (id == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (m == NULL)
        return NVML_ERROR_NOT_SUPPORTED; /* not a MIG device */
    *id = gpu_instance ? m->gi_id : m->ci_id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    ENTER(device);
    ret = mig_id(device, g, 1, id);
    LEAVE();
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    ENTER(device);
    ret = mig_id(device, g, 0, id);
    LEAVE();
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance) {
    ENTER(device);
    if ((ret = need_parent(device, g)) != NVML_SUCCESS) {
        LEAVE();
    }
    ret = NVML_ERROR_NOT_FOUND;
    if (gpuInstance == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int k = 0; ret == NVML_ERROR_NOT_FOUND && g->mig_mode == 1 && k < DBL_MAX_MIG; k++) {
        if (g->mig[k].uuid[0] != '\0' && g->mig[k].gi_id == id) {
            instances[device->slot][k].slot = device->slot;
            instances[device->slot][k].k = k;
            *gpuInstance = &instances[device->slot][k];
            ret = NVML_SUCCESS;
        }
    }
    LEAVE();
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info) {
    const struct nvmlGpuInstance_st *first = &instances[0][0];
    if (gpuInstance < first || gpuInstance >= first + DBL_MAX_GPUS * DBL_MAX_MIG)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlDevice_t device = &dbl_devices[gpuInstance->slot];
    ENTER(device);
    const dbl_mig_t *m = &g->mig[gpuInstance->k];
    if (info == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else if (g->mig_mode != 1 || m->uuid[0] == '\0')
        ret = NVML_ERROR_INVALID_ARGUMENT; /* destroyed since */
    else {
        memset(info, 0, sizeof *info);
        info->device = device;
        info->id = m->gi_id;
        info->profileId = m->profile_id;
        info->placement.start = gpuInstance->k;
        info->placement.size = 1;
    }
    LEAVE();
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info) {
    ENTER(device);
    if ((ret = need_parent(device, g)) != NVML_SUCCESS) {
        LEAVE();
    }
    if (info == NULL || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) {
        ret = NVML_ERROR_INVALID_ARGUMENT;
        LEAVE();
    }
    if (info->version != nvmlGpuInstanceProfileInfo_v2) {
        ret = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        LEAVE();
    }
    ret = NVML_ERROR_NOT_SUPPORTED;
    for (size_t i = 0; i < sizeof profiles / sizeof profiles[0]; i++) {
        if (profiles[i].index != profile)
            continue;
        unsigned int version = info->version;
        memset(info, 0, sizeof *info);
        info->version = version;
        info->id = profiles[i].id;
        info->sliceCount = profiles[i].slices;
        info->instanceCount = profiles[i].instances;
        info->multiprocessorCount = profiles[i].sms;
        info->memorySizeMB = profiles[i].memory_mb;
        strncpy(info->name, profiles[i].name, sizeof info->name - 1);
        ret = NVML_SUCCESS;
    }
    LEAVE();
}

/* A MIG device's attributes: its GPU instance's slices, SMs and memory (from its profile). */
nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes) {
    ENTER(device);
    const dbl_mig_t *m = dbl_mig_of(device, g);
    ret = NVML_ERROR_NOT_SUPPORTED; /* only MIG device handles, as in NVML */
    if (attributes == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    for (size_t i = 0; m != NULL && attributes != NULL && i < sizeof profiles / sizeof profiles[0]; i++) {
        if (profiles[i].id != m->profile_id)
            continue;
        memset(attributes, 0, sizeof *attributes);
        attributes->multiprocessorCount = profiles[i].sms;
        attributes->gpuInstanceSliceCount = profiles[i].slices;
        attributes->computeInstanceSliceCount = profiles[i].slices;
        attributes->memorySizeMB = profiles[i].memory_mb;
        ret = NVML_SUCCESS;
    }
    LEAVE();
}
