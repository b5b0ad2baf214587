/* The planner with injected device capabilities: the strategy the issue describes for a
 * 48 KiB NVIDIA-like GPU, a 64 KiB AMD-like GPU (64-wide wavefronts, work-groups of at
 * most 256) and POCL's CPU device (local memory of type CL_GLOBAL). No device needed. */
#include "internal.h"
#include "support.h"

#include <stdio.h>
#include <string.h>

/* What program.c fills in after the build: per-kernel limits, then the plan. */
static fcl_device_info built(fcl_device_info i, size_t kernel_wg)
{
    fcl_tuning t;
    assert_int_equal(fcl_tuning_for(NULL, &i, NULL, &t), FCL_SUCCESS);
    i.kernel_work_group_size = kernel_wg;
    i.softmax_work_group_size = fcl_plan_work_group_size(&i, t.softmax_work_group);
    i.softmax_vector_width = t.vector_width;
    i.softmax_rows_per_item = t.softmax_rows;
    i.softmax_block_items = t.softmax_block_items;
    i.softmax_block_min_lanes = t.softmax_block_lanes;
    i.softmax_block_cols = i.softmax_work_group_size * t.softmax_block_items;
    i.attention_rows_per_item = t.attention_rows;
    i.kernel_local_mem_size = i.softmax_work_group_size * 8; /* scratch[FCL_LWS] of float2 */
    i.softmax_fused_max_cols = fcl_plan_fused_max_cols(&i);
    return i;
}

static fcl_device_info nvidia_like(void)
{
    fcl_device_info i = {.type = CL_DEVICE_TYPE_GPU, .vendor_id = 0x10de, .compute_units = 132,
                         .max_work_group_size = 1024, .local_mem_size = 48 * 1024};
    return built(i, 1024);
}

static fcl_device_info amd_like(void)
{
    fcl_device_info i = {.type = CL_DEVICE_TYPE_GPU, .vendor_id = 0x1002, .compute_units = 104,
                         .max_work_group_size = 256, .local_mem_size = 64 * 1024};
    return built(i, 256);
}

static fcl_device_info pocl_like(void)
{
    fcl_device_info i = {.type = CL_DEVICE_TYPE_CPU, .vendor_id = 0x8086, .compute_units = 2,
                         .max_work_group_size = 4096, .local_mem_size = 2 * 1024 * 1024,
                         .local_mem_is_global = 1, .preferred_vector_width_float = 16};
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
    /* Rows of up to 256 x 16 are held in registers, 8 or more work-items per row, and short
     * rows share a work-group; longer ones in local memory. */
    assert_int_equal(i.softmax_block_cols, 4096);
    fcl_softmax_launch b = plan_of(&i, 1u << 21, 128, 0);
    assert_true(b.algo == FCL_SOFTMAX_FUSED && b.lanes == 8);
    assert_int_equal(b.groups, 132 * 32); /* 32 rows per group pass; groups loop */
    assert_int_equal(plan_of(&i, 100, 128, 0).groups, 4);
    assert_int_equal(plan_of(&i, 3, 1000, 0).lanes, 64);
    assert_int_equal(plan_of(&i, 3, 1000, 0).groups, 1);
    assert_int_equal(plan_of(&i, 65536, 4096, 0).lanes, 256);
    assert_int_equal(plan_of(&i, 65536, 4097, 0).lanes, 0);
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
    /* Local memory already used by the kernel itself leaves only the rows in registers. */
    i.kernel_local_mem_size = i.local_mem_size;
    assert_int_equal(fcl_plan_fused_max_cols(&i), 128 * 16);
    i.softmax_block_cols = 0;
    assert_int_equal(fcl_plan_fused_max_cols(&i), 0);
}

static void test_pocl_like(void **state)
{
    (void)state;
    fcl_device_info i = pocl_like();
    assert_int_equal(i.softmax_work_group_size, 4);
    assert_int_equal(i.softmax_fused_max_cols, (2 * 1024 * 1024 - 4 * 8) / 4);
    /* Local memory of type CL_GLOBAL is ordinary memory: rows are re-read from the cache by
     * one work-item each instead of being fused, unless FUSED is forced. */
    assert_int_equal(i.softmax_rows_per_item, 1);
    fcl_softmax_launch l = plan_of(&i, 8, 200001, 0);
    assert_int_equal(l.algo, FCL_SOFTMAX_ONLINE);
    assert_true(l.per_item && l.work_group_size == 1);
    l = plan_of(&i, 8, 200001, FCL_SOFTMAX_FUSED);
    assert_true(l.algo == FCL_SOFTMAX_FUSED && !l.per_item && l.work_group_size == 4);
    assert_int_equal(plan_of(&i, 1, 643251, 0).algo, FCL_SOFTMAX_SPLIT);
    assert_int_equal(plan_of(&i, 2, 643251, 0).algo, FCL_SOFTMAX_ONLINE); /* 2 rows, 2 cores */
    assert_int_equal(plan_of(&i, 1, 643251, 0).slices, 2);
    /* On a GPU ONLINE stays a work-group per row. */
    fcl_device_info nv = nvidia_like();
    assert_int_equal(nv.softmax_rows_per_item, 0);
    assert_false(plan_of(&nv, 4096, 65536, 0).per_item);
}

/* NVIDIA's softmax_nv takes FUSED rows of 16-byte vectors at 16-byte starts up to
 * softmax_nv_cols elements (past what local memory holds), in its first build that holds the
 * row, with the fewest lanes that hold the row and no more than its vectors, in work-groups of
 * SM_NV_LWS, and ONLINE and SPLIT on longer such rows; any other row keeps the portable plan,
 * and so does every row where softmax_nv_cols is 0. */
