/* Call counters of the test double: how many NVML calls each GPU slot (and the system, for calls
 * without a device) has answered, for benchmarks that must not pay for a trace file.
 *
 * If NVML_DOUBLE_COUNTERS names a file, it is mapped shared and holds DBL_MAX_GPUS + 1 native
 * unsigned 64-bit counters: one per GPU slot (a MIG device counts on its GPU), then calls without a
 * device. Every call entering the double adds one (under the state lock); a reader maps or reads the
 * file at any time. Several processes may share one file in turn, not at once. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "double.h"

#define COUNTERS (DBL_MAX_GPUS + 1)

static unsigned long long *counters;
static int counters_state; /* 0 not opened yet, 1 mapped, -1 none */

static void open_counters(void) {
    counters_state = -1;
    const char *path = getenv("NVML_DOUBLE_COUNTERS");
    if (path == NULL || *path == '\0')
        return;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    size_t size = COUNTERS * sizeof *counters;
    struct stat st;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size < size && ftruncate(fd, (off_t)size) != 0) {
        close(fd);
        return;
    }
    void *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return;
    counters = map;
    counters_state = 1;
}

void dbl_count_call(const dbl_gpu_t *gpu) {
    if (counters_state == 0)
        open_counters();
    if (counters_state < 0)
        return;
    counters[gpu ? (size_t)(gpu - dbl_state.gpu) : DBL_MAX_GPUS]++;
}
