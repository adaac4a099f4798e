/*
 * Internal interface of the libnvidia-ml.so.1 test double.
 *
 * The double answers NVML calls from a control file (key=value lines) whose path is in the
 * environment variable NVML_DOUBLE_CONTROL. The file is re-read whenever its mtime, size or
 * inode changes (checked on every call with one stat()). See control.c for the keys.
 *
 * Layout: control.c parses the file into `dbl_state`; entry.c holds dbl_enter(), the checks and
 * fault rules every call goes through; system.c implements init/shutdown and enumeration;
 * device.c the per-device queries; gpm.c GPM samples and metrics; mig.c MIG devices and GPU
 * instances; events.c the XID event sets; peer.c calls only other exporters make; counters.c
 * the per-GPU call counters (NVML_DOUBLE_COUNTERS). A new family of calls goes in its own file:
 * its functions start with dbl_enter(), read their values from dbl_gpu_t (add members there and
 * a line to gpu_keys in control.c), and get error/hang/delay rules by symbol name for free.
 */
#ifndef NVML_DOUBLE_H
#define NVML_DOUBLE_H

#include <pthread.h>
#include <stddef.h>

#include "nvml.h"

#define DBL_INTERNAL __attribute__((visibility("hidden")))

#define DBL_MAX_GPUS 64
#define DBL_MAX_PROCS 64
#define DBL_MAX_RULES 64
#define DBL_NAME_LEN 96
#define DBL_MAX_MIG 8   /* MIG devices per GPU */
#define DBL_MAX_XIDS 64 /* XID events per GPU in the control file */
#define DBL_GPM_IDS 9   /* GPM metric ids the double models (see dbl_gpm_ids in gpm.c) */
#define DBL_NO_FAN 0xFFFFFFFFu /* fan.speed default: nvmlDeviceGetFanSpeed answers NOT_SUPPORTED */

/* A fault rule: `error.<fn>=<code>`, `hang.<fn>=1` or `delay_ms.<fn>=<ms>`, globally or per GPU.
 * `fn` is an NVML symbol name (e.g. nvmlDeviceGetPowerUsage) or `field.<id>` for one field of
 * nvmlDeviceGetFieldValues. */
typedef struct {
    char fn[DBL_NAME_LEN];
    int error;    /* nvmlReturn_t to answer, 0 = none */
    int hang;     /* block while set */
    int delay_ms; /* sleep before answering */
} dbl_rule_t;

typedef struct {
    unsigned int pid;
    unsigned long long used_bytes;
    unsigned int gi_id; /* GPU instance of a MIG-enabled GPU, 0xFFFFFFFF for none */
} dbl_proc_t;

/* One MIG device (one compute instance of one GPU instance) of a MIG-enabled GPU. */
typedef struct {
    char uuid[DBL_NAME_LEN]; /* "" = no MIG device at this index */
    unsigned int gi_id, ci_id, profile_id;
    unsigned long long memory_total, memory_used, memory_free; /* bytes */
    double gpm[DBL_GPM_IDS];                                   /* per dbl_gpm_ids; percent or MiB/s */
} dbl_mig_t;

/* One XID event in the control file: `xids=79,13@1` (XID, optionally @GPU instance id). */
typedef struct {
    unsigned int xid;
    unsigned int gi_id; /* 0xFFFFFFFF: not attributable to a GPU instance */
} dbl_xid_t;

#define DBL_NUMA_UNSUPPORTED (-2)

typedef struct {
    int lost;    /* every call on it answers NVML_ERROR_GPU_IS_LOST */
    int present; /* enumerated at all (0: removed from the bus) */
    char name[DBL_NAME_LEN];
    char uuid[DBL_NAME_LEN];
    char pci_bus_id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    unsigned int minor;
    unsigned long long memory_total, memory_used, memory_free, memory_reserved; /* bytes */
    unsigned int util_gpu, util_memory, util_encoder, util_decoder;           /* percent */
    int temp_gpu;
    unsigned int temp_memory;                    /* degrees C */
    unsigned int power_mw, power_limit_mw;       /* milliwatts */
    unsigned int clock_sm, clock_mem;            /* MHz */
    unsigned int clock_sm_max, clock_mem_max;    /* MHz */
    unsigned long long energy_mj;                /* millijoules since driver load */
    unsigned int pcie_replay;
    unsigned int pcie_gen, pcie_gen_max, pcie_width, pcie_width_max;
    unsigned int pcie_tx_kbps, pcie_rx_kbps;     /* KB/s */
    int numa_node;                               /* -1: no NUMA info; DBL_NUMA_UNSUPPORTED: NOT_SUPPORTED */
    unsigned long long clock_event_reasons;
    unsigned int fan_speed;                      /* percent; DBL_NO_FAN: not supported */
    unsigned int ecc_mode;                       /* nvmlEnableState_t */
    unsigned long long ecc_corrected, ecc_uncorrected;
    unsigned int nprocs;
    dbl_proc_t procs[DBL_MAX_PROCS];
    unsigned int gpm_supported;                  /* nvmlGpmQueryDeviceSupport's isSupportedDevice */
    double gpm[DBL_GPM_IDS];                     /* whole-GPU GPM values per dbl_gpm_ids */
    unsigned int mig_mode;                       /* -1 (0xFFFFFFFF) = MIG not supported */
    dbl_mig_t mig[DBL_MAX_MIG];
    unsigned int nxids;
    dbl_xid_t xids[DBL_MAX_XIDS];
    unsigned int nrules;
    dbl_rule_t rules[DBL_MAX_RULES];
} dbl_gpu_t;