static void test_softmax_nv_plan(void **state)
{
    (void)state;
    fcl_device_info i = nvidia_like();
    assert_false(plan_of(&i, 1u << 21, 128, 0).nv_build);
    assert_false(plan_of(&i, 4096, 65536, 0).nv_stream);
    i.softmax_nv_cols = SM_NV_COLS;
    fcl_softmax_launch l = plan_of(&i, 1u << 21, 128, 0);
    assert_true(l.nv_build == 1 && l.algo == FCL_SOFTMAX_FUSED && l.lanes == 32 / SM_NV_VECS);
    assert_true(l.work_group_size == SM_NV_LWS && l.groups == 132 * 32);
    l = plan_of(&i, 9, 4096, 0);
    assert_true(l.nv_build == 1 && l.lanes == 1024 / SM_NV_VECS);
    assert_int_equal(l.groups, (9 + SM_NV_LWS / l.lanes - 1) / (SM_NV_LWS / l.lanes));
    /* float32 rows too long for the first build take the second (twice the vectors). */
    assert_int_equal(SM_NV_LWS * fcl_plan_softmax_nv_vecs(FCL_DTYPE_F32, 1) * 4, SM_NV_COLS);
    l = plan_of(&i, 9, SM_NV_COLS, 0);
    assert_true(l.nv_build == 2 && l.lanes == SM_NV_LWS && l.groups == 9);
    assert_true(plan_of(&i, 3, 8, 0).nv_build && plan_of(&i, 3, 8, 0).lanes == 1);
    assert_int_equal(plan_of(&i, 3, 64, 0).lanes, 16 / SM_NV_VECS);
    const size_t not_nv[][3] = {/* cols, in_stride, out_stride (float32) */
                                {1001, 1001, 1001}, {1024, 1027, 1024}, {1024, 1024, 1030},
                                {SM_NV_COLS + 4, SM_NV_COLS + 4, SM_NV_COLS + 4}};
    for (size_t k = 0; k < sizeof not_nv / sizeof not_nv[0]; k++) {
        fcl_softmax_desc d = {.rows = 1000, .cols = not_nv[k][0], .in_stride = not_nv[k][1],
                              .out_stride = not_nv[k][2]};
        assert_int_equal(fcl_plan_softmax(&i, &d, &l), FCL_SUCCESS);
        assert_false(l.nv_build);
        assert_int_equal(l.algo, d.cols <= i.softmax_fused_max_cols ? FCL_SOFTMAX_FUSED
                                                                    : FCL_SOFTMAX_ONLINE);
    }
    /* 16-bit types: vectors of 8 elements, one build. */
    assert_int_equal(fcl_plan_softmax_nv_vecs(FCL_DTYPE_F16, 1), 0);
    fcl_softmax_desc h = {.rows = 100, .cols = 1020, .in_stride = 1020, .out_stride = 1020,
                          .dtype = FCL_DTYPE_F16};
    assert_int_equal(fcl_plan_softmax(&i, &h, &l), FCL_SUCCESS);
    assert_false(l.nv_build);
    h.cols = h.in_stride = h.out_stride = SM_NV_COLS;
    h.dtype = FCL_DTYPE_BF16;
    assert_int_equal(fcl_plan_softmax(&i, &h, &l), FCL_SUCCESS);
    assert_true(l.nv_build == 1 && l.lanes == SM_NV_LWS);
    /* Longer rows of 16-byte vectors stream on NVIDIA's ONLINE and SPLIT, whose slices are
     * whole vectors; others on the portable ones. */
    l = plan_of(&i, 4096, 65536, 0);
    assert_true(l.algo == FCL_SOFTMAX_ONLINE && l.nv_stream && !l.nv_build);
    assert_int_equal(l.work_group_size, SM_NV_LWS);
    l = plan_of(&i, 64, 1u << 22, 0);
    assert_true(l.algo == FCL_SOFTMAX_SPLIT && l.nv_stream && l.slice_cols % 4 == 0);
    l = plan_of(&i, 3, 100008, FCL_SOFTMAX_SPLIT);
    assert_true(l.nv_stream && l.slice_cols % 4 == 0 && l.slices >= 2);
    assert_false(plan_of(&i, 4096, 65537, 0).nv_stream);
    assert_false(plan_of(&i, 64, (1u << 22) + 2, 0).nv_stream);
    h.cols = h.in_stride = h.out_stride = 1000000;
    h.rows = 2;
    h.dtype = FCL_DTYPE_F16;
    assert_int_equal(fcl_plan_softmax(&i, &h, &l), FCL_SUCCESS);
    assert_true(l.algo == FCL_SOFTMAX_SPLIT && l.nv_stream && l.slice_cols % 8 == 0);
    assert_true(l.slices * l.slice_cols >= h.cols && (l.slices - 1) * l.slice_cols < h.cols);
    /* Forced: FUSED past local memory only where softmax_nv takes the row; ONLINE streams. */
    l = plan_of(&i, 100, 1024, FCL_SOFTMAX_ONLINE);
    assert_true(!l.nv_build && l.nv_stream);
    fcl_softmax_desc f = {.rows = 8, .cols = 16000, .in_stride = 16000, .out_stride = 16000,
                          .algo = FCL_SOFTMAX_FUSED};
    assert_true(f.cols > i.softmax_fused_max_cols);
    assert_int_equal(fcl_plan_softmax(&i, &f, &l), FCL_SUCCESS);
    assert_int_equal(l.nv_build, 2);
    f.in_stride = 16001;
    assert_int_equal(fcl_plan_softmax(&i, &f, &l), FCL_ERROR_UNSUPPORTED);
}

/* Mesa's llvmpipe: a CPU device whose driver stops a work-item's loops after 65535
 * iterations in all. Every softmax plan keeps each work-item within that: its rows (or
 * slices) times the iterations of one, counted as the planner's rule does (up to three passes
 * of a vector an iteration, a quarter more for batching, and 64 + 1024 for the short loops). */
