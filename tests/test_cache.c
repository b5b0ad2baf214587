/* The on-disk program cache: cold build, warm load, and files that must not be trusted. */
#define _XOPEN_SOURCE 700 /* truncate */
#include "support.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char cache_dir[256];

/* Creates a context on cache_dir (or dir), checks it computes softmax correctly, and
 * returns whether its kernels (softmax's, built on that first call) came from the cache. */
static int create_and_check(const char *dir)
{
    fcl_context_options opts = {.cache_dir = dir};
    fcl_context *ctx = NULL;
    fcl_status s = fcl_context_create(&opts, &ctx);
    if (s != FCL_SUCCESS)
        fail_msg("context: %s: %s", fcl_status_string(s), fcl_context_last_error(NULL));
    /* A small softmax through the loaded program proves the binary works. */
    const float in[4] = {1, 3, 5, 2};
    float out[4], lse;
    fcl_softmax_desc d = {.rows = 1, .cols = 4};
    assert_int_equal(fcl_softmax_host(ctx, &d, in, NULL, out, &lse), FCL_SUCCESS);
    assert_float_equal(lse, 5.0 + 0.18518, 1e-4); /* log(1.20344) */
    fcl_device_info info;
    assert_int_equal(fcl_context_device_info(ctx, &info), FCL_SUCCESS);
    fcl_context_destroy(ctx);
    return info.program_from_cache;
}

/* Cache files in cache_dir; the last one's path in path. */
static int count_cache_files(char *path, size_t cap)
{
    DIR *dir = opendir(cache_dir);
    struct dirent *e;
    int count = 0;
    assert_non_null(dir);
    while ((e = readdir(dir)) != NULL)
        if (strstr(e->d_name, ".bin")) {
            count++;
            snprintf(path, cap, "%s/%s", cache_dir, e->d_name);
        }
    closedir(dir);
    return count;
}

/* The single cache file in cache_dir (fails when there is not exactly one). */
static void cache_file(char *path, size_t cap) { assert_int_equal(count_cache_files(path, cap), 1); }

static long file_size(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static void corrupt_byte(const char *path, long at)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    return support_temp_dir(cache_dir, sizeof cache_dir, "flashcl-cache-test");
}

static int teardown(void **state)
{
    (void)state;
    support_remove_dir(cache_dir);
    return 0;
}

/* Where the driver's binaries cannot be used, the cache stays empty and is never read. */
static int cache_usable(void)
{
    fcl_context *ctx = NULL;
    fcl_device_info info;
    fcl_context_options opts = {.cache_dir = ""};
    assert_int_equal(fcl_context_create(&opts, &ctx), FCL_SUCCESS);
    fcl_context_device_info(ctx, &info);
    fcl_context_destroy(ctx);
    return info.program_cache_usable;
}

static void test_cold_then_warm(void **state)
{
    (void)state;
    char path[512];
    if (!cache_usable()) {
        assert_false(create_and_check(cache_dir));
        assert_false(create_and_check(cache_dir));
        DIR *dir = opendir(cache_dir);
        struct dirent *e;
        while (dir && (e = readdir(dir)) != NULL)
            assert_true(e->d_name[0] == '.'); /* nothing was written */
        if (dir)
            closedir(dir);
        return;
    }
    assert_false(create_and_check(cache_dir)); /* cold: compiled and stored */
    cache_file(path, sizeof path);
    assert_true(create_and_check(cache_dir)); /* warm: loaded */
}

static void test_corrupt_file_is_rebuilt(void **state)
{
    (void)state;
    char path[512];
    if (!cache_usable())
        return; /* no file to corrupt: test_cold_then_warm checks none is written */
    create_and_check(cache_dir);
    cache_file(path, sizeof path);
    long size = file_size(path);
    corrupt_byte(path, size / 2 + 16); /* inside the binary: its checksum fails */
    assert_false(create_and_check(cache_dir));
    assert_int_equal(file_size(path), size); /* rewritten whole */
    assert_true(create_and_check(cache_dir));

    corrupt_byte(path, 20); /* inside the stored identity: not this build's file */
    assert_false(create_and_check(cache_dir));
    assert_true(create_and_check(cache_dir));
}

static void test_truncated_file_is_rebuilt(void **state)
{
    (void)state;
    char path[512];
    if (!cache_usable())
        return; /* as above */
    create_and_check(cache_dir);
    cache_file(path, sizeof path);
    long size = file_size(path);
    assert_int_equal(truncate(path, size - 100), 0);
    assert_false(create_and_check(cache_dir));
    assert_int_equal(file_size(path), size);
    assert_int_equal(truncate(path, 3), 0); /* shorter than the magic */
    assert_false(create_and_check(cache_dir));
    assert_true(create_and_check(cache_dir));
}

