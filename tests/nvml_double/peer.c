/* Calls that other NVML exporters make (nvitop-exporter, through nvitop) and this project's does
 * not, so a benchmark can run them on the same double: CUDA driver version, fan speed (answered
 * NOT_SUPPORTED unless `fan.speed` is set, as on an SXM board without fans), power management limit,
 * graphics processes (none: the double models compute processes only). */
#include <stddef.h>

#include "double.h"

static nvmlReturn_t cuda_version(const char *fn, int *version) {
    nvmlReturn_t ret = dbl_enter(fn, NULL, NULL);
    if (ret != NVML_SUCCESS)
        return ret;
    if (version == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else
        *version = 12040;
    dbl_unlock_state();
    return ret;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) { return cuda_version(__func__, version); }

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) { return cuda_version(__func__, version); }

nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed) {
    dbl_gpu_t *g;
    nvmlReturn_t ret = dbl_enter(__func__, device, &g);
    if (ret != NVML_SUCCESS)
        return ret;
    if (speed == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else if (g->fan_speed == DBL_NO_FAN)
        ret = NVML_ERROR_NOT_SUPPORTED;
    else
        *speed = g->fan_speed;
    dbl_unlock_state();
    return ret;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit) {
    dbl_gpu_t *g;
    nvmlReturn_t ret = dbl_enter(__func__, device, &g);
    if (ret != NVML_SUCCESS)
        return ret;
    if (limit == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else
        *limit = g->power_limit_mw;
    dbl_unlock_state();
    return ret;
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos) {
    (void)infos;
    nvmlReturn_t ret = dbl_enter(__func__, device, NULL);
    if (ret != NVML_SUCCESS)
        return ret;
    if (infoCount == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else
        *infoCount = 0;
    dbl_unlock_state();
    return ret;
}