static void test_loop_iteration_cap(void **state)
{
    (void)state;
    fcl_device_info i = {.type = CL_DEVICE_TYPE_CPU, .compute_units = 8, .max_work_group_size = 1024,
                         .local_mem_size = 32768, .local_mem_is_global = 1,
                         .preferred_vector_width_float = 1, .loop_iteration_cap = 65535};
    i = built(i, 32);
    const size_t shapes[][2] = {{8, 200001}, {65536, 1024}, {16, 1048576}, {1, 4194304},
                                {4096, 65536}, {1, 1000}, {3, 100000}, {1000, 4097}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int algo = FCL_SOFTMAX_AUTO; algo <= FCL_SOFTMAX_SPLIT; algo++) {
            fcl_softmax_desc d = {.rows = shapes[s][0], .cols = shapes[s][1],
                                  .in_stride = shapes[s][1], .out_stride = shapes[s][1],
                                  .algo = (fcl_softmax_algo)algo};
            fcl_softmax_launch l;
            fcl_status st = fcl_plan_softmax(&i, &d, &l);
            if (algo == FCL_SOFTMAX_AUTO || algo == FCL_SOFTMAX_SPLIT)
                assert_int_equal(st, FCL_SUCCESS); /* a path always exists */
            if (st != FCL_SUCCESS)
                continue;
            size_t lanes = l.per_item ? 1 : l.lanes ? l.lanes : l.work_group_size;
            size_t per_slice = 4 * ((l.slice_cols + lanes * 4 - 1) / (lanes * 4)) + 64 + 1024;
            size_t per_pass = l.lanes ? l.work_group_size / l.lanes : 1;
            size_t units = d.rows * l.slices, passes = (units + per_pass * l.groups - 1) / (per_pass * l.groups);
            if (passes * per_slice > 65535)
                fail_msg("%zu x %zu algo %d: %zu passes of %zu iterations", d.rows, d.cols, algo,
                         passes, per_slice);
            assert_true(l.slices * l.slice_cols >= d.cols);
        }
    /* Without a cap, the one-work-item rows stay. */
    i.loop_iteration_cap = 0;
    assert_true(plan_of(&i, 8, 200001, 0).per_item);
    i.loop_iteration_cap = 65535;
    assert_false(plan_of(&i, 8, 200001, 0).per_item);
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

/* Attention tiles as program.c plans them before the build: the largest candidate whose
 * tiles fit, in the largest work-group the kernels allow; the decode kernel where its 128
 * work-items fit. */
static void fill_attention_tiles(fcl_device_info *i)
{
    fcl_tuning t;
    assert_int_equal(fcl_tuning_for(NULL, i, NULL, &t), FCL_SUCCESS);
    t.attention_rows = i->attention_rows_per_item; /* as the test injects it */
    fcl_plan_attention_tiles(i, &t, i->attention_tiles);
}

static void test_attention_tiles(void **state)
{
    (void)state;
    fcl_device_info nv = nvidia_like(), amd = amd_like(), cpu = pocl_like();
    cpu.attention_rows_per_item = 0; /* the tiles FLASHCL_TUNE=attention_rows=0 gives */
    fill_attention_tiles(&nv);
    fill_attention_tiles(&amd);
    fill_attention_tiles(&cpu);
    /* NVIDIA's 96 accumulators: 64 x 32 at head_dim 64, prefetching (46.3 KB); CPUs' 80:
     * 64 x 16; AMD's 76: 32 x 32. */
    assert_int_equal(nv.attention_tiles[0].block_q, 64);
    assert_int_equal(nv.attention_tiles[0].block_kv, 32);
    assert_true(fcl_attention_tile_prefetch(1, 64, nv.attention_tiles[0].work_group_size));
    assert_int_equal(cpu.attention_tiles[0].block_q, 64);
    assert_int_equal(cpu.attention_tiles[0].block_kv, 16);
    assert_int_equal(amd.attention_tiles[0].block_q, 32);
    assert_int_equal(amd.attention_tiles[0].block_kv, 32);
    /* 48 KiB: at head_dim 128, 32 x 32 prefetching (64 x 16 would need 48.5 KB); at 256,
     * 16 x 16 (two rows a work-item: no prefetching; 16 x 32 is 52.8 KB). */
    assert_int_equal(nv.attention_tiles[1].block_q, 32);
    assert_int_equal(nv.attention_tiles[1].block_kv, 32);
    assert_true(fcl_attention_tile_prefetch(1, 32, nv.attention_tiles[1].work_group_size));
    assert_true(fcl_attention_local_bytes(128, 64, 16) > 48 * 1024);
    assert_int_equal(nv.attention_tiles[2].block_q, 16);
    assert_int_equal(nv.attention_tiles[2].block_kv, 16);
    assert_false(fcl_attention_tile_prefetch(1, 16, 64));
    assert_true(fcl_attention_local_bytes(256, 16, 16) <= 48 * 1024);
    /* 64 KiB (AMD) and POCL's 2 MiB hold 16 x 32 at head_dim 256; AMD, which prefetches
     * nothing, takes it at 128 too (before 32 x 16). */
    assert_int_equal(amd.attention_tiles[2].block_kv, 32);
    assert_int_equal(amd.attention_tiles[1].block_q, 16);
    assert_int_equal(amd.attention_tiles[1].block_kv, 32);
    assert_int_equal(cpu.attention_tiles[2].block_kv, 32);
    /* Head dims pick their bucket by the larger of the two. */
    assert_int_equal(fcl_attention_bucket(64, 64), 0);
    assert_int_equal(fcl_attention_bucket(40, 72), 1);
    assert_int_equal(fcl_attention_bucket(256, 1), 2);
    assert_int_equal(fcl_attention_bucket(257, 1), 3);
    assert_int_equal(fcl_attention_bucket(576, 512), 3);
    assert_int_equal(fcl_attention_bucket(577, 1), -1);
    /* MLA's 576 / 512 on NVIDIA's 48 KiB: 8 x 8 tiles (37.7 KB), and the decode kernel's
     * chunks of 128 keys as at every head dim. */
    assert_int_equal(nv.attention_tiles[3].block_q, 8);
    assert_int_equal(nv.attention_tiles[3].block_kv, 8);
    assert_int_equal(nv.attention_tiles[3].decode_block_kv, 128);
    /* 4 KiB of local memory holds no tile for head_dim 256: the rows kernel serves it. */
    fcl_device_info tiny = {.type = CL_DEVICE_TYPE_GPU, .compute_units = 1,
                            .max_work_group_size = 256, .local_mem_size = 4096,
                            .softmax_vector_width = 4};
    fill_attention_tiles(&tiny);
    assert_int_equal(tiny.attention_tiles[2].block_q, 0);
    assert_non_null(strstr(tiny.attention_tiles[2].rows_because, "4096"));
    fcl_attention_desc d = {.batch = 1, .heads_q = 1, .heads_kv = 1, .len_q = 8, .len_kv = 8,
                            .head_dim = 200, .head_dim_v = 200};
    fcl_attention_launch l;
    assert_int_equal(fcl_plan_attention(&tiny, &d, &l), FCL_SUCCESS);
    assert_true(l.path == FCL_ATTENTION_PATH_ROWS && l.work_group_size == 1 && l.block_q == 16);
    /* 32 KiB (oclgrind's GPU) holds MLA's head dims in 4 x 8 tiles of 4 x 8 work-items only
     * (8 x 8 needs 37.7 KB), the other buckets in groups of 64. */
    fcl_device_info small = tiny;
    small.local_mem_size = 32768;
    fill_attention_tiles(&small);
    d.head_dim = 576;
    d.head_dim_v = 512;
    assert_int_equal(fcl_plan_attention(&small, &d, &l), FCL_SUCCESS);
    assert_true(l.path == FCL_ATTENTION_PATH_TILE && l.block_q == 4 && l.block_kv == 8);
    assert_int_equal(l.work_group_size, 32);
    d.head_dim = d.head_dim_v = 256;
    assert_int_equal(fcl_plan_attention(&small, &d, &l), FCL_SUCCESS);
    assert_int_equal(l.path, FCL_ATTENTION_PATH_TILE);
    assert_int_equal(l.work_group_size, 64);
}

/* A tile whose compiled kernel did not fit, planned again: past the local memory as the
 * driver counts it (Oclgrind counts three times what is declared), the next smaller tile
 * that fits that count; past the kernel's work-group limit, the tiles of smaller groups;
 * where nothing fits, the rows kernel and why. */
static void test_attention_refit(void **state)
{
    (void)state;
    fcl_device_info nv = nvidia_like();
    fill_attention_tiles(&nv);
    const struct fcl_attention_tile built = nv.attention_tiles[0]; /* 64 x 32, 64 work-items */
    const cl_ulong declared =
        fcl_attention_local_bytes(64, built.block_q, built.block_kv);

    struct fcl_attention_tile tile = built;
    fcl_plan_attention_refit(&nv, 0, 96, 1, built.work_group_size, 3 * declared, &tile);
    assert_int_equal(tile.block_q, 16);
    assert_int_equal(tile.block_kv, 16); /* 16 x 32 counts 49.3 KB three times */
    assert_true(3 * fcl_attention_local_bytes(64, tile.block_q, tile.block_kv) <=
                nv.local_mem_size);
    assert_int_equal(tile.rows_block_q, built.rows_block_q);

    tile = built;
    fcl_plan_attention_refit(&nv, 0, 96, 1, 32, declared, &tile);
    assert_int_equal(tile.work_group_size, 32);
    assert_true(tile.block_q > 0 && tile.block_q % 4 == 0);

    tile = built;
    fcl_plan_attention_refit(&nv, 0, 96, 1, built.work_group_size, 1000 * declared, &tile);
    assert_int_equal(tile.block_q, 0);
    assert_non_null(strstr(tile.rows_because, "64 x 32 tile's kernel counts"));
}

static void test_attention_splits(void **state)
{
    (void)state;
    /* CPUs: a block of queries per work-item, one in each lane of its vectors of 16 (two
     * vectors, 32 queries, with AVX-512's vector width of 16; one with AVX2's 8), keys half
     * the device's vector width at a time (AVX-512: 8), groups of one. */
    fcl_device_info cpu = pocl_like(), avx2 = cpu;
    avx2.preferred_vector_width_float = 8;
    avx2 = built(avx2, 4096);
    fill_attention_tiles(&cpu);
    fill_attention_tiles(&avx2);
    fcl_attention_desc prefill = {.batch = 1, .heads_q = 8, .heads_kv = 8, .len_q = 1024,
                                  .len_kv = 1024, .head_dim = 64, .head_dim_v = 64};
    fcl_attention_launch rows;
    assert_int_equal(fcl_plan_attention(&cpu, &prefill, &rows), FCL_SUCCESS);
    assert_true(rows.path == FCL_ATTENTION_PATH_ROWS && rows.work_group_size == 1);
    assert_int_equal(rows.block_q, 32);
    assert_int_equal(rows.block_kv, 8);
    assert_int_equal(rows.q_tiles, 32);
    assert_int_equal(rows.heads_step, 1);
    assert_int_equal(fcl_plan_attention(&avx2, &prefill, &rows), FCL_SUCCESS);
    assert_int_equal(rows.block_q, 16);
    assert_int_equal(rows.block_kv, 4);
    assert_int_equal(rows.q_tiles, 64);
    /* GQA: the lanes take the query heads of a kv head together, so that they read its K
     * and V once: 4 heads of 8 queries, or decoding's 4 heads of the one query. */
    fcl_attention_desc gqa_prefill = prefill;
    gqa_prefill.heads_kv = 2;
    assert_int_equal(fcl_plan_attention(&cpu, &gqa_prefill, &rows), FCL_SUCCESS);
    assert_int_equal(rows.heads_step, 4);
    assert_int_equal(rows.block_q, 8);
    assert_int_equal(rows.q_tiles, 128);
    assert_int_equal(rows.work, 128 * 2);
    assert_false(rows.one_query);
    /* Decoding, up to 4 query rows: one query of the group's heads a step, keys a vector at
     * a time (the lanes would hold absent rows). */
    gqa_prefill.len_q = 1;
    assert_int_equal(fcl_plan_attention(&cpu, &gqa_prefill, &rows), FCL_SUCCESS);
    assert_true(rows.path == FCL_ATTENTION_PATH_ROWS && rows.one_query);
    assert_int_equal(rows.heads_step, 4);
    assert_int_equal(rows.q_tiles, 1);
    assert_int_equal(rows.block_kv, 16);
    gqa_prefill.heads_kv = 1; /* 8 rows: the lanes */
    assert_int_equal(fcl_plan_attention(&cpu, &gqa_prefill, &rows), FCL_SUCCESS);
    assert_false(rows.one_query);
    assert_int_equal(rows.heads_step, 8);
    fcl_device_info nv = nvidia_like();
    fill_attention_tiles(&nv);
    fcl_attention_launch l;
    /* Decode on the H200: one query per work-group of 128, 128 keys a chunk; 8 x 32 queries
     * cannot fill 132 units 16 times over: split the keys. */
    fcl_attention_desc d = {.batch = 8, .heads_q = 32, .heads_kv = 32, .len_q = 1,
                            .len_kv = 32768, .head_dim = 128, .head_dim_v = 128};
    assert_int_equal(fcl_plan_attention(&nv, &d, &l), FCL_SUCCESS);
    assert_true(l.path == FCL_ATTENTION_PATH_DECODE && l.work_group_size == 128 && l.block_q == 1 && l.block_kv == 128);
    assert_int_equal(l.splits, 9); /* 2112 groups wanted / 256 queries, rounded up */
    assert_true(l.split_len * l.splits >= d.len_kv && l.split_len % l.block_kv == 0);
    /* GQA 32/8 (4 query heads a step: 64 steps): many short splits where the device is not
     * known to be NVIDIA's, one wave of 132 x 4 groups (8 splits) where it is; multi-head
     * decoding keeps many short splits, one wave leaving it 2. */
    fcl_attention_desc gqa = d;
    gqa.heads_kv = 8;
    assert_int_equal(fcl_plan_attention(&nv, &gqa, &l), FCL_SUCCESS);
    assert_true(l.path == FCL_ATTENTION_PATH_DECODE && l.work == 64 && l.splits == 32);
    fcl_device_info nv90 = nv;
    nv90.nv_compute_capability = 90;
    assert_int_equal(fcl_plan_attention(&nv90, &gqa, &l), FCL_SUCCESS);
    assert_true(l.work == 64 && l.splits == 8);
    assert_int_equal(fcl_plan_attention(&nv90, &d, &l), FCL_SUCCESS);
    assert_int_equal(l.splits, 9);
    /* A window of 1024 keys: splits for its keys (fa_locate starts them at the window), not
     * for the cache's 32K. */
    fcl_attention_desc windowed = gqa;
    windowed.window = 1, windowed.window_left = 1023, windowed.window_right = 0;
    assert_int_equal(fcl_plan_attention(&nv90, &windowed, &l), FCL_SUCCESS);
    assert_true(l.split_len * l.splits >= 1024 && l.split_len * l.splits <= 2048);
    /* From a paged cache, two waves (16 splits); multi-head decoding keeps its splits. */
    fcl_attention_desc paged = gqa;
    paged.page_size = 16;
    assert_int_equal(fcl_plan_attention(&nv90, &paged, &l), FCL_SUCCESS);
    assert_true(l.path == FCL_ATTENTION_PATH_DECODE && l.splits == 16);
    paged.heads_kv = 32;
    assert_int_equal(fcl_plan_attention(&nv90, &paged, &l), FCL_SUCCESS);
    assert_int_equal(l.splits, 9);
    /* The decode kernel loads 4 float32 or 8 16-bit elements at once (4 in its GQA build):
     * head dims that are not multiples of that go to the tile kernel. */
    static const struct {
        size_t heads_kv, head_dim, head_dim_v;
        fcl_dtype kv;
        int decode;
    } widths[] = {{32, 12, 12, FCL_DTYPE_F32, 1}, {32, 6, 128, FCL_DTYPE_F32, 0},
                  {32, 128, 6, FCL_DTYPE_F32, 0}, {32, 16, 16, FCL_DTYPE_F16, 1},
                  {32, 12, 12, FCL_DTYPE_BF16, 0}, {8, 12, 12, FCL_DTYPE_F16, 1},
                  {8, 10, 12, FCL_DTYPE_F16, 0}};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        fcl_attention_desc w = d;
        w.heads_kv = widths[i].heads_kv;
        w.head_dim = widths[i].head_dim;
        w.head_dim_v = widths[i].head_dim_v;
        w.dtype_kv = widths[i].kv;
        assert_int_equal(fcl_plan_attention(&nv90, &w, &l), FCL_SUCCESS);
        assert_int_equal(l.path == FCL_ATTENTION_PATH_DECODE, widths[i].decode);
    }
    /* The partials (256 rows of 130 floats a split) stay within a quarter of the largest
     * allocation: 3 splits fit in 4 x 3 splits' bytes, and none beside the output in less. */
    const size_t per_split = 8 * 32 * 130 * sizeof(float);
    fcl_device_info small = nv;
    small.max_alloc_size = 4 * 3 * per_split + 4 * per_split / 2;
    assert_int_equal(fcl_plan_attention(&small, &d, &l), FCL_SUCCESS);
    assert_int_equal(l.splits, 3);
    assert_true(l.split_len * l.splits >= d.len_kv);
    small.max_alloc_size = 4 * per_split;
    assert_int_equal(fcl_plan_attention(&small, &d, &l), FCL_SUCCESS);
    assert_int_equal(l.splits, 1);
    d.len_kv = 300; /* a split keeps 256 keys or more */
    assert_int_equal(fcl_plan_attention(&nv, &d, &l), FCL_SUCCESS);
    assert_int_equal(l.splits, 1);
    d.len_q = 5; /* past decoding: query tiles */
    assert_int_equal(fcl_plan_attention(&nv, &d, &l), FCL_SUCCESS);
    assert_true(l.path == FCL_ATTENTION_PATH_TILE && l.block_q == 32);
    /* Prefill fills the device with query tiles alone. */
    d.len_q = d.len_kv = 4096;
    assert_int_equal(fcl_plan_attention(&nv, &d, &l), FCL_SUCCESS);
    assert_int_equal(l.splits, 1);
    /* Forced splits, capped by the key tiles. */
    d.kv_splits = 7;
    assert_int_equal(fcl_plan_attention(&nv, &d, &l), FCL_SUCCESS);
    assert_int_equal(l.splits, 7);
    d.len_kv = 48; /* two key tiles (of 32 at head_dim 128) */
    assert_int_equal(fcl_plan_attention(&nv, &d, &l), FCL_SUCCESS);
    assert_int_equal(l.splits, 2);
}

