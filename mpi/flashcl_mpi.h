/*
 * flashcl_mpi: attention over keys spread across the ranks of an MPI communicator, exact
 * through fcl_attention_merge. A companion library of flashcl, built only where CMake finds
 * MPI; the core library has no MPI dependency.
 *
 * Every call is collective over its communicator: each rank calls it with its own part of
 * the keys and the same shapes. The calls validate before they communicate and agree on the
 * outcome first, so that a rank that refuses its arguments leaves no other waiting in a
 * collective: every rank then returns an error (the failing rank its own, the others
 * FCL_ERROR_INVALID_ARGUMENT naming that rank). After a failure, fcl_mpi_last_error() holds
 * the sentence (the calling thread's own).
 */
#ifndef FLASHCL_MPI_H
#define FLASHCL_MPI_H

#include <flashcl.h>
#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sharded-KV attention (decoding over a cache split by keys across ranks): d and io describe
 * this rank's shard exactly as fcl_attention_run takes them (its K and V, contiguous or
 * paged, in any storage type or K/V format, its per-sequence lengths: any split, empty
 * shards allowed) and the queries, which are the same on every rank. The ranks hold the
 * keys in rank order (rank 0 each sequence's first ones), and the queries are each whole
 * sequence's last len_q positions: causality, windows and ALiBi take the keys' places in
 * the whole sequence (the call sets io->query_offsets from the ranks' lengths). Every rank
 * gets in io->out (and io->lse, where given) the attention of the queries over the union of
 * the shards, as one device holding every key would give it: local attention with its lse,
 * the partials gathered (staged through the host, ctx's queue), then fcl_attention_merge.
 * Blocking. Sinks (io->sinks) count once: give the same on every rank.
 *
 * What this first form takes: out float32 with the default strides of FCL_LAYOUT_BHLD
 * ([batch][heads][len_q][head_dim_v], o_view all zero); not masks, packed queries
 * (cu_seqlens_q) or leftpad_kv (FCL_ERROR_UNSUPPORTED), nor query_offsets of the caller's. */
FCL_API fcl_status fcl_mpi_attention_sharded(fcl_context *ctx, MPI_Comm comm,
                                             const fcl_attention_desc *d,
                                             const fcl_attention_io *io);

/* Host memory that ring calls keep between calls: the page-locked blocks K and V pass
 * through on their way around the ring (MPI need not be device-aware), sized by the largest
 * call that used it. Page-locking is slow (512 MiB: 0.3 s on an H200's driver, more than
 * a step of a 128K-token prefill), so a caller that runs the ring more than once keeps one
 * workspace per context; NULL in a call allocates and frees the blocks within it. One call at
 * a time uses a workspace; destroy it before its context. */
typedef struct fcl_mpi_workspace fcl_mpi_workspace;
FCL_API fcl_status fcl_mpi_workspace_create(fcl_context *ctx, fcl_mpi_workspace **out);
FCL_API void fcl_mpi_workspace_destroy(fcl_mpi_workspace *ws); /* NULL is a no-op */

/* Ring attention (context-parallel prefill): each rank holds a block of the sequences, its
 * queries and the keys and values of the same positions, the blocks in rank order (rank 0
 * each sequence's first tokens); d and io describe this rank's block as fcl_attention_run
 * takes it (its own per-sequence key lengths in seqlens_kv; its len_q queries sit at the
 * last len_q positions of its keys, bottom-right as in one call). The K and V blocks travel
 * around the ring (MPI_Isend / MPI_Irecv through the host, ws's blocks or the call's own, the
 * next block in flight while the current one is computed); each rank's queries get the attention over every rank's
 * keys in io->out (and io->lse), causality, windows and ALiBi at the keys' places in the
 * whole sequences (query_offsets), the partials merged as they arrive
 * (fcl_attention_merge). With causality, a block whose keys all follow a rank's queries is
 * skipped. Every rank's K and V buffers are of one size and d's views apply to each block;
 * K and V in any storage type or format: TOKEN scale buffers travel with their keys (of one
 * size on every rank too), HEAD scales are each rank's own (the same values on every rank);
 * contiguous (not paged or packed) K/V (FCL_ERROR_UNSUPPORTED); otherwise as
 * fcl_mpi_attention_sharded. */
FCL_API fcl_status fcl_mpi_attention_ring(fcl_context *ctx, MPI_Comm comm, fcl_mpi_workspace *ws,
                                          const fcl_attention_desc *d, const fcl_attention_io *io);

/* Ring attention in zig-zag order, balanced under causality: with n ranks each sequence is
 * 2n chunks of equal length, and rank r holds chunks r and 2n - 1 - r, one after the other,
 * as its block (its queries and their keys and values: len_q == len_kv, even, no
 * seqlens_kv). In rank order the last rank computes 2n - 1 times the keys the first does
 * under causality; here every rank meets two chunks' worth of keys a step. io->out and
 * io->lse hold the block's rows in the same order (the first chunk's, then the second's).
 * Otherwise as fcl_mpi_attention_ring. */
FCL_API fcl_status fcl_mpi_attention_ring_zigzag(fcl_context *ctx, MPI_Comm comm,
                                                 fcl_mpi_workspace *ws,
                                                 const fcl_attention_desc *d,
                                                 const fcl_attention_io *io);

/* The sentence of the calling thread's last failed flashcl_mpi call ("" before any). */
FCL_API const char *fcl_mpi_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCL_MPI_H */
