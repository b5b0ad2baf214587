/* The planner with injected device capabilities: the strategy the issue describes for a
 * 48 KiB NVIDIA-like GPU, a 64 KiB AMD-like GPU (64-wide wavefronts, work-groups of at
 * most 256) and POCL's CPU device (local memory of type CL_GLOBAL). No device needed. */
#include "internal.h"
#include "support.h"

/* What program.c fills in after the build: per-kernel limits, then the plan. */
static fcl_device_info built(fcl_device_info i, size_t kernel_wg)
{
    i.kernel_work_group_size = kernel_wg;
    i.softmax_work_group_size = fcl_plan_work_group_size(&i);
    i.kernel_local_mem_size = i.softmax_work_group_size * 8; /* scratch[FCL_LWS] of float2 */
    i.softmax_fused_max_cols = fcl_plan_fused_max_cols(&i);
    return i;
}

static fcl_device_info nvidia_like(void)
{
    fcl_device_info i = {.type = CL_DEVICE_TYPE_GPU, .compute_units = 132,
                         .max_work_group_size = 1024, .local_mem_size = 48 * 1024};
    return built(i, 1024);
}

static fcl_device_info amd_like(void)
{
    fcl_device_info i = {.type = CL_DEVICE_TYPE_GPU, .compute_units = 104,
                         .max_work_group_size = 256, .local_mem_size = 64 * 1024};
    return built(i, 256);
}

static fcl_device_info pocl_like(void)
{
    fcl_device_info i = {.type = CL_DEVICE_TYPE_CPU, .compute_units = 2,
                         .max_work_group_size = 4096, .local_mem_size = 2 * 1024 * 1024,
                         .local_mem_is_global = 1};
    return built(i, 4096);
}

static fcl_softmax_launch plan_of(const fcl_device_info *i, size_t rows, size_t cols,
                                  fcl_softmax_algo forced)
{
    fcl_softmax_desc d = {.rows = rows, .cols = cols, .in_stride = cols, .out_stride = cols,
                          .algo = forced};
    fcl_softmax_launch l;
    assert_int_equal(fcl_plan_softmax(i, &d, &l), FCL_SUCCESS);
    /* Whatever the choice, the launch covers the row exactly. */
    assert_true(l.slices * l.slice_cols >= cols);
    assert_true((l.slices - 1) * l.slice_cols < cols);
    assert_true(l.groups >= 1 && l.groups <= rows * l.slices);
    return l;
}

static void test_nvidia_like(void **state)
{
    (void)state;
    fcl_device_info i = nvidia_like();
    assert_int_equal(i.softmax_work_group_size, 256);
    assert_int_equal(i.softmax_fused_max_cols, (48 * 1024 - 2048) / 4);
    assert_int_equal(plan_of(&i, 65536, 4096, 0).algo, FCL_SOFTMAX_FUSED);
    assert_int_equal(plan_of(&i, 4096, 11776, 0).algo, FCL_SOFTMAX_FUSED);
    assert_int_equal(plan_of(&i, 4096, 11777, 0).algo, FCL_SOFTMAX_ONLINE);
    assert_int_equal(plan_of(&i, 4096, 65536, 0).algo, FCL_SOFTMAX_ONLINE);
    /* 64 rows of 4M cannot fill 132 units: the rows are split. */
    fcl_softmax_launch l = plan_of(&i, 64, 1u << 22, 0);
    assert_int_equal(l.algo, FCL_SOFTMAX_SPLIT);
    assert_true(l.slices >= 8);
    assert_true(l.slice_cols >= 256 * 16);
    assert_int_equal(plan_of(&i, 1, 200001, 0).algo, FCL_SOFTMAX_SPLIT);
    /* A short row is fused even when there are few rows. */
    assert_int_equal(plan_of(&i, 1, 1000, 0).algo, FCL_SOFTMAX_FUSED);
    fcl_softmax_desc d = {.rows = 8, .cols = 20000, .algo = FCL_SOFTMAX_FUSED};
    fcl_softmax_launch unused;
    assert_int_equal(fcl_plan_softmax(&i, &d, &unused), FCL_ERROR_UNSUPPORTED);
}

static void test_amd_like(void **state)
{
    (void)state;
    fcl_device_info i = amd_like();
    assert_int_equal(i.softmax_work_group_size, 256);
    assert_int_equal(i.softmax_fused_max_cols, (64 * 1024 - 2048) / 4);
    assert_int_equal(plan_of(&i, 4096, 12000, 0).algo, FCL_SOFTMAX_FUSED); /* not on NVIDIA */
    assert_int_equal(plan_of(&i, 4096, 16384, 0).algo, FCL_SOFTMAX_ONLINE);
    assert_int_equal(plan_of(&i, 16, 1u << 20, 0).algo, FCL_SOFTMAX_SPLIT);
}

static void test_kernel_limits_win(void **state)
{
    (void)state;
    /* A kernel that allows fewer work-items than the device (register pressure). */
    fcl_device_info i = {.type = CL_DEVICE_TYPE_GPU, .compute_units = 8,
                         .max_work_group_size = 1024, .local_mem_size = 32 * 1024};
    i = built(i, 192);
    assert_int_equal(i.softmax_work_group_size, 128);
    assert_int_equal(plan_of(&i, 100, 100, 0).work_group_size, 128);
    /* Local memory already used by the kernel itself leaves nothing for a row. */
    i.kernel_local_mem_size = i.local_mem_size;
    assert_int_equal(fcl_plan_fused_max_cols(&i), 0);
}

static void test_pocl_like(void **state)
{
    (void)state;
    fcl_device_info i = pocl_like();
    assert_int_equal(i.softmax_work_group_size, 64);
    assert_int_equal(i.softmax_fused_max_cols, (2 * 1024 * 1024 - 512) / 4);
    assert_int_equal(plan_of(&i, 8, 200001, 0).algo, FCL_SOFTMAX_FUSED);
    assert_int_equal(plan_of(&i, 1, 643251, 0).algo, FCL_SOFTMAX_SPLIT);
    assert_int_equal(plan_of(&i, 2, 643251, 0).algo, FCL_SOFTMAX_ONLINE); /* 2 rows, 2 cores */
    assert_int_equal(plan_of(&i, 1, 643251, 0).slices, 2);
}

static void test_forced_choices(void **state)
{
    (void)state;
    fcl_device_info i = pocl_like();
    /* Forced SPLIT splits even where AUTO would not, as far as the row allows. */
    fcl_softmax_launch l = plan_of(&i, 1000, 4097, FCL_SOFTMAX_SPLIT);
    assert_int_equal(l.algo, FCL_SOFTMAX_SPLIT);
    assert_true(l.slices >= 2);
    assert_int_equal(plan_of(&i, 5, 3, FCL_SOFTMAX_SPLIT).slices, 1);
    assert_int_equal(plan_of(&i, 5, 3, FCL_SOFTMAX_ONLINE).algo, FCL_SOFTMAX_ONLINE);
    /* Grid-stride: launches stay bounded however many rows there are. */
    assert_true(plan_of(&i, (size_t)1 << 31, 1, 0).groups <= 2 * 32);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nvidia_like),   cmocka_unit_test(test_amd_like),
        cmocka_unit_test(test_kernel_limits_win), cmocka_unit_test(test_pocl_like),
        cmocka_unit_test(test_forced_choices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
