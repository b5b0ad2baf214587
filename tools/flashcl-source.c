/* flashcl-source: prints the OpenCL source flashcl would compile for a device it cannot
 * see, described by a built-in capability preset, so offline compilers can check it
 * (.ci/amd-offline-check.sh, .ci/nvptx-offline-check.sh); sm_80-mma: the NVIDIA program
 * (GPUs of compute capability 8.0 and later). Internal: built from the static
 * library, not installed. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What AMD's OpenCL reports for these chips (64 KiB of LDS, work-groups of up to 256), and
 * NVIDIA's for Hopper (48 KiB of local memory, work-groups of up to 1024). */
static const struct preset {
    const char *name, *what;
    fcl_device_info info;
} presets[] = {
    {"gfx90a", "AMD Instinct MI200 (CDNA2, wave64)",
     {.type = CL_DEVICE_TYPE_GPU, .vendor_id = 0x1002, .compute_units = 110,
      .max_work_group_size = 256, .local_mem_size = 65536, .preferred_vector_width_float = 1}},
    {"gfx1030", "AMD Radeon RX 6800 XT (RDNA2, wave32)",
     {.type = CL_DEVICE_TYPE_GPU, .vendor_id = 0x1002, .compute_units = 36,
      .max_work_group_size = 256, .local_mem_size = 65536, .preferred_vector_width_float = 1}},
    {"sm_90", "NVIDIA H100 / H200 (Hopper)",
     {.type = CL_DEVICE_TYPE_GPU, .vendor_id = 0x10de, .compute_units = 132,
      .max_work_group_size = 1024, .local_mem_size = 49152, .preferred_vector_width_float = 1}},
};

int main(int argc, char **argv)
{
    const char *target = argc > 1 ? argv[1] : "";
    if (strcmp(target, "sm_80-mma") == 0) { /* the NVIDIA program (compute capability 8.0 and later) */
        char *src = fcl_mma_kernel_source();
        if (!src)
            return 1;
        printf("/* flashcl %s tensor-core kernels */\n%s", fcl_version_string(), src);
        free(src);
        return 0;
    }
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(target, presets[i].name) != 0)
            continue;
        char *src = fcl_kernel_source(&presets[i].info, getenv("FLASHCL_TUNE"));
        if (!src) {
            fprintf(stderr, "flashcl-source: %s\n", fcl_context_last_error(NULL));
            return 1;
        }
        printf("/* flashcl %s kernels as planned for %s: %s */\n%s", fcl_version_string(),
               presets[i].name, presets[i].what, src);
        free(src);
        return 0;
    }
    fprintf(stderr, "usage: flashcl-source gfx90a|gfx1030|sm_90|sm_80-mma\n");
    return 2;
}