/* Softmax under injected limits: a plan that runs, within the kernels' work-group limit,
 * the local memory and the loop cap. */
static void check_softmax_runs(const fcl_device_info *i, size_t wg)
{
    const size_t shapes[][2] = {{1, 1}, {3, 1000}, {1, 100003}, {64, 1 << 20}, {4096, 4097}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const size_t rows = shapes[k][0], cols = shapes[k][1];
        fcl_softmax_launch l = plan_of(i, rows, cols, FCL_SOFTMAX_AUTO);
        assert_true(l.work_group_size <= wg);
        if (l.algo == FCL_SOFTMAX_FUSED)
            assert_true(cols <= i->softmax_fused_max_cols);
        if (!i->loop_iteration_cap)
            continue;
        /* Rows or slices a work-item takes, each a few passes over its share of the row. */
        size_t lanes = l.per_item ? 1 : l.lanes ? l.lanes : l.work_group_size;
        size_t per_pass = l.lanes ? l.work_group_size / l.lanes : 1;
        size_t units = (rows * l.slices + per_pass * l.groups - 1) / (per_pass * l.groups);
        size_t vectors = (l.slice_cols + lanes * i->softmax_vector_width - 1) /
                         (lanes * i->softmax_vector_width);
        assert_true(units * 4 * vectors <= i->loop_iteration_cap);
    }
}

/* Attention under injected limits: every bucket has a plan, within the work-group limit,
 * the local memory (tiles) and the loop cap; only the rows kernel under a loop cap may find
 * a call too long, and then says so. */
