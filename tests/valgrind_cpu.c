/* Preloaded (LD_PRELOAD) by .ci/valgrind.sh, so that the kernels POCL compiles natively also
 * run under valgrind.
 *
 * POCL compiles kernels with LLVM for the CPU it finds, and keys its kernel cache by it.
 * valgrind emulates an older CPU (no AVX-512 on this VM), so under valgrind POCL finds no
 * cached kernel and compiles again, inside valgrind: more than an hour for flashcl's
 * program. This library replaces LLVM's host CPU feature query, which POCL asks, so that:
 * - with FCL_VALGRIND_CPU_RECORD=FILE (run under valgrind), the features valgrind's CPU has
 *   are written to FILE and the process ends there;
 * - with FCL_VALGRIND_CPU_REPLAY=FILE, every feature not in FILE reads as absent, natively
 *   and under valgrind alike. POCL then compiles natively, once, kernels that valgrind runs.
 *
 * It relies on LLVM's StringMap<bool> layout (unchanged from LLVM 10 to 19) and on POCL
 * loading libLLVM. It is a test tool, not part of flashcl. */
#define _GNU_SOURCE /* dl_iterate_phdr */
#include <dlfcn.h>
#include <link.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* llvm::StringMapEntry<bool> (the key's characters follow it) and llvm::StringMapImpl. */
struct feature {
    size_t key_length;
    bool value;
};
struct feature_map {
    struct feature **table;
    unsigned buckets, items, tombstones, item_size;
};
#define TOMBSTONE ((struct feature *)(~(size_t)0 << 3))
#define FEATURES_SYMBOL "_ZN4llvm3sys18getHostCPUFeaturesERNS_9StringMapIbNS_15MallocAllocatorEEE"

static void *llvm;

static int find_llvm(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    if (strstr(info->dlpi_name, "libLLVM"))
        llvm = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
    return llvm != NULL;
}

/* Whether the space-separated list holds the word. */
static bool listed(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = strstr(list, word); p; p = strstr(p + 1, word))
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return true;
    return false;
}

static void fail(const char *what)
{
    fprintf(stderr, "valgrind_cpu: %s\n", what);
    _exit(3);
}

/* llvm::sys::getHostCPUFeatures(StringMap<bool> &), as LLVM 15 exports it. */
bool _ZN4llvm3sys18getHostCPUFeaturesERNS_9StringMapIbNS_15MallocAllocatorEEE(struct feature_map *map)
{
    if (!llvm)
        dl_iterate_phdr(find_llvm, NULL);
    bool (*real)(struct feature_map *) =
        (bool (*)(struct feature_map *))(llvm ? dlsym(llvm, FEATURES_SYMBOL) : NULL);
    if (!real)
        fail("no getHostCPUFeatures in a loaded libLLVM");
    bool ok = real(map);
    const char *record = getenv("FCL_VALGRIND_CPU_RECORD");
    const char *replay = getenv("FCL_VALGRIND_CPU_REPLAY");
    static char list[16384];
    if (replay) {
        FILE *f = fopen(replay, "r");
        size_t n = f ? fread(list, 1, sizeof list - 1, f) : 0;
        if (!f || n == 0)
            fail("cannot read FCL_VALGRIND_CPU_REPLAY");
        list[n] = '\0';
        fclose(f);
    }
    FILE *out = record ? fopen(record, "w") : NULL;
    if (record && !out)
        fail("cannot write FCL_VALGRIND_CPU_RECORD");
    for (unsigned i = 0; i < map->buckets; i++) {
        struct feature *e = map->table[i];
        char key[128];
        if (!e || e == TOMBSTONE)
            continue;
        snprintf(key, sizeof key, "%.*s", (int)e->key_length, (const char *)(e + 1));
        if (out && e->value)
            fprintf(out, "%s ", key);
        if (replay && !listed(list, key))
            e->value = false;
    }
    if (out) {
        fclose(out);
        _exit(0);
    }
    return ok;
}
