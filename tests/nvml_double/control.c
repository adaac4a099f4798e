/*
 * The double's state: parsed from the control file named by NVML_DOUBLE_CONTROL.
 *
 * Keys (one `key=value` a line; `#` starts a comment; unknown keys are reported on stderr):
 *   gpus=N                      GPU slots 0..N-1 (default 1)
 *   driver_version=S            answer of nvmlSystemGetDriverVersion
 *   error.<fn>=CODE             every call of NVML symbol <fn> answers nvmlReturn_t CODE
 *   hang.<fn>=1                 every call of <fn> blocks until the key is cleared
 *   delay_ms.<fn>=MS            every call of <fn> sleeps MS milliseconds first
 *   gpu.<slot>.<key>=V          a value of one GPU (see gpu_keys below), or the per-GPU forms
 *   gpu.<slot>.error.<fn>=CODE, gpu.<slot>.hang.<fn>=1, gpu.<slot>.delay_ms.<fn>=MS
 *   gpu.<slot>.lost=1           every call on the GPU answers NVML_ERROR_GPU_IS_LOST (it stays
 *                               enumerated; nvmlDeviceGetHandleByIndex_v2 answers GPU_IS_LOST)
 *   gpu.<slot>.present=0        the GPU is gone from the bus: not enumerated at all
 *   gpu.<slot>.processes=PID:BYTES[@GI],...   compute processes and their memory (@GI: in that
 *                               GPU instance; a MIG device's handle lists only its instance's)
 *   gpu.<slot>.gpm.supported=1  nvmlGpmQueryDeviceSupport says supported (default 0, as on A100)
 *   gpu.<slot>.gpm.<id>=V       whole-GPU value of GPM metric <id> (percent or MiB/s; ids in gpm.c)
 *   gpu.<slot>.mig.mode=M       current MIG mode (0 off, 1 on; -1: MIG not supported)
 *   gpu.<slot>.mig.<k>.<key>=V  MIG device <k> (0..7): uuid (empty = none), gi_id, ci_id, profile_id
 *                               (see the profile table in mig.c), memory.total, memory.used,
 *                               memory.free (default total - used), gpm.<id>
 *   gpu.<slot>.numa_node=N      nvmlDeviceGetNumaNodeId's node (-1: no NUMA info; unset: NOT_SUPPORTED)
 *   gpu.<slot>.fan.speed=P      nvmlDeviceGetFanSpeed's percent (unset: NOT_SUPPORTED, no fan)
 *   gpu.<slot>.xids=X[@GI],...  XID events that happened on the GPU, oldest first; each is
 *                               delivered once to the event sets registered for the GPU
 * <fn> may also be `field.<id>` to fail one field id of nvmlDeviceGetFieldValues, or `gpm.<id>`
 * to fail one metric of nvmlGpmMetricsGet.
 *
 * The file is re-read whenever its mtime, size or inode changes; every call stat()s it once.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "double.h"

dbl_state_t dbl_state;
pthread_mutex_t dbl_lock = PTHREAD_MUTEX_INITIALIZER;
int dbl_init_count;
struct nvmlDevice_st dbl_devices[DBL_MAX_GPUS];
struct nvmlDevice_st dbl_mig_devices[DBL_MAX_GPUS][DBL_MAX_MIG];

static struct stat loaded_stat;
static int loaded_once;

#define GPU_KEY(k, member, type) {k, offsetof(dbl_gpu_t, member), type, sizeof(((dbl_gpu_t *)0)->member)}
static const struct {
    const char *key;
    size_t offset;
    dbl_type_t type;
    size_t size;
} gpu_keys[] = {
    GPU_KEY("lost", lost, T_I32),
    GPU_KEY("present", present, T_I32),
    GPU_KEY("name", name, T_STR),
    GPU_KEY("uuid", uuid, T_STR),
    GPU_KEY("pci_bus_id", pci_bus_id, T_STR),
    GPU_KEY("minor", minor, T_U32),
    GPU_KEY("memory.total", memory_total, T_U64),
    GPU_KEY("memory.used", memory_used, T_U64),
    GPU_KEY("memory.free", memory_free, T_U64),
    GPU_KEY("memory.reserved", memory_reserved, T_U64),
    GPU_KEY("util.gpu", util_gpu, T_U32),
    GPU_KEY("util.memory", util_memory, T_U32),
    GPU_KEY("util.encoder", util_encoder, T_U32),
    GPU_KEY("util.decoder", util_decoder, T_U32),
    GPU_KEY("temp.gpu", temp_gpu, T_I32),
    GPU_KEY("temp.memory", temp_memory, T_U32),
    GPU_KEY("power_mw", power_mw, T_U32),
    GPU_KEY("power_limit_mw", power_limit_mw, T_U32),
    GPU_KEY("clock.sm", clock_sm, T_U32),
    GPU_KEY("clock.mem", clock_mem, T_U32),
    GPU_KEY("clock.sm_max", clock_sm_max, T_U32),
    GPU_KEY("clock.mem_max", clock_mem_max, T_U32),
    GPU_KEY("energy_mj", energy_mj, T_U64),
    GPU_KEY("pcie.replay", pcie_replay, T_U32),
    GPU_KEY("pcie.gen", pcie_gen, T_U32),
    GPU_KEY("pcie.gen_max", pcie_gen_max, T_U32),
    GPU_KEY("pcie.width", pcie_width, T_U32),
    GPU_KEY("pcie.width_max", pcie_width_max, T_U32),
    GPU_KEY("pcie.tx_kbps", pcie_tx_kbps, T_U32),
    GPU_KEY("pcie.rx_kbps", pcie_rx_kbps, T_U32),
    GPU_KEY("numa_node", numa_node, T_I32),
    GPU_KEY("clock_event_reasons", clock_event_reasons, T_U64),
    GPU_KEY("fan.speed", fan_speed, T_U32),
    GPU_KEY("ecc.mode", ecc_mode, T_U32),
    GPU_KEY("ecc.corrected", ecc_corrected, T_U64),
    GPU_KEY("ecc.uncorrected", ecc_uncorrected, T_U64),
    GPU_KEY("gpm.supported", gpm_supported, T_U32),
    GPU_KEY("mig.mode", mig_mode, T_U32),
};

#define FREE_UNSET (~0ULL)

static void set_defaults(void) {
    memset(&dbl_state, 0, sizeof dbl_state);
    dbl_state.gpus = 1;
    snprintf(dbl_state.driver_version, sizeof dbl_state.driver_version, "550.54.15");
    for (unsigned int i = 0; i < DBL_MAX_GPUS; i++) {
        dbl_gpu_t *g = &dbl_state.gpu[i];
        dbl_devices[i].slot = i;
        dbl_devices[i].mig = -1;
        for (int k = 0; k < DBL_MAX_MIG; k++) {
            dbl_mig_devices[i][k].slot = i;
            dbl_mig_devices[i][k].mig = k;
            g->mig[k].memory_free = FREE_UNSET;
        }
        g->present = 1;
        snprintf(g->name, sizeof g->name, "NVIDIA A100-SXM4-80GB");
        snprintf(g->uuid, sizeof g->uuid, "GPU-00000000-0000-0000-0000-0000000000%02u", i);
        snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "00000000:%02X:00.0", 0x10 + i);
        g->minor = i;
        g->memory_total = 85899345920ULL;
        g->memory_reserved = 536870912ULL;
        g->memory_used = 0;
        g->memory_free = FREE_UNSET;
        g->temp_gpu = 35;
        g->temp_memory = 40;
        g->power_mw = 60000;
        g->power_limit_mw = 400000;
        g->clock_sm = g->clock_sm_max = 1410;
        g->clock_mem = g->clock_mem_max = 1593;
        g->pcie_gen = g->pcie_gen_max = 4;
        g->pcie_width = g->pcie_width_max = 16;
        g->numa_node = DBL_NUMA_UNSUPPORTED;
        g->ecc_mode = NVML_FEATURE_ENABLED;
        g->fan_speed = DBL_NO_FAN;
    }
}

static dbl_rule_t *rule_slot(dbl_rule_t *rules, unsigned int *n, const char *fn) {
    for (unsigned int i = 0; i < *n; i++)
        if (strcmp(rules[i].fn, fn) == 0)
            return &rules[i];
    if (*n >= DBL_MAX_RULES)
        return NULL;
    dbl_rule_t *r = &rules[(*n)++];
    memset(r, 0, sizeof *r);
    snprintf(r->fn, sizeof r->fn, "%s", fn);
    return r;
}

/* `error.<fn>`, `hang.<fn>`, `delay_ms.<fn>`: 1 when handled, 0 when not a rule key, -1 bad. */
static int parse_rule(dbl_rule_t *rules, unsigned int *n, const char *key, const char *value) {
    static const char *kinds[] = {"error.", "hang.", "delay_ms."};
    for (int k = 0; k < 3; k++) {
        size_t len = strlen(kinds[k]);
        if (strncmp(key, kinds[k], len) != 0)
            continue;
        unsigned long long number;
        if (dbl_parse_number(value, &number) != 0)
            return -1;
        dbl_rule_t *r = rule_slot(rules, n, key + len);
        if (r == NULL)
            return -1;
        if (k == 0)
            r->error = (int)number;
        else if (k == 1)
            r->hang = number != 0;
        else
            r->delay_ms = (int)number;
        return 1;
    }
    return 0;
}

