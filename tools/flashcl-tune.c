/* flashcl-tune: measures the kernels' tuning candidates on this device for given shapes,
 * keeps the fastest that pass the float64 check, and stores them with the program cache so
 * that later contexts on this device and driver start from them (fcl_tuning_store). As
 * CLBlast's tuners do, but one pass of coordinate search from the device table's defaults:
 * each key's values in turn, the others as kept so far.
 *
 * Each candidate runs in a process of its own (this program again, with --measure-one): a
 * driver that crashes compiling a candidate (POCL 5.0 aborts on the tile kernels) costs that
 * candidate, not the search. */
#include "tune.h"

#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static const char usage[] =
    "usage: flashcl-tune [-d DEVICE] [--cache-dir DIR] [--softmax RxC]... \n"
    "                    [--attention B,H[/Hkv],Lq,Lk,D[,c]]... [--dtype f32|f16|bf16]\n"
    "                    [--keys k1,k2,...] [--base key=value,...] [--reps N] [--no-store]\n"
    "  Measures each tuning key's values (FLASHCL_TUNE's keys; --keys: which, in order)\n"
    "  on the shapes given (default: a few for the device type), keeps a value where it\n"
    "  passes the float64 check and is over 3% faster, and stores the result for this\n"
    "  device and driver in the program cache's directory (--no-store: only print it).\n"
    "  --base: overrides every candidate starts from and keeps (attention_mma=0 tunes the\n"
    "  portable kernels on NVIDIA). Prints the result as a FLASHCL_TUNE line.\n";

/* Keys searched by default, in order: on GPUs the parameters of the kernels GPUs run (the
 * tiles), on CPUs the switches to the kernels written for CPUs first. */
static const char *const gpu_keys[] = {"softmax_wg", "vector_width", "block_items",
                                       "attention_tile", "attention_group",
                                       "attention_prefetch", "attention_prefetch_items",
                                       "attention_pv_vec"};
static const char *const cpu_keys[] = {"softmax_rows", "softmax_wg", "vector_width",
                                       "attention_rows"};
static const char *const gpu_shapes[][2] = {{"s", "4096x1024"}, {"s", "65536x128"},
                                            {"a", "4,16,2048,2048,64"},
                                            {"a", "4,16,2048,2048,128,c"},
                                            {"a", "8,32/8,1,8192,128"}};
static const char *const cpu_shapes[][2] = {{"s", "4096x128"}, {"s", "256x16384"},
                                            {"a", "1,8,512,512,64"}, {"a", "1,8,512,512,128,c"},
                                            {"a", "4,8/2,1,4096,128"}};

#define MAX_SHAPES 32
#define MAX_KEYS 16
#define MAX_CANDIDATES 256

typedef struct args {
    const char *device, *cache_dir, *base;
    const char *dtype_text;
    const char *measure_line; /* --measure-one: measure this line alone (a child's task) */
    int measure_mask;
    fcl_dtype dtype;
    tune_shape shapes[MAX_SHAPES];
    size_t n_shapes;
    char keys_text[512];
    const char *keys[MAX_KEYS];
    size_t n_keys;
    int reps, store;
} args;

static int bad_usage(const char *what, const char *arg)
{
    fprintf(stderr, "flashcl-tune: %s%s%s\n%s", what, arg ? ": " : "", arg ? arg : "", usage);
    return 0;
}

static int add_shape(args *a, int family, const char *text)
{
    if (a->n_shapes == MAX_SHAPES)
        return bad_usage("too many shapes", text);
    if (!tune_parse_shape(family, text, &a->shapes[a->n_shapes]))
        return bad_usage("not a shape", text);
    a->n_shapes++;
    return 1;
}

static int split_keys(args *a, const char *text)
{
    if (snprintf(a->keys_text, sizeof a->keys_text, "%s", text) >= (int)sizeof a->keys_text)
        return bad_usage("--keys is too long", NULL);
    for (char *k = strtok(a->keys_text, ","); k; k = strtok(NULL, ",")) {
        char value[32];
        if (a->n_keys == MAX_KEYS || !fcl_tuning_value(k, 0, value, sizeof value))
            return bad_usage("not a tuning key (or too many)", k);
        a->keys[a->n_keys++] = k;
    }
    return 1;
}

