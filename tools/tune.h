/* flashcl-tune's parts, shared with its tests: the search over tuning candidates and the
 * measurement of one candidate on a device. Not part of the library. */
#ifndef FLASHCL_TUNE_H
#define FLASHCL_TUNE_H

#include "flashcl.h"

#include <stdint.h>
#include <stdio.h>

/* The kernel families a tuning key acts on, as bits. */
enum { TUNE_SOFTMAX = 1, TUNE_ATTENTION = 2 };

typedef struct tune_shape {
    int family;                     /* TUNE_SOFTMAX or TUNE_ATTENTION */
    size_t rows, cols;              /* softmax */
    size_t batch, heads, heads_kv, len_q, len_kv, head_dim; /* attention (heads_kv 0: heads) */
    int causal;                     /* top-left, as flashcl-bench's */
} tune_shape;

/* "RxC" (softmax) or "B,H[/HKV],LQ,LK,D[,c]" (attention), as flashcl-bench takes them, into
 * s; 0 where not understood. */
int tune_parse_shape(int family, const char *text, tune_shape *s);
/* s as tune_parse_shape reads it. */
void tune_shape_text(const tune_shape *s, char *buf, size_t cap);
void tune_describe(const tune_shape *s, char *buf, size_t cap);

/* The families a key ("key=value" or "key") acts on. */
int tune_key_families(const char *key);
/* line with key=value in place of any value of that key; 0 where out is too short. */
int tune_line_with(const char *line, const char *key_value, char *out, size_t cap);

typedef enum { TUNE_PASSED, TUNE_WRONG, TUNE_UNUSABLE } tune_outcome;
/* Runs the shapes of the families in mask with the tuning line: ms[s] their times. WRONG
 * where a result missed the float64 reference; UNUSABLE where the context or a call
 * failed. */
typedef tune_outcome (*tune_measure_fn)(void *user, const char *tuning, int mask, double *ms);

typedef struct tune_result {
    char line[256];  /* the base and the values kept */
    double time;     /* its time, as a fraction of the base's (mean over the shapes) */
    int tried, wrong, unusable;
} tune_result;

/* A value is kept only where it beats the best so far by more than this (timing noise). */
#define TUNE_MIN_GAIN 0.03

/* One pass of coordinate search from base (measured twice, the faster kept): each candidate "key=value" in turn takes its key's
 * place in the best line so far and is measured on its key's families; it is kept where it
 * passed the check and beat the best by TUNE_MIN_GAIN. Candidates of a family no shape has
 * are skipped. Returns 0, or -1 where the base itself did not pass (res->line empty). */
int tune_search(const char *base, const char *const *candidates, size_t n_candidates,
                const tune_shape *shapes, size_t n_shapes, tune_measure_fn measure, void *user,
                FILE *log, tune_result *res);

/* The candidates worth trying for keys on info's device, "key=value" each, into out (cap
 * entries of 64 characters): the library's values for each key, work-group sizes within the
 * device's limit and at least 4. Returns how many. */
size_t tune_candidates(const fcl_device_info *info, const char *const *keys, size_t n_keys,
                       char (*out)[64], size_t cap);

/* A device to measure on: tune_measure_device's user pointer. */
typedef struct tune_device {
    const char *device, *cache_dir; /* fcl_context_options' */
    fcl_dtype dtype;
    const tune_shape *shapes;
    size_t n_shapes;
    int reps;                       /* calls a timed batch (0: about 50 ms a batch) */
    uint64_t seed;
    void *state;                    /* inputs and references, made on first use */
} tune_device;
tune_outcome tune_measure_device(void *user, const char *tuning, int mask, double *ms);
/* Frees what tune_measure_device made. */
void tune_device_release(tune_device *dev);

#endif