typedef struct {
    unsigned int gpus; /* slots 0..gpus-1 exist; `present` may hide some from enumeration */
    char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    unsigned int nrules;
    dbl_rule_t rules[DBL_MAX_RULES];
    dbl_gpu_t gpu[DBL_MAX_GPUS];
} dbl_state_t;

/* The opaque struct behind nvmlDevice_t: one per slot, so handles stay valid across re-inits
 * (as real NVML's do) and name the slot, not the enumeration index. */
struct nvmlDevice_st {
    unsigned int slot;
    int mig; /* -1: the GPU itself; else the index of one of its MIG devices */
};

DBL_INTERNAL extern dbl_state_t dbl_state;
DBL_INTERNAL extern pthread_mutex_t dbl_lock;
DBL_INTERNAL extern int dbl_init_count;
DBL_INTERNAL extern struct nvmlDevice_st dbl_devices[DBL_MAX_GPUS];
DBL_INTERNAL extern struct nvmlDevice_st dbl_mig_devices[DBL_MAX_GPUS][DBL_MAX_MIG];

/* GPM metric ids the double models, in the order of dbl_gpu_t.gpm (gpm.c). */
DBL_INTERNAL extern const unsigned int dbl_gpm_ids[DBL_GPM_IDS];
/* Index of a GPM metric id in dbl_gpm_ids, or -1. */
DBL_INTERNAL int dbl_gpm_index(unsigned int metric_id);

/* The MIG device a handle names (NULL for a whole GPU). State locked; dbl_enter has checked it. */
DBL_INTERNAL dbl_mig_t *dbl_mig_of(nvmlDevice_t device, dbl_gpu_t *gpu);

/* Count one call on `gpu` (NULL: a call without a device) in the NVML_DOUBLE_COUNTERS file. Locked. */
DBL_INTERNAL void dbl_count_call(const dbl_gpu_t *gpu);

/* Lock the state and re-read the control file if it changed. */
DBL_INTERNAL void dbl_lock_state(void);
DBL_INTERNAL void dbl_unlock_state(void);

/* Common entry of every call: trace it, honour hang/delay rules, answer UNINITIALIZED before
 * nvmlInit, an invalid handle, a lost GPU or an injected error. `device` may be NULL for system
 * calls. Returns NVML_SUCCESS with the state LOCKED and *gpu set (NULL for system calls), or an
 * error with the state unlocked. */
DBL_INTERNAL nvmlReturn_t dbl_enter(const char *fn, nvmlDevice_t device, dbl_gpu_t **gpu);
/* dbl_enter without the UNINITIALIZED check (for nvmlInit*). */
DBL_INTERNAL nvmlReturn_t dbl_enter_ex(const char *fn, nvmlDevice_t device, dbl_gpu_t **gpu, int require_init);

/* Like dbl_enter's rule check for a sub-item (e.g. "field.82") of an entered call; state locked. */
DBL_INTERNAL nvmlReturn_t dbl_rule_error(const char *fn, const dbl_gpu_t *gpu);

/* Control-file value parsers (control_values.c); each returns 0, or -1 when the value is bad
 * (dbl_parse_gpm_value: 1 handled, 0 not a `gpm.<id>` key, -1 bad). */
typedef enum { T_STR, T_U32, T_I32, T_U64 } dbl_type_t;
DBL_INTERNAL int dbl_parse_number(const char *text, unsigned long long *out);
DBL_INTERNAL int dbl_set_member(char *base, size_t offset, dbl_type_t type, size_t size, const char *value);
DBL_INTERNAL int dbl_parse_processes(dbl_gpu_t *g, const char *value);
DBL_INTERNAL int dbl_parse_xids(dbl_gpu_t *g, const char *value);
DBL_INTERNAL int dbl_parse_gpm_value(double *values, const char *key, const char *value);
DBL_INTERNAL int dbl_parse_mig_key(dbl_gpu_t *g, const char *key, const char *value);

/* Copy a C string into a caller's buffer of `length` bytes: INSUFFICIENT_SIZE when it does not fit. */
DBL_INTERNAL nvmlReturn_t dbl_copy_string(char *dst, unsigned int length, const char *src);

#endif
