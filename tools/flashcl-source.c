/* flashcl-source: prints the OpenCL source flashcl would compile for a device it cannot
 * see, described by a built-in capability preset, so offline compilers can check it
 * (.ci/amd-offline-check.sh, .ci/nvptx-offline-check.sh); sm_80-mma and sm_90-mma: the
 * NVIDIA programs for GPUs of compute capability 8.0 to 8.8 and for 8.9 and later (their fp8
 * conversions, scripts/nv-sass-count.sh). Every kernel in one source, or one program's
 * (a head-dim bucket's: all its kernels, which the library builds a few at a time).
 * Internal: built from the static library, not installed. */
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

/* The program named by `which` ("all", "softmax", "merge", "check": NVIDIA's self-check,
 * "kvdec": NVIDIA's 8-bit K/V decode kernels, or a head-dim bucket's kernels in one program
 * as "d64", "d128", ...; NULL: all) as fcl_kernel_source's number, or FCL_SOURCE_KV_DECODE - 1
 * where it names none. */
static int program_number(const char *which, int buckets)
{
    static const struct {
        const char *name;
        int number;
    } named[] = {{"all", FCL_SOURCE_ALL},
                 {"softmax", FCL_SOURCE_SOFTMAX},
                 {"merge", FCL_SOURCE_MERGE},
                 {"check", FCL_SOURCE_CHECK},
                 {"kvdec", FCL_SOURCE_KV_DECODE}};
    if (!which)
        return FCL_SOURCE_ALL;
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        if (strcmp(which, named[i].name) == 0)
            return named[i].number;
    for (int b = 0; b < buckets; b++) {
        char name[16];
        snprintf(name, sizeof name, "d%zu", fcl_attention_bucket_dim(b));
        if (strcmp(which, name) == 0)
            return b;
    }
    return FCL_SOURCE_KV_DECODE - 1;
}

static int print_source(char *src, const char *what)
{
    if (!src) {
        fprintf(stderr, "flashcl-source: %s\n", fcl_context_last_error(NULL));
        return 1;
    }
    printf("/* flashcl %s %s */\n%s", fcl_version_string(), what, src);
    free(src);
    return 0;
}

int main(int argc, char **argv)
{
    const char *target = argc > 1 ? argv[1] : "";
    const char *which = argc > 2 ? argv[2] : NULL;
    const unsigned cc = strcmp(target, "sm_80-mma") == 0   ? 80
                        : strcmp(target, "sm_90-mma") == 0 ? 90
                                                           : 0;
    if (cc) { /* the NVIDIA programs */
        const int program = program_number(which, FCL_MMA_BUCKETS);
        if (program >= FCL_SOURCE_KV_DECODE && program != FCL_SOURCE_MERGE)
            return print_source(fcl_nvidia_path.source(program, cc), "NVIDIA kernels");
    }
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        const int program = program_number(which, FCL_ATTENTION_BUCKETS);
        if (strcmp(target, presets[i].name) != 0 || program < FCL_SOURCE_MERGE)
            continue;
        char what[160];
        snprintf(what, sizeof what, "kernels as planned for %s: %s", presets[i].name,
                 presets[i].what);
        return print_source(fcl_kernel_source(&presets[i].info, getenv("FLASHCL_TUNE"), program),
                            what);
    }
    fprintf(stderr, "usage: flashcl-source gfx90a|gfx1030|sm_90 [all|softmax|merge|d64|d128|d256|d576]\n"
                    "       flashcl-source sm_80-mma|sm_90-mma "
                    "[all|check|softmax|kvdec|d64|d128|d256]\n"
                    "  one program (a bucket's: every kernel of the bucket), or all in one source\n");
    return 2;
}
