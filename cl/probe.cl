/* The device probe's own program (src/device.c), built and run before flashcl's kernels are
 * planned, since what it finds decides the plan. Plain OpenCL C 1.2 that needs nothing else.
 *
 * How many loop iterations a work-item may make in all: counts to n through a value the
 * compiler cannot know (ones[0] is 1), so the loop runs rather than folds. A driver that
 * stops a work-item's loops early (Mesa's llvmpipe ends them after 65535 iterations in
 * total: gallivm's loop limiter) writes less than n. The count passes through local memory
 * at an index the compiler cannot know either, so the kernel keeps its FCL_PROBE_LOCAL
 * bytes of it (the host defines the number when it builds this). Its CL_KERNEL_WORK_GROUP_SIZE
 * is the driver's limit for a kernel that needs almost no registers. */
__kernel void fcl_loop_probe(__global uint *ones, uint n)
{
    __local uint counted[FCL_PROBE_LOCAL / sizeof(uint)];
    uint count = 0;
    for (uint i = 0; i < n; i++)
        count += ones[0];
    counted[(ones[0] - 1) % (FCL_PROBE_LOCAL / sizeof(uint))] = count;
    barrier(CLK_LOCAL_MEM_FENCE);
    ones[1] = counted[0];
}

/* Declares twice fcl_loop_probe's local memory and is never run: the two kernels' reported
 * local memory (CL_KERNEL_LOCAL_MEM_SIZE) is two points of the driver's count, a scale on
 * what a kernel declares (Mesa's rusticl 22.3 counts double) plus bytes it adds to every
 * kernel (NVIDIA's driver adds 4 bytes). */
__kernel void fcl_local_probe(__global uint *ones)
{
    __local uint twice[2 * FCL_PROBE_LOCAL / sizeof(uint)];
    twice[(ones[0] - 1) % (2 * FCL_PROBE_LOCAL / sizeof(uint))] = ones[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    ones[1] = twice[0];
}