static int parse_gpu_key(dbl_gpu_t *g, const char *key, const char *value) {
    int handled = parse_rule(g->rules, &g->nrules, key, value);
    if (handled != 0)
        return handled > 0 ? 0 : -1;
    if (strcmp(key, "processes") == 0)
        return dbl_parse_processes(g, value);
    if (strcmp(key, "xids") == 0)
        return dbl_parse_xids(g, value);
    if (strncmp(key, "mig.", 4) == 0 && strcmp(key, "mig.mode") != 0)
        return dbl_parse_mig_key(g, key + 4, value);
    handled = dbl_parse_gpm_value(g->gpm, key, value);
    if (handled != 0)
        return handled > 0 ? 0 : -1;
    for (size_t i = 0; i < sizeof gpu_keys / sizeof gpu_keys[0]; i++)
        if (strcmp(key, gpu_keys[i].key) == 0)
            return dbl_set_member((char *)g, gpu_keys[i].offset, gpu_keys[i].type, gpu_keys[i].size, value);
    return -1;
}

static int parse_line(char *line) {
    char *eq = strchr(line, '=');
    if (eq == NULL)
        return -1;
    *eq = '\0';
    const char *key = line, *value = eq + 1;
    if (strcmp(key, "gpus") == 0) {
        unsigned long long n;
        if (dbl_parse_number(value, &n) != 0 || n > DBL_MAX_GPUS)
            return -1;
        dbl_state.gpus = (unsigned int)n;
        return 0;
    }
    if (strcmp(key, "driver_version") == 0) {
        snprintf(dbl_state.driver_version, sizeof dbl_state.driver_version, "%s", value);
        return 0;
    }
    if (strncmp(key, "gpu.", 4) == 0) {
        char *end;
        unsigned long slot = strtoul(key + 4, &end, 10);
        if (end == key + 4 || *end != '.' || slot >= DBL_MAX_GPUS)
            return -1;
        return parse_gpu_key(&dbl_state.gpu[slot], end + 1, value);
    }
    int handled = parse_rule(dbl_state.rules, &dbl_state.nrules, key, value);
    return handled > 0 ? 0 : -1;
}