static void check_attention_runs(const fcl_device_info *i, size_t wg)
{
    const fcl_attention_desc descs[] = {
        {.batch = 1, .heads_q = 8, .heads_kv = 8, .len_q = 512, .len_kv = 512, .head_dim = 64},
        {.batch = 2, .heads_q = 32, .heads_kv = 8, .len_q = 1, .len_kv = 32768, .head_dim = 128},
        {.batch = 1, .heads_q = 4, .heads_kv = 4, .len_q = 300, .len_kv = 300, .head_dim = 256},
        {.batch = 1, .heads_q = 16, .heads_kv = 1, .len_q = 1, .len_kv = 2048, .head_dim = 576,
         .head_dim_v = 512},
    };
    for (size_t k = 0; k < sizeof descs / sizeof descs[0]; k++) {
        fcl_attention_desc d = descs[k];
        if (!d.head_dim_v)
            d.head_dim_v = d.head_dim;
        fcl_attention_launch l;
        const struct fcl_attention_tile *tile =
            &i->attention_tiles[fcl_attention_bucket(d.head_dim, d.head_dim_v)];
        fcl_status s = fcl_plan_attention(i, &d, &l);
        if (s != FCL_SUCCESS) {
            assert_int_equal(s, FCL_ERROR_UNSUPPORTED);
            assert_true(i->loop_iteration_cap && !tile->block_q);
            assert_non_null(strstr(l.refusal, "loop_iteration_cap"));
            continue;
        }
        assert_true(l.work_group_size >= 1 && l.work_group_size <= wg);
        fcl_tuning t; /* as fill_attention_tiles planned the tiles */
        assert_int_equal(fcl_tuning_for(NULL, i, NULL, &t), FCL_SUCCESS);
        if (l.path == FCL_ATTENTION_PATH_TILE)
            assert_true(fcl_attention_local_bytes(tile->max_head_dim, l.block_q, l.block_kv) *
                                i->local_mem_scale + i->local_mem_reserved <=
                        i->local_mem_size);
        assert_true(l.splits >= 1 && l.splits <= FA_MAX_SPLITS && l.split_len * l.splits >= d.len_kv);
        if (i->loop_iteration_cap)
            assert_true(l.path != FCL_ATTENTION_PATH_DECODE &&
                        fcl_attention_loop_iterations(i, &l) <= i->loop_iteration_cap);
    }
}

/* Item 1 of issue 12: kernel work-group limits 1 to 1024, local memory 0 to 64 KiB of
 * either type, counted as declared, double (rusticl) or with bytes added to every kernel, with and
 * without llvmpipe's loop cap; every plan runs within them. */
static void test_any_limits_give_runnable_plans(void **state)
{
    (void)state;
    const cl_ulong locals[] = {0, 1024, 4096, 8192, 16384, 24576, 32768, 49152, 65536};
    const cl_uint caps[] = {0, 65535};
    const cl_ulong counts[][2] = {{1, 0}, {2, 0}, {1, 1024}}; /* scale, reserved */
    for (size_t wg = 1; wg <= 1024; wg *= 2)
        for (size_t m = 0; m < sizeof locals / sizeof locals[0]; m++)
            for (int global = 0; global < 2; global++)
                for (size_t c = 0; c < 2; c++)
                    for (size_t n = 0; n < sizeof counts / sizeof counts[0]; n++) {
                        fcl_device_info i = {
                            .type = global ? CL_DEVICE_TYPE_CPU : CL_DEVICE_TYPE_GPU,
                            .compute_units = 8, .max_work_group_size = 1024,
                            .local_mem_size = locals[m], .local_mem_is_global = global,
                            .max_alloc_size = (cl_ulong)1 << 30, .preferred_vector_width_float = 4,
                            .loop_iteration_cap = caps[c], .local_mem_scale = (cl_uint)counts[n][0],
                            .local_mem_reserved = counts[n][1]};
                        i = built(i, wg);
                        fill_attention_tiles(&i);
                        check_softmax_runs(&i, wg);
                        check_attention_runs(&i, wg);
                    }
}

/* The probe's two points of a driver's local-memory count (1 and 2 KiB declared) make a
 * scale and a reserve: the 4 bytes NVIDIA's driver adds are a reserve, not a doubling (1028
 * bytes for 1024 rounded up to a scale of 2 once, and left MLA decoding on H100 without a
 * tile), rusticl's doubling is a scale, and a driver that reports nothing counts as declared. */
static void test_local_mem_count_is_fitted(void **state)
{
    (void)state;
    const cl_ulong points[][4] = {/* once, twice -> scale, reserved */
                                  {1024, 2048, 1, 0},
                                  {1028, 2052, 1, 4},
                                  {2048, 3072, 1, 1024},
                                  {2048, 4096, 2, 0},
                                  {3072, 6144, 3, 0},
                                  {2080, 4128, 2, 32},
                                  {0, 0, 1, 0}};
    for (size_t k = 0; k < sizeof points / sizeof points[0]; k++) {
        fcl_device_info i = {0};
        fcl_fit_local_mem_count(&i, points[k][0], points[k][1]);
        assert_int_equal(i.local_mem_scale, points[k][2]);
        assert_int_equal(i.local_mem_reserved, points[k][3]);
    }
    /* H100's figures keep a tile for MLA's head dims (576). */
    fcl_device_info h100 = nvidia_like();
    fcl_fit_local_mem_count(&h100, 1028, 2052);
    fill_attention_tiles(&h100);
    assert_true(h100.attention_tiles[3].block_q > 0);
}

/* The NVIDIA paths: built for GPUs of compute capability 8.0 and later unless switched off,
 * and planned for the calls their kernels take: on the tensor cores 64 keys a tile, 128
 * queries a group (4 warps of 32 rows at head dim 64, 8 of 16 at 128) in f16 and bf16, 64
 * queries (4 warps of 16 rows) in float32, with 32-key tiles at 128; decoding by shuffles. */
