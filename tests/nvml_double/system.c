/* NVML system calls of the test double: init/shutdown, error strings, driver version, enumeration. */
#include <string.h>

#include "double.h"

static nvmlReturn_t init(const char *fn) {
    nvmlReturn_t ret = dbl_enter_ex(fn, NULL, NULL, 0);
    if (ret != NVML_SUCCESS)
        return ret;
    dbl_init_count++;
    dbl_unlock_state();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return init("nvmlInitWithFlags");
}

nvmlReturn_t nvmlInit_v2(void) { return init("nvmlInit_v2"); }

nvmlReturn_t nvmlShutdown(void) {
    nvmlReturn_t ret = dbl_enter("nvmlShutdown", NULL, NULL);
    if (ret != NVML_SUCCESS)
        return ret;
    dbl_init_count--;
    dbl_unlock_state();
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    nvmlReturn_t ret = dbl_enter("nvmlSystemGetDriverVersion", NULL, NULL);
    if (ret != NVML_SUCCESS)
        return ret;
    ret = dbl_copy_string(version, length, dbl_state.driver_version);
    dbl_unlock_state();
    return ret;
}

/* Slot of the index-th enumerated GPU (slots not present are skipped), or -1. State locked. */
static int slot_of_index(unsigned int index) {
    unsigned int seen = 0;
    for (unsigned int slot = 0; slot < dbl_state.gpus; slot++) {
        if (!dbl_state.gpu[slot].present)
            continue;
        if (seen++ == index)
            return (int)slot;
    }
    return -1;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    nvmlReturn_t ret = dbl_enter("nvmlDeviceGetCount_v2", NULL, NULL);
    if (ret != NVML_SUCCESS)
        return ret;
    unsigned int n = 0;
    for (unsigned int slot = 0; slot < dbl_state.gpus; slot++)
        n += dbl_state.gpu[slot].present != 0;
    dbl_unlock_state();
    if (deviceCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    nvmlReturn_t ret = dbl_enter("nvmlDeviceGetHandleByIndex_v2", NULL, NULL);
    if (ret != NVML_SUCCESS)
        return ret;
    int slot = slot_of_index(index);
    ret = NVML_SUCCESS;
    if (slot < 0 || device == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else if (dbl_state.gpu[slot].lost)
        ret = NVML_ERROR_GPU_IS_LOST;
    else if ((ret = dbl_rule_error("nvmlDeviceGetHandleByIndex_v2", &dbl_state.gpu[slot])) == NVML_SUCCESS)
        *device = &dbl_devices[slot];
    dbl_unlock_state();
    return ret;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    nvmlReturn_t ret = dbl_enter("nvmlDeviceGetHandleByUUID", NULL, NULL);
    if (ret != NVML_SUCCESS)
        return ret;
    ret = NVML_ERROR_NOT_FOUND;
    for (unsigned int slot = 0; uuid != NULL && device != NULL && slot < dbl_state.gpus; slot++) {
        dbl_gpu_t *g = &dbl_state.gpu[slot];
        if (!g->present || strcmp(g->uuid, uuid) != 0)
            continue;
        if (g->lost)
            ret = NVML_ERROR_GPU_IS_LOST;
        else {
            *device = &dbl_devices[slot];
            ret = NVML_SUCCESS;
        }
        break;
    }
    dbl_unlock_state();
    return ret;
}
