/* What flashcl_mpi's calls share (mpi/flashcl_mpi.c): errors, validation and agreement across
 * the ranks, each rank's key lengths. Internal to the library. */
#ifndef FLASHCL_MPI_INTERNAL_H
#define FLASHCL_MPI_INTERNAL_H

#include "flashcl_mpi.h"

/* s, with the calling thread's sentence set (printf's format). */
fcl_status mpi_fail(fcl_status s, const char *fmt, ...);
/* A failed flashcl call: its status with the context's sentence after what. */
fcl_status mpi_failed_call(fcl_context *ctx, fcl_status s, const char *what);
/* ctx's OpenCL context and queue. */
fcl_status mpi_cl_of(fcl_context *ctx, cl_context *cl, cl_command_queue *queue);
/* What a rank's arguments must satisfy before any communication. */
fcl_status mpi_check_local(fcl_context *ctx, const fcl_attention_desc *d,
                           const fcl_attention_io *io);
/* Every rank's status, agreed (collective): a failed rank keeps its own, the others get
 * FCL_ERROR_INVALID_ARGUMENT naming the lowest failed rank and stage. */
fcl_status mpi_agree(MPI_Comm comm, fcl_status mine, const char *stage);
/* The ranks agree on the queries' and the output's shapes (collective). */
fcl_status mpi_agree_shapes(MPI_Comm comm, const fcl_attention_desc *d);
/* ... on n (at most 8) values, mine[i] named names[i] (collective). */
fcl_status mpi_agree_values(MPI_Comm comm, const long *mine, const char *const *names, int n);
/* This rank's key count of each sequence, as the kernels clamp them, into len[0 .. batch). */
fcl_status mpi_shard_lengths(fcl_context *ctx, const fcl_attention_desc *d,
                             const fcl_attention_io *io, long *len);
/* Whether the queries' places among a part's keys (offsets[b]; lens[b] keys, NULL: len_kv)
 * change nothing: no window or ALiBi, and causality (if any) hides no key from any query.
 * The part then runs without them: NVIDIA's GQA decoding takes no query_offsets. */
int mpi_places_matter(const fcl_attention_desc *d, const fcl_attention_io *io,
                      const int32_t *offsets, const long *lens);
/* d and io of a part at offsets: query_offsets (a device buffer of them) where they matter,
 * else neither they nor causality. */
void mpi_part_places(fcl_attention_desc *d, fcl_attention_io *io, const int32_t *offsets,
                     const long *lens, cl_mem places);
/* run(ctx, own, d, io, extra) on a duplicate of comm whose MPI errors return (comm keeps its own
 * handler), after clearing the thread's sentence. */
typedef fcl_status (*mpi_call)(fcl_context *ctx, MPI_Comm comm, const fcl_attention_desc *d,
                               const fcl_attention_io *io, void *extra);
fcl_status mpi_on_own_comm(mpi_call run, fcl_context *ctx, MPI_Comm comm,
                           const fcl_attention_desc *d, const fcl_attention_io *io, void *extra);

#endif