static void test_mma_path_rules(void **state)
{
    (void)state;
    fcl_device_info nv = nvidia_like();
    fcl_tuning t;
    char because[160];
    assert_int_equal(fcl_tuning_for(NULL, &nv, NULL, &t), FCL_SUCCESS);
    assert_false(fcl_plan_mma(&nv, &t, because, sizeof because)); /* no capability reported */
    nv.nv_compute_capability = 75;
    assert_false(fcl_plan_mma(&nv, &t, because, sizeof because));
    assert_non_null(strstr(because, "7.5"));
    nv.nv_compute_capability = 90;
    assert_true(fcl_plan_mma(&nv, &t, because, sizeof because));
    assert_int_equal(fcl_tuning_for(NULL, &nv, "attention_mma=0", &t), FCL_SUCCESS);
    assert_false(fcl_plan_mma(&nv, &t, because, sizeof because));
    assert_non_null(strstr(because, "attention_mma=0"));

    fill_attention_tiles(&nv);
    const fcl_attention_desc f16 = {.batch = 2, .heads_q = 8, .heads_kv = 2, .len_q = 1000,
                                    .len_kv = 1000, .head_dim = 128, .head_dim_v = 128,
                                    .dtype_q = FCL_DTYPE_F16, .dtype_kv = FCL_DTYPE_F16};
    fcl_attention_launch l;
    assert_false(fcl_plan_attention_mma(&nv, &f16, 1, &l)); /* the kernels were not built */
    nv.attention_mma = 1;
    assert_true(fcl_plan_attention_mma(&nv, &f16, 1, &l));
    assert_int_equal(l.path, FCL_ATTENTION_PATH_MMA);
    assert_true(l.block_q == 128 && l.block_kv == 64 && l.work_group_size == 256 && l.bucket == 1);
    assert_int_equal(l.q_tiles, 8);
    fcl_attention_desc d = f16;
    d.dtype_q = d.dtype_kv = FCL_DTYPE_BF16;
    assert_true(fcl_plan_attention_mma(&nv, &d, 1, &l));
    d.head_dim = d.head_dim_v = 64;
    assert_true(fcl_plan_attention_mma(&nv, &d, 1, &l) && l.bucket == 0 && l.block_q == 128 &&
                l.work_group_size == 128);
    assert_false(fcl_plan_attention_mma(&nv, &f16, 0, &l)); /* rows not at multiples of 8 */
    d = f16;
    d.dtype_q = d.dtype_kv = FCL_DTYPE_F32;
    assert_true(fcl_plan_attention_mma(&nv, &d, 1, &l) && l.mma_kind == FCL_MMA_F32 &&
                l.block_q == 64 && l.block_kv == 32 && l.work_group_size == 128);
    d.precision = FCL_PRECISION_TF32;
    assert_true(fcl_plan_attention_mma(&nv, &d, 1, &l) && l.mma_kind == FCL_MMA_TF32);
    d.head_dim = d.head_dim_v = 64;
    assert_true(fcl_plan_attention_mma(&nv, &d, 1, &l) && l.block_q == 64 && l.block_kv == 64);
    d.dtype_kv = FCL_DTYPE_F16; /* float32 q over f16 K and V: f16's shape, one row tile */
    d.precision = FCL_PRECISION_F32;
    assert_true(fcl_plan_attention_mma(&nv, &d, 1, &l) && l.mma_kind == FCL_MMA_F16_Q32 &&
                l.block_q == 64 && l.block_kv == 64 && l.work_group_size == 128);
    d.head_dim = d.head_dim_v = 128;
    assert_true(fcl_plan_attention_mma(&nv, &d, 1, &l) && l.mma_kind == FCL_MMA_F16_Q32 &&
                l.block_q == 128 && l.work_group_size == 256);
    d.format_k = FCL_KV_Q8_0; /* ... and over coded K beside f16 V: its _kv build */
    assert_true(fcl_plan_attention_mma(&nv, &d, 1, &l) && l.mma_kind == FCL_MMA_F16_Q32 &&
                l.block_q == 128 && l.work_group_size == 256);
    d.format_v = FCL_KV_BF16; /* V in bf16 under float32 q: the portable kernels */
    assert_false(fcl_plan_attention_mma(&nv, &d, 1, &l));
    d.format_v = FCL_KV_FP8_E4M3;
    assert_true(fcl_plan_attention_mma(&nv, &d, 1, &l) && l.mma_kind == FCL_MMA_F16_Q32);
    d.head_dim = d.head_dim_v = 256;
    assert_false(fcl_plan_attention_mma(&nv, &d, 1, &l));
    d.format_k = d.format_v = FCL_KV_FORMAT_DTYPE;
    d.dtype_q = d.dtype_kv = FCL_DTYPE_F16; /* head dim 256: 8 warps of 16 rows, 32 keys */
    d.head_dim = d.head_dim_v = 256;
    assert_true(fcl_plan_attention_mma(&nv, &d, 1, &l) && l.bucket == 2 && l.block_q == 128 &&
                l.block_kv == 32 && l.work_group_size == 256);
    const fcl_attention_desc refused[] = {
        {.batch = 1, .heads_q = 8, .heads_kv = 8, .len_q = 100, .len_kv = 100, .head_dim = 64,
         .head_dim_v = 64, .dtype_q = FCL_DTYPE_F16, .dtype_kv = FCL_DTYPE_BF16},
        {.batch = 1, .heads_q = 8, .heads_kv = 8, .len_q = 100, .len_kv = 100, .head_dim = 576,
         .head_dim_v = 512, .dtype_q = FCL_DTYPE_F16, .dtype_kv = FCL_DTYPE_F16},
        {.batch = 1, .heads_q = 8, .heads_kv = 8, .len_q = 100, .len_kv = 100, .head_dim = 256,
         .head_dim_v = 256},
        {.batch = 1, .heads_q = 8, .heads_kv = 8, .len_q = 100, .len_kv = 100, .head_dim = 64,
         .head_dim_v = 60, .dtype_q = FCL_DTYPE_F16, .dtype_kv = FCL_DTYPE_F16},
        {.batch = 1, .heads_q = 8, .heads_kv = 2, .len_q = 4, .len_kv = 100, .head_dim = 64,
         .head_dim_v = 64, .dtype_q = FCL_DTYPE_F16, .dtype_kv = FCL_DTYPE_F16},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        assert_false(fcl_plan_attention_mma(&nv, &refused[i], 1, &l));
    /* Decoding without a GQA group of 2 or more heads, in any storage type: the shuffle
     * kernel, a key row a 8-lane row group at head dim 64 (16 groups of 8 keys a step). */
    const fcl_attention_desc decode = {.batch = 1, .heads_q = 6, .heads_kv = 2, .len_q = 4,
                                       .len_kv = 5000, .head_dim = 64, .head_dim_v = 64};
    assert_true(fcl_plan_attention_mma(&nv, &decode, 1, &l));
    assert_int_equal(l.path, FCL_ATTENTION_PATH_DECODE_NV);
    assert_true(l.block_q == 1 && l.block_kv == 128 && l.work_group_size == 128 &&
                l.heads_step == 1 && l.q_tiles == 4);
    assert_false(fcl_plan_attention_mma(&nv, &decode, 0, &l)); /* rows not at multiples of 8 */
    /* GQA decoding as rows of a kv head: 16 rows a group, two warps with half the keys each,
     * and key splits that make one wave of work-groups (4 a compute unit at head dim 64). */
    fcl_attention_desc rows = decode;
    rows.heads_q = 2, rows.dtype_q = rows.dtype_kv = FCL_DTYPE_BF16;
    assert_true(fcl_plan_attention_gqa_rows(&nv, &rows, 1, 1, 1, 1, &l));
    assert_true(l.path == FCL_ATTENTION_PATH_MMA && l.gqa_rows && l.block_q == 16 &&
                l.block_kv == 64 && l.work_group_size == 64);
    fcl_attention_desc engine = rows; /* B8 H32/8 at 8K keys, as rows: 64 steps */
    engine.batch = 8, engine.heads_q = engine.heads_kv = 8, engine.len_kv = 8192;
    engine.head_dim = engine.head_dim_v = 128;
    assert_true(fcl_plan_attention_gqa_rows(&nv, &engine, 1, 1, 1, 1, &l));
    assert_true(l.work == 64 && l.splits == 8); /* 132 * 4 / 64 rounded down, not 32 */
    /* K/V in 8-bit formats with f16 q: the 8-bit decode kernel (8 rows, 16 keys a warp, 2
     * warps, one wave of 6 work-groups a compute unit); switched off, the _kv build's rows */
    fcl_attention_desc coded = engine;
    coded.dtype_q = coded.dtype_kv = FCL_DTYPE_F16;
    coded.format_k = FCL_KV_Q8_0, coded.format_v = FCL_KV_FP8_E4M3;
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 1, 1, &l));
    assert_true(l.kv_decode && !l.kv_direct && l.gqa_rows && l.block_q == 8 &&
                l.block_kv == 32 && l.work_group_size == 64 && l.mma_kind == FCL_MMA_F16 &&
                l.splits == 12);
    /* its splits merged in the kernel (the switch on), else by the merge kernel; one split
     * needs no merge; the tensor-core kernel's rows keep the merge kernel */
    assert_true(l.merge_in_kernel);
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 1, 0, &l) && l.kv_decode &&
                !l.merge_in_kernel);
    coded.kv_splits = 1;
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 1, 1, &l) && l.kv_decode &&
                l.splits == 1 && !l.merge_in_kernel);
    coded.kv_splits = 0;
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 0, 1, 1, &l) && !l.kv_decode &&
                l.splits > 1 && !l.merge_in_kernel);
    /* int8 and fp8 K and V with f16 q: the direct build where the rows allow it (16-byte
     * rows, the switch on) at head dims 64 and 128, TOKEN scales or not */
    coded.format_k = FCL_KV_INT8;
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 1, 1, &l) && l.kv_direct);
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 0, 1, &l) && l.kv_decode &&
                !l.kv_direct); /* rows not at multiples of 16 bytes, or the switch off */
    coded.scale_mode_v = FCL_KV_SCALE_TOKEN;
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 1, 1, &l) && l.kv_direct);
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 0, 1, &l) && l.kv_decode &&
                !l.kv_direct);
    coded.dtype_q = FCL_DTYPE_F32; /* float32 q: the staged copies */
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 1, 1, &l) && l.kv_decode &&
                !l.kv_direct);
    coded.dtype_q = FCL_DTYPE_F16;
    coded.format_v = FCL_KV_FP8_E5M2, coded.head_dim = coded.head_dim_v = 256;
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 1, 1, &l) && l.kv_decode &&
                !l.kv_direct);
    coded.scale_mode_v = FCL_KV_SCALE_NONE, coded.head_dim = coded.head_dim_v = 64;
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 1, 1, &l) && l.kv_direct);
    coded.format_v = FCL_KV_Q8_0; /* a block format */
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 1, 1, &l) && l.kv_decode &&
                !l.kv_direct);
    coded.format_v = FCL_KV_FP8_E4M3, coded.head_dim = coded.head_dim_v = 128;
    coded.format_k = FCL_KV_Q8_0;
    coded.dtype_q = FCL_DTYPE_F32; /* float32 q: the kernel's f16q32 build */
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 1, 1, &l) && l.kv_decode &&
                l.mma_kind == FCL_MMA_F16_Q32 && l.block_q == 8);
    assert_false(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 0, 1, 1, &l)); /* no _kv rows build for it */
    coded.dtype_q = FCL_DTYPE_F16;
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 0, 1, 1, &l));
    assert_true(!l.kv_decode && l.gqa_rows && l.block_q == 16);
    /* the 4- and 5-bit ggml formats too */
    static const fcl_kv_format nibbles[] = {FCL_KV_Q4_0, FCL_KV_Q4_1, FCL_KV_Q5_0, FCL_KV_Q5_1,
                                            FCL_KV_IQ4_NL};
    for (size_t i = 0; i < sizeof nibbles / sizeof nibbles[0]; i++) {
        coded.format_k = nibbles[i];
        assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 1, 1, &l) && l.kv_decode);
    }
    coded.mask_type = FCL_MASK_ADD_F16; /* under a mask too */
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 1, 1, &l) && l.kv_decode);
    coded.mask_type = FCL_MASK_NONE;
    coded.format_k = FCL_KV_INT8, coded.head_dim = coded.head_dim_v = 96; /* not the bucket's */
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 1, 1, &l) && !l.kv_decode);
    coded.head_dim = coded.head_dim_v = 128, coded.len_q = 9; /* more rows than 8 */
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 1, 1, &l) && !l.kv_decode);
    assert_int_equal(fcl_plan_mma_fixed(&coded, &l), 0); /* the GQA rows: their _kv build */
    /* The 8-bit decode kernel over K and V in one of those formats: the staged build for it,
     * but where the direct build takes the call */
    coded.len_q = 1, coded.format_k = coded.format_v = FCL_KV_Q4_0;
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 1, 1, &l) && l.kv_decode);
    assert_int_equal(fcl_plan_mma_fixed(&coded, &l), 2);
    coded.format_k = coded.format_v = FCL_KV_Q8_0;
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 1, 1, &l) && l.kv_decode);
    assert_int_equal(fcl_plan_mma_fixed(&coded, &l), 1);
    /* ... its registers capped so that 6 work-groups of 2 warps fit 65536 (168, a multiple of
     * 8), at head dim 256 (4 work-groups an SM leave 256: no cap) not */
    assert_int_equal(fcl_plan_kv_decode_register_cap(65536, 0), 168);
    assert_int_equal(fcl_plan_kv_decode_register_cap(65536, 1), 168);
    assert_int_equal(fcl_plan_kv_decode_register_cap(65536, 2), 0);
    assert_int_equal(fcl_plan_kv_decode_register_cap(32768, 1), 80);
    assert_int_equal(fcl_plan_kv_decode_register_cap(0, 1), 0); /* not reported */
    coded.dtype_q = FCL_DTYPE_F32;
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 1, 1, &l) && l.kv_decode);
    assert_int_equal(fcl_plan_mma_fixed(&coded, &l), 1);
    coded.dtype_q = FCL_DTYPE_F16, coded.head_dim = coded.head_dim_v = 64;
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 1, 1, &l) && l.kv_decode);
    assert_int_equal(fcl_plan_mma_fixed(&coded, &l), 1);
    coded.format_k = coded.format_v = FCL_KV_INT8;
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 1, 1, &l) && l.kv_direct);
    assert_int_equal(fcl_plan_mma_fixed(&coded, &l), 0);
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 0, 1, &l) && !l.kv_direct);
    assert_int_equal(fcl_plan_mma_fixed(&coded, &l), 5);
    coded.format_v = FCL_KV_Q8_0; /* two formats: the build for any */
    assert_true(fcl_plan_attention_gqa_rows(&nv, &coded, 1, 1, 0, 1, &l) && l.kv_decode);
    assert_int_equal(fcl_plan_mma_fixed(&coded, &l), 0);
    coded.head_dim = coded.head_dim_v = 128;
    /* Prefill over K and V in one of the formats with builds of their own: that build; over
     * two formats, the _kv build */
    coded.len_q = 1000;
    for (int i = 0; i < FCL_MMA_FIXED; i++) {
        coded.format_k = coded.format_v = fcl_mma_fixed_formats[i];
        assert_true(fcl_plan_attention_mma(&nv, &coded, 1, &l) && !l.gqa_rows);
        assert_int_equal(fcl_plan_mma_fixed(&coded, &l), i + 1);
    }
    coded.format_v = FCL_KV_Q8_0;
    assert_true(fcl_plan_attention_mma(&nv, &coded, 1, &l) && fcl_plan_mma_fixed(&coded, &l) == 0);
    coded.format_k = coded.format_v = FCL_KV_Q4_1;
    assert_true(fcl_plan_attention_mma(&nv, &coded, 1, &l) && fcl_plan_mma_fixed(&coded, &l) == 0);
    assert_true(fcl_plan_attention_mma(&nv, &f16, 1, &l) && !l.gqa_rows);
    rows.dtype_q = rows.dtype_kv = FCL_DTYPE_F32; /* float32: the portable decode kernel */
    assert_false(fcl_plan_attention_gqa_rows(&nv, &rows, 1, 1, 1, 1, &l));
    rows.dtype_kv = FCL_DTYPE_F16; /* float32 q over f16 K and V: its build's rows */
    assert_true(fcl_plan_attention_gqa_rows(&nv, &rows, 1, 1, 1, 1, &l) && l.gqa_rows &&
                l.mma_kind == FCL_MMA_F16_Q32 && l.block_q == 16);
    rows.dtype_kv = FCL_DTYPE_BF16; /* other mixed storage */
    assert_false(fcl_plan_attention_gqa_rows(&nv, &rows, 1, 1, 1, 1, &l));
}

