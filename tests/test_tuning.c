/* Tuning per context and flashcl-tune: fcl_context_options.tuning over the defaults alone;
 * parameters stored with fcl_tuning_store reach later contexts on the device, and a corrupt,
 * foreign, stale or unparsable entry is ignored; the tuner's search never keeps a candidate
 * that failed the float64 check; and the tuner, run on this device, stores parameters whose
 * results are within the tests' tolerance. */
#define _XOPEN_SOURCE 700 /* setenv */
#include "support.h"
#include "tune.h"

#include "internal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[256];

static int make_dir(void **state)
{
    (void)state;
    return support_temp_dir(dir, sizeof dir, "flashcl-tuning-test");
}

static int remove_dir(void **state)
{
    (void)state;
    return support_remove_dir(dir);
}

/* A context in dir with the given tuning (NULL: stored and environment); its info. */
static fcl_device_info info_with(const char *tuning)
{
    fcl_context *ctx = NULL;
    fcl_device_info info;
    const fcl_context_options opts = {.cache_dir = dir, .tuning = tuning};
    assert_int_equal(fcl_context_create(&opts, &ctx), FCL_SUCCESS);
    fcl_context_device_info(ctx, &info);
    fcl_context_destroy(ctx);
    return info;
}

static fcl_status store(const char *cache_dir, const char *tuning)
{
    fcl_context *ctx = NULL;
    const fcl_context_options opts = {.cache_dir = cache_dir, .tuning = ""};
    assert_int_equal(fcl_context_create(&opts, &ctx), FCL_SUCCESS);
    const fcl_status s = fcl_tuning_store(ctx, tuning);
    if (s != FCL_SUCCESS)
        assert_non_null(strstr(fcl_context_last_error(ctx), "fcl_tuning_store"));
    fcl_context_destroy(ctx);
    return s;
}

/* A vector width other than the device's default, to see which parameters a context got. */
static size_t other_width(void) { return support_info.softmax_vector_width == 4 ? 16 : 4; }

static void test_options_and_stored_entry(void **state)
{
    (void)state;
    const size_t width = support_info.softmax_vector_width, other = other_width();
    char line[64];
    snprintf(line, sizeof line, "softmax_wg=8,vector_width=%zu", other);
    fcl_device_info info = info_with(NULL);
    assert_null(strstr(info.tuning, "tuned"));
    assert_int_equal(store(dir, line), FCL_SUCCESS);
    info = info_with(NULL); /* later contexts start from the stored entry */
    assert_int_equal(info.softmax_vector_width, other);
    assert_non_null(strstr(info.tuning, " + tuned"));
    info = info_with(""); /* options.tuning: the defaults alone */
    assert_int_equal(info.softmax_vector_width, width);
    assert_null(strstr(info.tuning, "tuned"));
    info = info_with("vector_width=8");
    assert_int_equal(info.softmax_vector_width, 8);
    assert_non_null(strstr(info.tuning, " + options.tuning"));
    /* FLASHCL_TUNE goes over the stored entry; options.tuning over both. */
    setenv("FLASHCL_TUNE", "vector_width=8", 1);
    info = info_with(NULL);
    assert_int_equal(info.softmax_vector_width, 8);
    assert_non_null(strstr(info.tuning, " + tuned + FLASHCL_TUNE"));
    info = info_with("");
    assert_int_equal(info.softmax_vector_width, width);
    unsetenv("FLASHCL_TUNE");
    /* A bad options.tuning fails the creation with a sentence naming it. */
    fcl_context *ctx = NULL;
    const fcl_context_options bad = {.cache_dir = dir, .tuning = "vector_width=3"};
    assert_int_equal(fcl_context_create(&bad, &ctx), FCL_ERROR_INVALID_ARGUMENT);
    assert_null(ctx);
    assert_non_null(strstr(fcl_context_last_error(NULL), "options.tuning: \"vector_width=3\""));
    /* Removed by NULL. */
    assert_int_equal(store(dir, NULL), FCL_SUCCESS);
    assert_int_equal(info_with(NULL).softmax_vector_width, width);
}