static int parse_args(int argc, char **argv, args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        if (strcmp(opt, "--no-store") == 0) {
            a->store = 0;
            continue;
        }
        if (strcmp(opt, "-h") == 0 || strcmp(opt, "--help") == 0)
            return bad_usage("help", NULL);
        if (!val)
            return bad_usage("missing value", opt);
        i++;
        if (strcmp(opt, "-d") == 0 || strcmp(opt, "--device") == 0)
            a->device = val;
        else if (strcmp(opt, "--cache-dir") == 0)
            a->cache_dir = val;
        else if (strcmp(opt, "--base") == 0)
            a->base = val;
        else if (strcmp(opt, "--softmax") == 0)
            ok = add_shape(a, TUNE_SOFTMAX, val);
        else if (strcmp(opt, "--attention") == 0)
            ok = add_shape(a, TUNE_ATTENTION, val);
        else if (strcmp(opt, "--keys") == 0)
            ok = split_keys(a, val);
        else if (strcmp(opt, "--reps") == 0)
            a->reps = atoi(val);
        else if (strcmp(opt, "--measure-one") == 0 && i + 1 < argc) { /* MASK LINE */
            a->measure_mask = atoi(val);
            a->measure_line = argv[++i];
        } else if (strcmp(opt, "--dtype") == 0 &&
                   (strcmp(val, "f32") == 0 || strcmp(val, "f16") == 0 || strcmp(val, "bf16") == 0)) {
            a->dtype = val[0] == 'b' ? FCL_DTYPE_BF16 : val[1] == '1' ? FCL_DTYPE_F16 : FCL_DTYPE_F32;
            a->dtype_text = val;
        } else
            return bad_usage("not understood", opt);
        if (!ok)
            return 0;
    }
    return 1;
}

/* The device type's default shapes and keys where none were given. */
static void fill_defaults(args *a, const fcl_device_info *info)
{
    const int cpu = (info->type & CL_DEVICE_TYPE_CPU) != 0;
    if (!a->n_shapes) {
        const char *const(*shapes)[2] = cpu ? cpu_shapes : gpu_shapes;
        const size_t n = cpu ? sizeof cpu_shapes / sizeof cpu_shapes[0]
                             : sizeof gpu_shapes / sizeof gpu_shapes[0];
        for (size_t i = 0; i < n; i++)
            add_shape(a, shapes[i][0][0] == 's' ? TUNE_SOFTMAX : TUNE_ATTENTION, shapes[i][1]);
    }
    if (!a->n_keys) {
        const char *const *keys = cpu ? cpu_keys : gpu_keys;
        a->n_keys = cpu ? sizeof cpu_keys / sizeof cpu_keys[0] : sizeof gpu_keys / sizeof gpu_keys[0];
        memcpy(a->keys, keys, a->n_keys * sizeof *keys);
    }
}

/* The device's info under its default parameters (and the context to store with). */
static fcl_context *open_device(const args *a, fcl_device_info *info)
{
    fcl_context *ctx = NULL;
    const fcl_context_options opts = {.device = a->device, .cache_dir = a->cache_dir,
                                      .tuning = a->base};
    if (fcl_context_create(&opts, &ctx) != FCL_SUCCESS) {
        fprintf(stderr, "flashcl-tune: %s\n", fcl_context_last_error(NULL));
        return NULL;
    }
    fcl_context_device_info(ctx, info);
    return ctx;
}

/* The child's side: one line measured, its outcome on stdout ("passed" and the times, or
 * "wrong" or "unusable"). */
static int measure_one(const args *a)
{
    tune_device dev = {.device = a->device, .cache_dir = a->cache_dir, .dtype = a->dtype,
                       .shapes = a->shapes, .n_shapes = a->n_shapes, .reps = a->reps};
    double ms[MAX_SHAPES] = {0};
    const tune_outcome o = tune_measure_device(&dev, a->measure_line, a->measure_mask, ms);
    tune_device_release(&dev);
    printf("%s", o == TUNE_PASSED ? "passed" : o == TUNE_WRONG ? "wrong" : "unusable");
    for (size_t i = 0; o == TUNE_PASSED && i < a->n_shapes; i++)
        printf(" %.9g", ms[i]);
    printf("\n");
    return 0;
}

/* The parent's side: tune_measure_fn that runs measure_one in a child process. */
typedef struct child_measure {
    const args *a;
    char self[4096];
} child_measure;