/* The device table, and FLASHCL_TUNE's overrides on top of it. */
static void test_tuning(void **state)
{
    (void)state;
    fcl_device_info nv = nvidia_like(), cpu = pocl_like();
    fcl_tuning t;
    assert_int_equal(fcl_tuning_for(NULL, &nv, NULL, &t), FCL_SUCCESS);
    assert_string_equal(t.source, "NVIDIA GPU defaults");
    assert_int_equal(t.softmax_work_group, 256);
    assert_int_equal(t.vector_width, 4);
    assert_int_equal(t.attention_tile, -1);
    assert_int_equal(fcl_tuning_for(NULL, &cpu, "", &t), FCL_SUCCESS);
    assert_string_equal(t.source, "x86 CPU defaults");
    assert_int_equal(t.vector_width, 16); /* the device's preferred width */
    assert_int_equal(t.cache_prefetch, 1);
    fcl_device_info mesa = cpu; /* Mesa's rusticl: SPIR-V, which has no prefetch */
    mesa.vendor_id = 0;
    fcl_tuning mesa_t;
    assert_int_equal(fcl_tuning_for(NULL, &mesa, NULL, &mesa_t), FCL_SUCCESS);
    assert_string_equal(mesa_t.source, "CPU defaults");
    assert_int_equal(mesa_t.cache_prefetch, 0);
    assert_int_equal(mesa_t.vector_width, t.vector_width);
    assert_int_equal(cpu.softmax_vector_width, 16);

    assert_int_equal(t.softmax_rows, 1);
    assert_int_equal(t.attention_rows, 1);
    assert_int_equal(
        fcl_tuning_for(NULL, &cpu, "softmax_wg=256,vector_width=4,attention_tile=8x16,softmax_rows=0", &t),
        FCL_SUCCESS);
    assert_int_equal(t.softmax_rows, 0);
    assert_string_equal(t.source, "x86 CPU defaults + FLASHCL_TUNE");
    assert_int_equal(t.softmax_work_group, 256);
    assert_int_equal(t.vector_width, 4);
    size_t bq, bk;
    fcl_attention_tile_shape(t.attention_tile, &bq, &bk);
    assert_true(bq == 8 && bk == 16);
    /* The device still caps the work-group. */
    fcl_device_info small = cpu;
    small.max_work_group_size = 100;
    assert_int_equal(fcl_plan_work_group_size(&small, t.softmax_work_group), 64);
    assert_int_equal(fcl_tuning_for(NULL, &cpu, "attention_rows=0", &t), FCL_SUCCESS);
    assert_int_equal(t.attention_rows, 0);
    assert_int_equal(t.attention_group, 0);
    assert_int_equal(fcl_tuning_for(NULL, &cpu, "attention_group=32", &t), FCL_SUCCESS);
    assert_int_equal(t.attention_group, 32);

    assert_int_equal(t.attention_mma, 1);
    assert_int_equal(t.softmax_nv, 1);
    assert_int_equal(fcl_tuning_for(NULL, &cpu, "softmax_nv=0", &t), FCL_SUCCESS);
    assert_int_equal(t.softmax_nv, 0);
    /* The tile kernel's switches: the device table's, then FLASHCL_TUNE's. */
    assert_int_equal(t.attention_prefetch, 0);
    assert_int_equal(t.attention_prefetch_items, 32);
    assert_int_equal(fcl_tuning_for(NULL, &nv, NULL, &t), FCL_SUCCESS);
    assert_true(t.attention_prefetch && t.attention_pv_vec);
    assert_int_equal(t.attention_prefetch_items, 48);
    assert_int_equal(fcl_tuning_for(NULL, &nv, "attention_prefetch=0,attention_pv_vec=0,"
                                                "attention_prefetch_items=64", &t),
                     FCL_SUCCESS);
    assert_true(!t.attention_prefetch && !t.attention_pv_vec);
    assert_int_equal(t.attention_prefetch_items, 64);
    const char *bad[] = {"softmax_wg=100", "vector_width=2", "attention_tile=12x12", "colour=blue",
                         "attention_mma=2", "softmax_nv=2",
                         "softmax_rows=2", "attention_rows=x", "attention_group=8",
                         "softmax_wg", "softmax_wg=64x", "vector_width=4,,zz=1",
                         "attention_prefetch=2", "attention_pv_vec=-1",
                         "attention_prefetch_items=40", "attention_prefetch_items=0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(fcl_tuning_for(NULL, &cpu, bad[i], &t), FCL_ERROR_INVALID_ARGUMENT);
        assert_non_null(strstr(fcl_context_last_error(NULL), "FLASHCL_TUNE"));
    }
    /* The sentence names every key and value, from the one table the parser reads. */
    const char *text = fcl_context_last_error(NULL);
    assert_non_null(strstr(text, "softmax_wg=<a power of two up to 1024>, vector_width=<4, 8 or 16>"));
    assert_non_null(strstr(text, "attention_prefetch=<0 or 1>, "
                                 "attention_prefetch_items=<16, 32, 48 or 64>"));
    assert_non_null(strstr(text, "attention_tile=<one of 64x32, 64x16, 32x32, 16x32, 32x16, 16x16, "
                                 "8x16, 8x8, 4x8>, separated by commas"));
}