static void test_store_refuses(void **state)
{
    (void)state;
    char line[64];
    snprintf(line, sizeof line, "vector_width=%zu", other_width());
    assert_int_equal(store(dir, line), FCL_SUCCESS);
    const char *bad[] = {"vector_width=3", "colour=blue", "vector_width=8\nsoftmax_wg=4",
                         "vector_width"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(store(dir, bad[i]), FCL_ERROR_INVALID_ARGUMENT);
    /* The entry stored before is untouched. */
    assert_int_equal(info_with(NULL).softmax_vector_width, other_width());
    assert_int_equal(store("", line), FCL_ERROR_UNSUPPORTED); /* no cache directory */
    assert_int_equal(fcl_tuning_store(NULL, line), FCL_ERROR_INVALID_ARGUMENT);
    assert_int_equal(store(dir, ""), FCL_SUCCESS);
}

/* The entry's file in dir (the one tuned-*.txt). */
static void entry_path(char *path, size_t cap)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    path[0] = '\0';
    while (d && (e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "tuned-", 6) == 0)
            snprintf(path, cap, "%s/%s", dir, e->d_name);
    if (d)
        closedir(d);
    assert_true(path[0]);
}

static size_t read_file(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    const size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n;
}

static void write_file(const char *path, const char *text, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, n, f), n);
    fclose(f);
}

/* text with from replaced by to, and its checksum line made right again (an entry that is
 * intact but not for this device, version or key set). */
static size_t rewritten(const char *text, const char *from, const char *to, char *out, size_t cap)
{
    const char *at = strstr(text, from), *sum = strstr(text, "checksum ");
    assert_non_null(at);
    assert_non_null(sum);
    int n = snprintf(out, cap, "%.*s%s%.*s", (int)(at - text), text, to,
                     (int)(sum - at - strlen(from)), at + strlen(from));
    n += snprintf(out + n, cap - (size_t)n, "checksum %016llx\n",
                  (unsigned long long)fcl_hash(FCL_HASH_INIT, out, (size_t)n));
    return (size_t)n;
}

/* from with every character but its first turned into 'x': as long, so that only the
 * identity check can tell the entry is not for this device. */
static void same_length_other(const char *from, char *to, size_t cap)
{
    snprintf(to, cap, "%s", from);
    for (size_t i = 1; to[i] && to[i + 1]; i++)
        to[i] = to[i] == 'x' ? 'y' : 'x';
}

static void test_ignored_entries(void **state)
{
    (void)state;
    const size_t width = support_info.softmax_vector_width;
    char line[64], path[512], good[4096], bad[4096];
    snprintf(line, sizeof line, "softmax_wg=8,vector_width=%zu", other_width());
    assert_int_equal(store(dir, line), FCL_SUCCESS);
    entry_path(path, sizeof path);
    const size_t n = read_file(path, good, sizeof good);
    /* The untouched entry applies (the rewrite below keeps a good one good). */
    write_file(path, bad, rewritten(good, "\ntuning ", "\ntuning ", bad, sizeof bad));
    assert_int_equal(info_with(NULL).softmax_vector_width, other_width());

    /* Intact (the checksum right) but made for another device, version or driver, or with
     * what this version cannot parse. */
    char device[300], other_device[300], version[64], other_version[64], driver[200],
        other_driver[200];
    snprintf(device, sizeof device, "\ndevice %s\n", support_info.name);
    snprintf(version, sizeof version, "\nflashcl %s\n", fcl_version_string());
    snprintf(driver, sizeof driver, "\ndriver %s\n", support_info.driver_version);
    same_length_other(device, other_device, sizeof other_device);
    same_length_other(version, other_version, sizeof other_version);
    same_length_other(driver, other_driver, sizeof other_driver);
    const struct {
        const char *what, *from, *to;
    } intact[] = {{"another device", device, other_device},
                  {"another flashcl version", version, other_version},
                  {"another driver", driver, other_driver},
                  {"a key this version does not know", "\ntuning ", "\ntuning colour=blue,"},
                  {"a bad value", "\ntuning ", "\ntuning vector_width=3,"}};
    for (size_t i = 0; i < sizeof intact / sizeof intact[0]; i++) {
        write_file(path, bad, rewritten(good, intact[i].from, intact[i].to, bad, sizeof bad));
        const fcl_device_info info = info_with(NULL);
        if (info.softmax_vector_width != width || strstr(info.tuning, "tuned"))
            fail_msg("an entry for %s was used", intact[i].what);
    }
    /* Damaged: truncated, one byte changed (still a valid line, but the checksum no longer
     * matches), empty, not text. */
    const size_t lengths[] = {n - 1, n / 2, 0};
    for (size_t i = 0; i < 3; i++) {
        write_file(path, good, lengths[i]);
        assert_int_equal(info_with(NULL).softmax_vector_width, width);
    }
    memcpy(bad, good, n);
    char *digit = strstr(bad, "softmax_wg=8");
    assert_non_null(digit);
    digit[11] = '4';
    write_file(path, bad, n);
    assert_int_equal(info_with(NULL).softmax_vector_width, width);
    memset(bad, 0xa5, sizeof bad);
    write_file(path, bad, sizeof bad);
    assert_int_equal(info_with(NULL).softmax_vector_width, width);
    remove(path);
}

