/*
 * The common entry of every NVML call of the double: trace, hang/delay/error rules, the checks a
 * driver makes (initialised? valid handle? GPU lost?).
 *
 * If NVML_DOUBLE_TRACE names a file, every call appends "<fn> <slot or ->\n" to it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "double.h"

static int trace_fd = -2;

static void trace(const char *fn, const dbl_gpu_t *gpu) {
    dbl_count_call(gpu);
    if (trace_fd == -2) {
        const char *path = getenv("NVML_DOUBLE_TRACE");
        trace_fd = path ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644) : -1;
    }
    if (trace_fd < 0)
        return;
    char line[160];
    int n = gpu ? snprintf(line, sizeof line, "%s %ld\n", fn, (long)(gpu - dbl_state.gpu))
                : snprintf(line, sizeof line, "%s -\n", fn);
    if (n > 0 && write(trace_fd, line, (size_t)n) < 0) {
        /* tracing is best effort */
    }
}

static const dbl_rule_t *find_rule(const char *fn, const dbl_gpu_t *gpu) {
    if (gpu != NULL)
        for (unsigned int i = 0; i < gpu->nrules; i++)
            if (strcmp(gpu->rules[i].fn, fn) == 0)
                return &gpu->rules[i];
    for (unsigned int i = 0; i < dbl_state.nrules; i++)
        if (strcmp(dbl_state.rules[i].fn, fn) == 0)
            return &dbl_state.rules[i];
    return NULL;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

nvmlReturn_t dbl_rule_error(const char *fn, const dbl_gpu_t *gpu) {
    const dbl_rule_t *r = find_rule(fn, gpu);
    return r != NULL ? (nvmlReturn_t)r->error : NVML_SUCCESS;
}

nvmlReturn_t dbl_enter_ex(const char *fn, nvmlDevice_t device, dbl_gpu_t **gpu, int require_init) {
    dbl_lock_state();
    dbl_gpu_t *g = NULL;
    if (device != NULL) {
        const struct nvmlDevice_st *migs = &dbl_mig_devices[0][0];
        int whole = device >= dbl_devices && device < dbl_devices + DBL_MAX_GPUS;
        int mig = device >= migs && device < migs + DBL_MAX_GPUS * DBL_MAX_MIG;
        if (!whole && !mig) {
            trace(fn, NULL);
            dbl_unlock_state();
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        g = &dbl_state.gpu[device->slot];
    }
    trace(fn, g);
    if (require_init && dbl_init_count == 0) {
        dbl_unlock_state();
        return NVML_ERROR_UNINITIALIZED;
    }
    const dbl_rule_t *r;
    while ((r = find_rule(fn, g)) != NULL && r->hang) {
        dbl_unlock_state();
        sleep_ms(10);
        dbl_lock_state();
    }
    if (r != NULL && r->delay_ms > 0) {
        int ms = r->delay_ms;
        dbl_unlock_state();
        sleep_ms(ms);
        dbl_lock_state();
    }
    if (g != NULL && ((unsigned int)(g - dbl_state.gpu) >= dbl_state.gpus || !g->present || g->lost)) {
        dbl_unlock_state();
        return NVML_ERROR_GPU_IS_LOST;
    }
    if (device != NULL && device->mig >= 0 && (g->mig_mode != 1 || g->mig[device->mig].uuid[0] == '\0')) {
        dbl_unlock_state(); /* the MIG device was destroyed (or MIG turned off) since the handle was made */
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    nvmlReturn_t injected = dbl_rule_error(fn, g);
    if (injected != NVML_SUCCESS) {
        dbl_unlock_state();
        return injected;
    }
    if (gpu != NULL)
        *gpu = g;
    return NVML_SUCCESS;
}

dbl_mig_t *dbl_mig_of(nvmlDevice_t device, dbl_gpu_t *gpu) {
    return device != NULL && device->mig >= 0 ? &gpu->mig[device->mig] : NULL;
}

nvmlReturn_t dbl_enter(const char *fn, nvmlDevice_t device, dbl_gpu_t **gpu) {
    return dbl_enter_ex(fn, device, gpu, 1);
}

nvmlReturn_t dbl_copy_string(char *dst, unsigned int length, const char *src) {
    if (dst == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strlen(src);
    if (n + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, n + 1);
    return NVML_SUCCESS;
}