/* A context's tuning: given over the defaults alone, else stored then FLASHCL_TUNE; on POCL 5.0,
 * whose compiler aborts on the tile and decode kernels, tiles are refused with a sentence and
 * a stored entry asking for them is ignored. */
static void test_tuning_resolve(void **state)
{
    (void)state;
    fcl_tuning t;
    fcl_device_info pocl = pocl_like();
    snprintf(pocl.platform_name, sizeof pocl.platform_name, "Portable Computing Language");
    snprintf(pocl.driver_version, sizeof pocl.driver_version, "5.0+debian");
    assert_int_equal(fcl_tuning_resolve(NULL, &pocl, NULL, "vector_width=8", "softmax_wg=8", &t),
                     FCL_SUCCESS);
    assert_int_equal(t.vector_width, 8);
    assert_int_equal(t.softmax_work_group, 8);
    assert_true(t.attention_rows);
    assert_string_equal(t.source, "x86 CPU defaults + tuned + FLASHCL_TUNE");
    assert_int_equal(fcl_tuning_resolve(NULL, &pocl, "", "vector_width=8", "softmax_wg=8", &t),
                     FCL_SUCCESS);
    assert_int_equal(t.vector_width, 16);
    assert_string_equal(t.source, "x86 CPU defaults");
    /* Tiles on POCL 5.0: refused where asked for, ignored where stored. */
    assert_int_equal(fcl_tuning_resolve(NULL, &pocl, NULL, NULL, "attention_rows=0", &t),
                     FCL_ERROR_UNSUPPORTED);
    assert_non_null(strstr(fcl_context_last_error(NULL), "attention_rows=0 (x86 CPU defaults + "
                                                          "FLASHCL_TUNE): POCL 5.0+debian's"));
    assert_int_equal(fcl_tuning_resolve(NULL, &pocl, "attention_rows=0", NULL, NULL, &t),
                     FCL_ERROR_UNSUPPORTED);
    assert_int_equal(fcl_tuning_resolve(NULL, &pocl, NULL, "attention_rows=0,vector_width=8", NULL,
                                        &t),
                     FCL_SUCCESS);
    assert_true(t.attention_rows);
    assert_int_equal(t.vector_width, 16);
    /* Other POCL versions run them (3.1 in CI). */
    snprintf(pocl.driver_version, sizeof pocl.driver_version, "3.1+debian");
    assert_int_equal(fcl_tuning_resolve(NULL, &pocl, "attention_rows=0", NULL, NULL, &t),
                     FCL_SUCCESS);
    assert_false(t.attention_rows);
}

/* GQA decoding rewritten as rows of a kv head (fcl_attention_gqa_rows, which the NVIDIA
 * kernels run): the group's heads become the rows, and sinks, ALiBi and the window stay, read
 * a row's head and position through FA_FLAG_HEAD_ROWS; what gives each query its own
 * position (top-left causality, query_offsets) keeps the call as it is. */
static void test_gqa_rows_rewrite(void **state)
{
    (void)state;
    const fcl_attention_desc d = {.batch = 2, .heads_q = 32, .heads_kv = 8, .len_q = 1,
                                  .len_kv = 1000, .head_dim = 64, .window = 1,
                                  .window_left = 127, .causal = FCL_CAUSAL_BOTTOM_RIGHT};
    const fcl_attention_given with = {.sinks = 1, .alibi_slopes = 1};
    fcl_attention_problem pr, rows;
    assert_int_equal(fcl_attention_resolve(NULL, &d, &with, &pr), FCL_SUCCESS);
    assert_int_equal(fcl_attention_gqa_rows(&pr, &rows), 1);
    const cl_uint kept = FA_FLAG_SINKS | FA_FLAG_ALIBI | FA_FLAG_WINDOW | FA_FLAG_HEAD_ROWS;
    assert_int_equal(rows.params.flags & kept, kept);
    assert_int_equal(rows.params.flags & (FA_FLAG_CAUSAL | FA_FLAG_BOTTOM_RIGHT), 0);
    assert_true(rows.params.heads_q == 8 && rows.params.len_q == 4 && rows.d.len_q == 4);
    assert_true(rows.params.q_head == 4 * pr.params.q_head && rows.params.q_token == pr.params.q_head);
    assert_int_equal(pr.params.flags & FA_FLAG_HEAD_ROWS, 0); /* the call itself: never */

    fcl_attention_desc top_left = d;
    top_left.causal = FCL_CAUSAL_TOP_LEFT;
    assert_int_equal(fcl_attention_resolve(NULL, &top_left, &with, &pr), FCL_SUCCESS);
    assert_int_equal(fcl_attention_gqa_rows(&pr, &rows), 0);
    const fcl_attention_given offsets = {.query_offsets = 1};
    assert_int_equal(fcl_attention_resolve(NULL, &d, &offsets, &pr), FCL_SUCCESS);
    assert_int_equal(fcl_attention_gqa_rows(&pr, &rows), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nvidia_like),   cmocka_unit_test(test_amd_like),
        cmocka_unit_test(test_kernel_limits_win), cmocka_unit_test(test_pocl_like),
        cmocka_unit_test(test_forced_choices), cmocka_unit_test(test_loop_iteration_cap),
        cmocka_unit_test(test_attention_tiles), cmocka_unit_test(test_attention_splits),
        cmocka_unit_test(test_attention_refit),
        cmocka_unit_test(test_any_limits_give_runnable_plans),
        cmocka_unit_test(test_local_mem_count_is_fitted), cmocka_unit_test(test_mma_path_rules),
        cmocka_unit_test(test_tuning), cmocka_unit_test(test_tuning_resolve),
        cmocka_unit_test(test_softmax_nv_plan), cmocka_unit_test(test_gqa_rows_rewrite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