static void test_tuning_values(void **state)
{
    (void)state;
    char value[32], line[64];
    const char *keys[] = {"softmax_wg", "vector_width", "block_items", "block_lanes", "softmax_rows",
                          "attention_rows", "attention_prefetch", "attention_prefetch_items",
                          "attention_pv_vec", "attention_mma", "softmax_nv", "attention_group",
                          "attention_tile"};
    const int counts[] = {11, 3, 8, 11, 2, 2, 2, 4, 2, 2, 2, 3, 9};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        int i = 0;
        for (; fcl_tuning_value(keys[k], i, value, sizeof value); i++) {
            fcl_tuning t;
            snprintf(line, sizeof line, "%s=%s", keys[k], value); /* each one parses */
            assert_int_equal(fcl_tuning_for(NULL, &support_info, line, &t), FCL_SUCCESS);
        }
        assert_int_equal(i, counts[k]);
    }
    assert_false(fcl_tuning_value("colour", 0, value, sizeof value));
    assert_false(fcl_tuning_value("vector_width", -1, value, sizeof value));
    assert_false(fcl_tuning_value("attention_tile", 0, value, 3)); /* too short for "64x32" */
    assert_true(fcl_tuning_value("attention_tile", 0, value, sizeof value));
    assert_string_equal(value, "64x32");
}

static void test_line_with(void **state)
{
    (void)state;
    char out[64];
    assert_true(tune_line_with("", "vector_width=8", out, sizeof out));
    assert_string_equal(out, "vector_width=8");
    assert_true(tune_line_with("softmax_wg=4,vector_width=4,softmax_rows=1", "vector_width=8", out,
                               sizeof out));
    assert_string_equal(out, "softmax_wg=4,softmax_rows=1,vector_width=8");
    /* A key that starts another key's name is another key. */
    assert_true(tune_line_with("attention_rows=1", "attention_rows_x=2", out, sizeof out));
    assert_string_equal(out, "attention_rows=1,attention_rows_x=2");
    assert_false(tune_line_with("softmax_wg=4", "vector_width=8", out, 16));
}

/* A made-up device for the search: each line's outcome and time by the candidate it ends with. */
typedef struct fake {
    int calls, attention_calls;
} fake;

static tune_outcome fake_measure(void *user, const char *tuning, int mask, double *ms)
{
    fake *f = user;
    f->calls++;
    f->attention_calls += (mask & TUNE_ATTENTION) != 0;
    const char *last = strrchr(tuning, ',');
    last = last ? last + 1 : tuning;
    static const struct {
        const char *candidate;
        tune_outcome o;
        double ms;
    } table[] = {{"", TUNE_PASSED, 10.0},
                 {"vector_width=16", TUNE_WRONG, 1.0},   /* fastest, but wrong */
                 {"vector_width=8", TUNE_PASSED, 8.0},   /* kept */
                 {"vector_width=4", TUNE_PASSED, 9.0},
                 {"softmax_wg=64", TUNE_UNUSABLE, 0.5},
                 {"softmax_wg=32", TUNE_PASSED, 7.9},    /* within 3% of 8: not kept */
                 {"softmax_wg=16", TUNE_PASSED, 6.0}};   /* kept */
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(last, table[i].candidate) == 0) {
            ms[0] = table[i].ms;
            return table[i].o;
        }
    fail_msg("measured %s", tuning);
    return TUNE_UNUSABLE;
}