static void test_unusable_cache_only_costs_speed(void **state)
{
    (void)state;
    char blocked[600];
    /* A directory that cannot be created: its parent is a regular file. */
    snprintf(blocked, sizeof blocked, "%s/plain-file", cache_dir);
    FILE *f = fopen(blocked, "w");
    assert_non_null(f);
    fclose(f);
    strcat(blocked, "/cache");
    assert_false(create_and_check(blocked));
    /* "" disables the cache: even after a build, nothing is loaded. */
    assert_false(create_and_check(""));
}

/* A kernel build that fails (kernels are built on their first call) makes that call report
 * FCL_ERROR_BUILD_FAILED with the compiler's log, and the next call tries again; the build
 * options are part of the cache key (the broken build is never served from it). */
static void test_build_failure_reports_log(void **state)
{
    (void)state;
    fcl_context_options opts = {.cache_dir = cache_dir};
    fcl_context *ctx = NULL;
    int usable = cache_usable();
    const float in[4] = {1, 3, 5, 2};
    float out[4];
    fcl_softmax_desc d = {.rows = 1, .cols = 4};
    create_and_check(cache_dir);
    /* A function name that becomes a number: a syntax error for any compiler. */
    setenv("FLASHCL_BUILD_OPTIONS", "-Dfcl_stat_merge=12345", 1);
    fcl_status s = fcl_context_create(&opts, &ctx);
    unsetenv("FLASHCL_BUILD_OPTIONS");
    assert_int_equal(s, FCL_SUCCESS);
    for (int call = 0; call < 2; call++) {
        assert_int_equal(fcl_softmax_host(ctx, &d, in, NULL, out, NULL), FCL_ERROR_BUILD_FAILED);
        const char *msg = fcl_context_last_error(ctx);
        assert_non_null(strstr(msg, "build log"));
        assert_non_null(strstr(msg, "error"));
    }
    fcl_context_destroy(ctx);
    assert_int_equal(create_and_check(cache_dir), usable); /* the good binary is still cached */
}

/* Kernels are built on their first call: creating a context stores nothing; cold, the first
 * attention call stores its kernels' programs; warm, it loads them and gives the same
 * result. */
static void test_bucket_program_is_cached(void **state)
{
    (void)state;
    char path[512];
    const int usable = cache_usable();
    const float q[2 * 8] = {1, 0, 2, 0, 0, 1, 0, 0, 0, 3, 1, 0, 1, 0, 0, 2};
    const fcl_attention_desc d = {.batch = 1, .heads_q = 1, .len_q = 2, .len_kv = 2, .head_dim = 8};
    float out[2][2 * 8];
    fcl_context_options opts = {.cache_dir = cache_dir};
    int stored = 0;
    for (int warm = 0; warm < 2; warm++) {
        fcl_context *ctx = NULL;
        fcl_device_info info;
        assert_int_equal(fcl_context_create(&opts, &ctx), FCL_SUCCESS);
        assert_int_equal(count_cache_files(path, sizeof path), stored);
        assert_int_equal(fcl_attention_host(ctx, &d, q, q, q, NULL, out[warm], NULL), FCL_SUCCESS);
        fcl_context_device_info(ctx, &info);
        fcl_context_destroy(ctx);
        if (!warm)
            stored = count_cache_files(path, sizeof path);
        assert_int_equal(stored > 0, usable);
        assert_int_equal(count_cache_files(path, sizeof path), stored);
        assert_int_equal(info.program_from_cache, warm && usable);
    }
    assert_memory_equal(out[0], out[1], sizeof out[0]);
}

/* NVIDIA's self-check (compute capability 8.0 and later), the one program a context builds
 * when it is made: stored cold, and loaded warm, where it passes again. (The tests above turn
 * NVIDIA's kernels off, so that only the kernels they call are cached.) */
static void test_tensor_core_program_is_cached(void **state)
{
    (void)state;
    char path[512];
    unsetenv("FLASHCL_TUNE");
    fcl_context_options opts = {.cache_dir = cache_dir};
    fcl_device_info info;
    for (int warm = 0; warm < 2; warm++) {
        fcl_context *ctx = NULL;
        assert_int_equal(fcl_context_create(&opts, &ctx), FCL_SUCCESS);
        fcl_context_device_info(ctx, &info);
        fcl_context_destroy(ctx);
        assert_int_equal(info.program_from_cache,
                         warm && info.program_cache_usable && info.attention_mma);
        assert_int_equal(count_cache_files(path, sizeof path),
                         info.program_cache_usable && info.attention_mma);
    }
    if (info.nv_compute_capability >= 80)
        assert_true(info.attention_mma);
}

int main(void)
{
    /* Whatever FLASHCL_TUNE the run gives (the gpu_like runs' settings do not apply here),
     * one program: the portable kernels'. */
    setenv("FLASHCL_TUNE", "attention_mma=0", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cold_then_warm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_file_is_rebuilt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated_file_is_rebuilt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unusable_cache_only_costs_speed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_build_failure_reports_log, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bucket_program_is_cached, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tensor_core_program_is_cached, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
