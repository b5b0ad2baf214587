/* Tuned parameters on disk: the FLASHCL_TUNE line flashcl-tune measured fastest on a device,
 * stored in the program cache's directory so that later contexts on that device start from
 * it. One text file per device and driver, named by a hash of that identity; it repeats the
 * identity and ends with a checksum of everything before it. An entry that is truncated or
 * corrupt, or made for another device, driver or flashcl version, is ignored. */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define TUNED_MAGIC "flashcl tuned parameters 1\n"
#define TUNED_MAX_FILE 8192

/* What an entry is for, as the lines that open the file. */
static int tuned_identity(const fcl_device_info *info, char *buf, size_t cap)
{
    const int n = snprintf(buf, cap, "%sflashcl %s\nplatform %s\ndevice %s\nversion %s\ndriver %s\n",
                           TUNED_MAGIC, fcl_version_string(), info->platform_name, info->name,
                           info->device_version, info->driver_version);
    return n > 0 && (size_t)n < cap ? n : -1;
}

static int tuned_path(const char *dir, const char *identity, char *buf, size_t cap)
{
    unsigned long long h = fcl_hash(FCL_HASH_INIT, identity, strlen(identity));
    const int n = snprintf(buf, cap, "%s/tuned-%016llx.txt", dir, h);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

/* "checksum <16 hex digits>\n" of the bytes before it. */
static void checksum_line(const char *text, size_t len, char out[32])
{
    snprintf(out, 32, "checksum %016llx\n",
             (unsigned long long)fcl_hash(FCL_HASH_INIT, text, len));
}

int fcl_tuned_load(const char *dir, const fcl_device_info *info, char *line, size_t cap)
{
    char identity[1400], path[4200], file[TUNED_MAX_FILE + 1], sum[32];
    line[0] = '\0';
    if (!dir || tuned_identity(info, identity, sizeof identity) < 0 ||
        tuned_path(dir, identity, path, sizeof path) != 0)
        return 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    const size_t len = fread(file, 1, TUNED_MAX_FILE + 1, f);
    fclose(f);
    if (len > TUNED_MAX_FILE)
        return 0;
    file[len] = '\0';
    /* identity, "tuning <line>\n", checksum: nothing else, nothing missing. */
    const size_t id_len = strlen(identity), sum_len = strlen("checksum ") + 17;
    if (len < id_len + sum_len || memcmp(file, identity, id_len) != 0 ||
        strlen(file) != len)
        return 0;
    checksum_line(file, len - sum_len, sum);
    if (strcmp(file + len - sum_len, sum) != 0)
        return 0;
    const char *tuning = file + id_len;
    const size_t tuning_len = len - sum_len - id_len;
    if (tuning_len < strlen("tuning \n") || strncmp(tuning, "tuning ", 7) != 0 ||
        memchr(tuning, '\n', tuning_len) != tuning + tuning_len - 1 || tuning_len - 8 >= cap)
        return 0;
    memcpy(line, tuning + 7, tuning_len - 8);
    line[tuning_len - 8] = '\0';
    return 1;
}

int fcl_tuned_store(const char *dir, const fcl_device_info *info, const char *line)
{
    char identity[1400], path[4200], body[TUNED_MAX_FILE], sum[32];
    const int id_len = tuned_identity(info, identity, sizeof identity);
    if (id_len < 0 || tuned_path(dir, identity, path, sizeof path) != 0)
        return ENAMETOOLONG;
    if (!line || !*line)
        return remove(path) == 0 || errno == ENOENT ? 0 : errno;
    if (strchr(line, '\n'))
        return EINVAL;
    const int n = snprintf(body, sizeof body, "%stuning %s\n", identity, line);
    if (n < 0 || (size_t)n + 32 > sizeof body)
        return ENAMETOOLONG;
    checksum_line(body, (size_t)n, sum);
    const fcl_piece file[] = {{body, (size_t)n}, {sum, strlen(sum)}};
    return fcl_write_atomic(dir, path, file, 2);
}

fcl_status fcl_tuning_store(fcl_context *ctx, const char *tuning)
{
    if (!ctx)
        return fcl_fail(NULL, FCL_ERROR_INVALID_ARGUMENT, "fcl_tuning_store: ctx is NULL");
    fcl_tuning check;
    fcl_tuning_defaults(&ctx->info, &check);
    fcl_status s = fcl_tuning_apply(ctx, &check, tuning, "fcl_tuning_store");
    if (s != FCL_SUCCESS)
        return s;
    if (!ctx->build.has_dir)
        return fcl_fail(ctx, FCL_ERROR_UNSUPPORTED,
                        "fcl_tuning_store: the context has no cache directory (cache_dir \"\", "
                        "or neither XDG_CACHE_HOME nor HOME set) to store tuned parameters in");
    const int err = fcl_tuned_store(ctx->build.cache_dir, &ctx->info, tuning);
    if (err)
        return fcl_fail(ctx, FCL_ERROR_UNSUPPORTED, "fcl_tuning_store: cannot write to %s: %s",
                        ctx->build.cache_dir, strerror(err));
    return FCL_SUCCESS;
}