static void test_search_keeps_only_checked(void **state)
{
    (void)state;
    tune_shape shape;
    assert_true(tune_parse_shape(TUNE_SOFTMAX, "64x100", &shape));
    const char *candidates[] = {"vector_width=16", "vector_width=8", "vector_width=4",
                                "attention_tile=16x16", "softmax_wg=64", "softmax_wg=32",
                                "softmax_wg=16"};
    fake f = {0};
    tune_result res;
    assert_int_equal(tune_search("", candidates, 7, &shape, 1, fake_measure, &f, NULL, &res), 0);
    assert_string_equal(res.line, "vector_width=8,softmax_wg=16");
    assert_float_equal(res.time, 0.6, 1e-12);
    assert_int_equal(res.tried, 6); /* no attention shape: its key is not measured */
    assert_int_equal(res.wrong, 1);
    assert_int_equal(res.unusable, 1);
    assert_int_equal(f.attention_calls, 0);
    /* A base that fails the check gives nothing to keep. */
    const char *wrong_base[] = {"vector_width=8"};
    assert_int_equal(tune_search("vector_width=16", wrong_base, 1, &shape, 1, fake_measure, &f,
                                 NULL, &res),
                     -1);
    assert_string_equal(res.line, "");
}

static void test_shapes(void **state)
{
    (void)state;
    tune_shape s;
    assert_true(tune_parse_shape(TUNE_ATTENTION, "4,32/8,1,8192,128", &s));
    assert_int_equal(s.heads_kv, 8);
    assert_false(s.causal);
    assert_true(tune_parse_shape(TUNE_ATTENTION, "1,8,512,512,64,c", &s));
    assert_true(s.causal);
    assert_int_equal(s.heads_kv, 8);
    const char *bad[] = {"1,8,512,512", "1,8/3,512,512,64", "1,8,512,512,64,x", "0,8,1,1,64"};
    for (size_t i = 0; i < 4; i++)
        assert_false(tune_parse_shape(TUNE_ATTENTION, bad[i], &s));
    assert_true(tune_parse_shape(TUNE_SOFTMAX, "4096x128", &s));
    assert_false(tune_parse_shape(TUNE_SOFTMAX, "4096x128x2", &s));
    /* The text a shape is handed on as reads back as the same shape. */
    const char *texts[] = {"4096x128", "4,32/8,1,8192,128", "1,8/8,512,512,64,c"};
    for (size_t i = 0; i < 3; i++) {
        char text[64];
        assert_true(tune_parse_shape(i ? TUNE_ATTENTION : TUNE_SOFTMAX, texts[i], &s));
        tune_shape_text(&s, text, sizeof text);
        assert_string_equal(text, texts[i]);
    }
}

/* The tuner on this device (softmax's vector width, a short search) stores what a later
 * context runs within the tests' tolerance, hard inputs included. */
static void test_tuner_on_device(void **state)
{
    (void)state;
    char candidates[8][64];
    const char *keys[] = {"vector_width"}, *list[8];
    const size_t n = tune_candidates(&support_info, keys, 1, candidates, 8);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++)
        list[i] = candidates[i];
    tune_shape shape;
    assert_true(tune_parse_shape(TUNE_SOFTMAX, "64x1000", &shape));
    /* Measured in the tests' shared program cache; stored in this test's directory. */
    tune_device dev = {.dtype = FCL_DTYPE_F16, .shapes = &shape, .n_shapes = 1, .reps = 2,
                       .seed = 7};
    tune_result res;
    assert_int_equal(tune_search("", list, n, &shape, 1, tune_measure_device, &dev, NULL, &res), 0);
    tune_device_release(&dev);
    assert_int_equal(res.wrong + res.unusable, 0);
    assert_int_equal(res.tried, 3);
    assert_int_equal(store(dir, res.line), FCL_SUCCESS);
    fcl_context *ctx = NULL;
    const fcl_context_options opts = {.cache_dir = dir};
    assert_int_equal(fcl_context_create(&opts, &ctx), FCL_SUCCESS);
    for (fcl_dtype t = FCL_DTYPE_F32; t <= FCL_DTYPE_BF16; t++)
        run_softmax_case_on(ctx, &(softmax_case){.rows = 9, .cols = 1000, .dtype = t,
                                                 .fill = FILL_SPECIAL, .mask = MASK_PER_ROW},
                            NULL);
    fcl_context_destroy(ctx);
    assert_int_equal(store(dir, NULL), FCL_SUCCESS);
}

int main(void)
{
    /* The defaults the tests compare with are the device table's: no FLASHCL_TUNE. */
    unsetenv("FLASHCL_TUNE");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_options_and_stored_entry, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_store_refuses, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_ignored_entries, make_dir, remove_dir),
        cmocka_unit_test(test_tuning_values),
        cmocka_unit_test(test_line_with),
        cmocka_unit_test(test_search_keeps_only_checked),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test_setup_teardown(test_tuner_on_device, make_dir, remove_dir),
    };
    return support_run_tests(tests);
}
