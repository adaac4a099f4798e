/* Value parsers of the double's control file (control.c): numbers, struct members by table,
 * the list keys (`processes`, `xids`), GPM values (`gpm.<id>`) and MIG device keys (`mig.<k>.*`). */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "double.h"

int dbl_parse_number(const char *text, unsigned long long *out) {
    char *end;
    errno = 0;
    long long signed_value = 0;
    unsigned long long value;
    if (text[0] == '-') {
        signed_value = strtoll(text, &end, 0);
        value = (unsigned long long)signed_value;
    } else {
        value = strtoull(text, &end, 0);
    }
    if (errno || end == text || *end != '\0')
        return -1;
    *out = value;
    return 0;
}

/* Store `value` in the member at `offset` of `base`: 0, or -1 when it does not parse. */
int dbl_set_member(char *base, size_t offset, dbl_type_t type, size_t size, const char *value) {
    char *field = base + offset;
    if (type == T_STR) {
        snprintf(field, size, "%s", value);
        return 0;
    }
    unsigned long long number;
    if (dbl_parse_number(value, &number) != 0)
        return -1;
    if (type == T_U64)
        *(unsigned long long *)field = number;
    else if (type == T_U32)
        *(unsigned int *)field = (unsigned int)number;
    else
        *(int *)field = (int)(long long)number;
    return 0;
}

int dbl_parse_processes(dbl_gpu_t *g, const char *value) {
    g->nprocs = 0;
    const char *p = value;
    while (*p && g->nprocs < DBL_MAX_PROCS) {
        unsigned int pid, gi = 0xFFFFFFFFu;
        unsigned long long bytes;
        int used = 0;
        if (sscanf(p, "%u:%llu%n", &pid, &bytes, &used) != 2)
            return -1;
        p += used;
        if (*p == '@') {
            if (sscanf(p + 1, "%u%n", &gi, &used) != 1)
                return -1;
            p += 1 + used;
        }
        g->procs[g->nprocs].pid = pid;
        g->procs[g->nprocs].used_bytes = bytes;
        g->procs[g->nprocs].gi_id = gi;
        g->nprocs++;
        if (*p == ',')
            p++;
        else if (*p != '\0')
            return -1;
    }
    return 0;
}

/* `xids=79,13@1`: the GPU's XID events, oldest first. */
int dbl_parse_xids(dbl_gpu_t *g, const char *value) {
    g->nxids = 0;
    const char *p = value;
    while (*p && g->nxids < DBL_MAX_XIDS) {
        unsigned int xid, gi = 0xFFFFFFFFu;
        int used = 0;
        if (sscanf(p, "%u%n", &xid, &used) != 1)
            return -1;
        p += used;
        if (*p == '@') {
            if (sscanf(p + 1, "%u%n", &gi, &used) != 1)
                return -1;
            p += 1 + used;
        }
        g->xids[g->nxids].xid = xid;
        g->xids[g->nxids].gi_id = gi;
        g->nxids++;
        if (*p == ',')
            p++;
        else if (*p != '\0')
            return -1;
    }
    return 0;
}

/* `gpm.<id>=V` into values[] (indexed as dbl_gpm_ids): 1 handled, 0 not a GPM key, -1 bad. */
int dbl_parse_gpm_value(double *values, const char *key, const char *value) {
    if (strncmp(key, "gpm.", 4) != 0 || strcmp(key, "gpm.supported") == 0)
        return 0;
    char *end;
    unsigned long id = strtoul(key + 4, &end, 10);
    int index = dbl_gpm_index((unsigned int)id);
    if (end == key + 4 || *end != '\0' || index < 0)
        return -1;
    errno = 0;
    double number = strtod(value, &end);
    if (errno || end == value || *end != '\0')
        return -1;
    values[index] = number;
    return 1;
}

#define MIG_KEY(k, member, type) {k, offsetof(dbl_mig_t, member), type, sizeof(((dbl_mig_t *)0)->member)}
static const struct {
    const char *key;
    size_t offset;
    dbl_type_t type;
    size_t size;
} mig_keys[] = {
    MIG_KEY("uuid", uuid, T_STR),
    MIG_KEY("gi_id", gi_id, T_U32),
    MIG_KEY("ci_id", ci_id, T_U32),
    MIG_KEY("profile_id", profile_id, T_U32),
    MIG_KEY("memory.total", memory_total, T_U64),
    MIG_KEY("memory.used", memory_used, T_U64),
    MIG_KEY("memory.free", memory_free, T_U64),
};

/* `mig.<k>.<key>=V`. */
int dbl_parse_mig_key(dbl_gpu_t *g, const char *key, const char *value) {
    char *end;
    unsigned long k = strtoul(key, &end, 10);
    if (end == key || *end != '.' || k >= DBL_MAX_MIG)
        return -1;
    dbl_mig_t *m = &g->mig[k];
    key = end + 1;
    int gpm = dbl_parse_gpm_value(m->gpm, key, value);
    if (gpm != 0)
        return gpm > 0 ? 0 : -1;
    for (size_t i = 0; i < sizeof mig_keys / sizeof mig_keys[0]; i++)
        if (strcmp(key, mig_keys[i].key) == 0)
            return dbl_set_member((char *)m, mig_keys[i].offset, mig_keys[i].type, mig_keys[i].size, value);
    return -1;
}
