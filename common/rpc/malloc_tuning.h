// glibc malloc settings for processes that receive large messages.
#ifndef GRADSTREAM_COMMON_RPC_MALLOC_TUNING_H_
#define GRADSTREAM_COMMON_RPC_MALLOC_TUNING_H_

namespace gradstream::rpc {

// NOTE: [receive memory] gRPC reads each message into fresh 64 KiB slices
// and protobuf gave each push payload a fresh string (now pooled: see [push
// frames] in server/shard/rpc/internal/worker_frame.h). With glibc's defaults
// freed memory at the top of a heap is handed back to the kernel past 128 KiB
// (the trim threshold, raised only as far as twice the largest mmapped
// block freed) and blocks past the mmap threshold are mmapped afresh, so the
// next message faults its pages in again: a 64 MiB fp32 push cost the shard
// 8,000-18,000 page faults (about one per 4 KiB page received; 26% of its
// time in a perf profile). This keeps freed memory in the heap for reuse:
// blocks up to 32 MiB (glibc's largest mmap threshold, past any message the
// shard accepts) come from the heap, and up to 256 MiB of free memory at a
// heap's top stays mapped. Measured: 0 faults per 64 MiB push after the
// first, and the shard's CPU time per push down 1.44x (with [push frames]
// 1.51x; figures there). The cost: up to that much freed memory stays in the
// process instead of going back to the system. A smaller arena count
// (M_ARENA_MAX 1 or 2) measured no different and is left alone.
//
// NOTE: [allocator choice] Measured against jemalloc 5.3 and tcmalloc
// (gperftools 2.10, tcmalloc_minimal) given by LD_PRELOAD to ps_bench and the
// gs_shard it starts (bench/malloc/compare.sh: 5 paired rounds, 64 MiB fp32
// model, one shard, loopback, a 2-core machine other builds were loading;
// ratio to this tuned glibc in the same round, median [min, max]):
//   tcmalloc: push 0.58x [0.53, 0.64], overlapped step 0.20x [0.11, 0.26],
//             CPU seconds of both processes 0.53x [0.49, 0.66];
//   jemalloc: push 1.27x [0.63, 3.01], step 1.08x [0.41, 1.72], CPU 1.11x.
// With 2-bit pushes of a 16 MiB model (3 rounds) the times were within this
// machine's noise; CPU 0.86x for tcmalloc, 1.14x for jemalloc.
// Decision: jemalloc is out (no faster, far more variable). tcmalloc is
// faster by far on this path, but the figures are from one loaded loopback
// machine, split neither by process nor by glibc's own share, and linking it
// would take the sanitizer builds (TSan/ASan bring their own allocator) off
// the shipped configuration. So nothing links it: this tuning stays the
// default, and bench/malloc/README.md says how to run a process with
// tcmalloc through LD_PRELOAD (KeepFreedMemoryForReuse then tunes a glibc
// heap nobody uses, harmlessly). The next step, if a rerun on an idle
// machine and on the shaped link holds it: link tcmalloc_minimal into
// gs_shard and gs_worker outside the sanitizer builds.
//
// Call once at the start of main(), before threads start. Returns false when
// the allocator refused a setting (not glibc, or a sanitizer's allocator);
// nothing else changes then.
[[nodiscard]] bool KeepFreedMemoryForReuse();

}  // namespace gradstream::rpc

#endif  // GRADSTREAM_COMMON_RPC_MALLOC_TUNING_H_
