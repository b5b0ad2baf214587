/* The on-disk program-binary cache: where it lives, what names an entry, and reading and
 * writing entries. A file is named by a hash of everything that determines the binary
 * (source, options, platform, device, driver) and repeats that identity inside, with a
 * checksum of the binary, so a stale, truncated or corrupt file is detected and rebuilt,
 * never trusted. */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FCL_CACHE_MAGIC "FLASHCL1"
#define FCL_CACHE_MAX_FILE (512u << 20)

uint64_t fcl_hash(uint64_t h, const void *data, size_t n)
{
    /* FNV-1a over 8-byte words (bytes for the tail), then a final mix: context creation
     * hashes the whole source and the cached binary, megabytes, on every start. */
    const unsigned char *p = data;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h ^ (h >> 32);
}


/* Creates dir and its parents; an existing directory is fine. */
static int make_dirs(const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return -1;
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return (mkdir(path, 0755) == 0 || errno == EEXIST) ? 0 : -1;
}

const char *fcl_cache_dir(const char *requested, char *buf, size_t cap)
{
    if (!requested)
        requested = getenv("FLASHCL_CACHE_DIR");
    if (requested)
        return *requested ? requested : NULL;
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && *xdg)
        n = snprintf(buf, cap, "%s/flashcl", xdg);
    else if (home && *home)
        n = snprintf(buf, cap, "%s/.cache/flashcl", home);
    else
        return NULL;
    return (n > 0 && (size_t)n < cap) ? buf : NULL;
}

char *fcl_cache_identity(const fcl_device_info *info, const char *options, const char *source)
{
#define FCL_IDENTITY_FORMAT                                                                    \
    "flashcl %s\noptions %s\nplatform %s\ndevice %s\nversion %s\ndriver %s\nsource %zu %016llx\n"
#define FCL_IDENTITY_ARGS                                                                      \
    fcl_version_string(), options, info->platform_name, info->name, info->device_version,     \
        info->driver_version, strlen(source),                                                 \
        (unsigned long long)fcl_hash(FCL_HASH_INIT, source, strlen(source))
    int n = snprintf(NULL, 0, FCL_IDENTITY_FORMAT, FCL_IDENTITY_ARGS);
    char *text = n < 0 ? NULL : malloc((size_t)n + 1);
    if (text)
        snprintf(text, (size_t)n + 1, FCL_IDENTITY_FORMAT, FCL_IDENTITY_ARGS);
    return text;
#undef FCL_IDENTITY_FORMAT
#undef FCL_IDENTITY_ARGS
}

/* Whether the driver may be asked for program binaries. POCL 5.0 (LLVM 16) aborts inside
 * clGetProgramInfo(CL_PROGRAM_BINARIES) for this program ("region_entry_barrier != NULL");
 * POCL 3.1 does not, and POCL caches compiled programs itself. So flashcl's cache is used
 * with POCL up to 3.x only. */
int fcl_cache_usable(const fcl_device_info *info)
{
    return fcl_pocl_major(info) <= 3;
}

int fcl_cache_path(char *buf, size_t cap, const char *dir, const char *identity)
{
    unsigned long long h = fcl_hash(FCL_HASH_INIT, identity, strlen(identity));
    int n = snprintf(buf, cap, "%s/%016llx.bin", dir, h);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

static int read_u64(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    if ((size_t)(end - *p) < sizeof *v)
        return -1;
    memcpy(v, *p, sizeof *v);
    *p += sizeof *v;
    return 0;
}

unsigned char *fcl_cache_load(const char *path, const char *identity, size_t *binary_len)
{
    unsigned char *file = NULL, *binary = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0)
        goto done;
    long size = ftell(f);
    if (size <= 0 || (unsigned long)size > FCL_CACHE_MAX_FILE || fseek(f, 0, SEEK_SET) != 0)
        goto done;
    file = malloc((size_t)size);
    if (!file || fread(file, 1, (size_t)size, f) != (size_t)size)
        goto done;

    const unsigned char *p = file, *end = file + size;
    uint64_t id_len, bin_len, bin_hash;
    size_t magic_len = strlen(FCL_CACHE_MAGIC);
    if ((size_t)(end - p) < magic_len || memcmp(p, FCL_CACHE_MAGIC, magic_len) != 0)
        goto done;
    p += magic_len;
    if (read_u64(&p, end, &id_len) || id_len != strlen(identity) ||
        (uint64_t)(end - p) < id_len || memcmp(p, identity, id_len) != 0)
        goto done;
    p += id_len;
    if (read_u64(&p, end, &bin_len) || read_u64(&p, end, &bin_hash) || bin_len == 0 ||
        (uint64_t)(end - p) != bin_len || fcl_hash(FCL_HASH_INIT, p, bin_len) != bin_hash)
        goto done;
    binary = malloc(bin_len);
    if (binary) {
        memcpy(binary, p, bin_len);
        *binary_len = bin_len;
    }
done:
    free(file);
    fclose(f);
    return binary;
}

int fcl_write_atomic(const char *dir, const char *path, const fcl_piece *pieces, int n)
{
    char tmp[4200];
    static unsigned counter;
    if (make_dirs(dir) != 0)
        return errno ? errno : EIO;
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(),
                 __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED)) >= (int)sizeof tmp)
        return ENAMETOOLONG;
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return errno ? errno : EIO;
    int ok = 1;
    for (int i = 0; i < n && ok; i++)
        ok = fwrite(pieces[i].data, 1, pieces[i].size, f) == pieces[i].size;
    ok = (fclose(f) == 0) && ok;
    if (ok && rename(tmp, path) == 0)
        return 0;
    const int err = errno ? errno : EIO;
    remove(tmp);
    return err;
}

void fcl_cache_store(const char *dir, const char *path, const char *identity,
                        const unsigned char *binary, size_t binary_len)
{
    uint64_t id_len = strlen(identity), bin_len = binary_len;
    uint64_t bin_hash = fcl_hash(FCL_HASH_INIT, binary, binary_len);
    const fcl_piece file[] = {{FCL_CACHE_MAGIC, strlen(FCL_CACHE_MAGIC)},
                              {&id_len, sizeof id_len},
                              {identity, id_len},
                              {&bin_len, sizeof bin_len},
                              {&bin_hash, sizeof bin_hash},
                              {binary, binary_len}};
    (void)fcl_write_atomic(dir, path, file, (int)(sizeof file / sizeof file[0]));
}