static void strip(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
}

static void load(const char *path) {
    set_defaults();
    FILE *f = path ? fopen(path, "r") : NULL;
    if (f != NULL) {
        char line[4096];
        while (fgets(line, sizeof line, f)) {
            strip(line);
            char *start = line + strspn(line, " \t");
            if (*start == '\0' || *start == '#')
                continue;
            char copy[sizeof line];
            snprintf(copy, sizeof copy, "%s", start);
            if (parse_line(start) != 0)
                fprintf(stderr, "nvml double: ignoring bad control line: %s\n", copy);
        }
        fclose(f);
    }
    for (unsigned int i = 0; i < DBL_MAX_GPUS; i++) {
        dbl_gpu_t *g = &dbl_state.gpu[i];
        if (g->memory_free == FREE_UNSET) {
            unsigned long long taken = g->memory_used + g->memory_reserved;
            g->memory_free = taken < g->memory_total ? g->memory_total - taken : 0;
        }
        for (int k = 0; k < DBL_MAX_MIG; k++) {
            dbl_mig_t *m = &g->mig[k];
            if (m->memory_free == FREE_UNSET)
                m->memory_free = m->memory_used < m->memory_total ? m->memory_total - m->memory_used : 0;
        }
    }
}

static int same_stat(const struct stat *a, const struct stat *b) {
    return a->st_ino == b->st_ino && a->st_size == b->st_size && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
           a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

void dbl_lock_state(void) {
    pthread_mutex_lock(&dbl_lock);
    const char *path = getenv("NVML_DOUBLE_CONTROL");
    struct stat st;
    memset(&st, 0, sizeof st);
    if (path == NULL || stat(path, &st) != 0)
        memset(&st, 0, sizeof st);
    if (!loaded_once || !same_stat(&st, &loaded_stat)) {
        load(path);
        loaded_stat = st;
        loaded_once = 1;
    }
}

void dbl_unlock_state(void) { pthread_mutex_unlock(&dbl_lock); }