static tune_outcome measure_in_child(void *user, const char *tuning, int mask, double *ms)
{
    const child_measure *cm = user;
    const args *a = cm->a;
    char mask_text[16], shape_text[MAX_SHAPES][96], reps[16];
    const char *argv[2 * MAX_SHAPES + 16];
    int n = 0;
    argv[n++] = cm->self;
    if (a->device)
        argv[n++] = "-d", argv[n++] = a->device;
    if (a->cache_dir)
        argv[n++] = "--cache-dir", argv[n++] = a->cache_dir;
    if (a->dtype_text)
        argv[n++] = "--dtype", argv[n++] = a->dtype_text;
    snprintf(reps, sizeof reps, "%d", a->reps);
    argv[n++] = "--reps", argv[n++] = reps;
    for (size_t i = 0; i < a->n_shapes; i++) {
        tune_shape_text(&a->shapes[i], shape_text[i], sizeof shape_text[i]);
        argv[n++] = a->shapes[i].family == TUNE_SOFTMAX ? "--softmax" : "--attention";
        argv[n++] = shape_text[i];
    }
    snprintf(mask_text, sizeof mask_text, "%d", mask);
    argv[n++] = "--measure-one", argv[n++] = mask_text, argv[n++] = tuning;
    argv[n] = NULL;

    int out[2];
    pid_t pid;
    posix_spawn_file_actions_t actions;
    if (pipe(out) != 0)
        return TUNE_UNUSABLE;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    const int spawned = posix_spawn(&pid, cm->self, &actions, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    char reply[4096] = "";
    FILE *from = fdopen(out[0], "r");
    if (spawned == 0 && from && !fgets(reply, sizeof reply, from))
        reply[0] = '\0';
    if (from)
        fclose(from);
    else
        close(out[0]);
    int status = 0;
    if (spawned != 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
        if (spawned == 0 && WIFSIGNALED(status))
            printf("  (the candidate's process died of signal %d)\n", WTERMSIG(status));
        return TUNE_UNUSABLE;
    }
    if (strncmp(reply, "wrong", 5) == 0)
        return TUNE_WRONG;
    if (strncmp(reply, "passed", 6) != 0)
        return TUNE_UNUSABLE;
    char *p = reply + 6;
    for (size_t i = 0; i < a->n_shapes; i++) {
        const double v = strtod(p, &p);
        if (a->shapes[i].family & mask)
            ms[i] = v;
    }
    return TUNE_PASSED;
}

int main(int argc, char **argv)
{
    static args a = {.dtype = FCL_DTYPE_F32, .base = "", .store = 1};
    static char candidates[MAX_CANDIDATES][64];
    static child_measure cm;
    const char *candidate_list[MAX_CANDIDATES];
    fcl_device_info info;
    if (!parse_args(argc, argv, &a))
        return 2;
    if (a.measure_line)
        return measure_one(&a);
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines as they come */
    const ssize_t self_len = readlink("/proc/self/exe", cm.self, sizeof cm.self - 1);
    if (self_len <= 0)
        snprintf(cm.self, sizeof cm.self, "%s", argv[0]);
    cm.a = &a;
    fcl_context *ctx = open_device(&a, &info);
    if (!ctx)
        return 1;
    fill_defaults(&a, &info);
    const size_t n = tune_candidates(&info, a.keys, a.n_keys, candidates, MAX_CANDIDATES);
    for (size_t i = 0; i < n; i++)
        candidate_list[i] = candidates[i];
    printf("flashcl-tune: %s (%s), %zu candidates on %zu shapes:", info.name, info.driver_version,
           n, a.n_shapes);
    for (size_t i = 0; i < a.n_shapes; i++) {
        char text[128];
        tune_describe(&a.shapes[i], text, sizeof text);
        printf("%s %s", i ? "," : "", text);
    }
    printf("\n  time relative to the base (mean over the shapes of its key's kernels):\n");
    tune_result res;
    int rc = 0;
    if (tune_search(a.base, candidate_list, n, a.shapes, a.n_shapes, measure_in_child, &cm,
                    stdout, &res) != 0) {
        fprintf(stderr, "flashcl-tune: the base parameters (\"%s\") did not run or failed the "
                        "float64 check\n", a.base);
        rc = 1;
    } else {
        printf("tried %d (%d failed the check, %d did not run); %.3f of the base's time\n"
               "FLASHCL_TUNE=%s\n", res.tried, res.wrong, res.unusable, res.time, res.line);
        if (a.store && fcl_tuning_store(ctx, res.line) != FCL_SUCCESS) {
            fprintf(stderr, "flashcl-tune: %s\n", fcl_context_last_error(ctx));
            rc = 1;
        } else if (a.store) {
            printf(*res.line ? "stored for %s: later contexts start from it\n"
                             : "the defaults were fastest: nothing stored for %s\n", info.name);
        }
    }
    fcl_context_destroy(ctx);
    return rc;
}
