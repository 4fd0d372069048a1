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
// Call once at the start of main(), before threads start. Returns false when
// the allocator refused a setting (not glibc, or a sanitizer's allocator);
// nothing else changes then.
[[nodiscard]] bool KeepFreedMemoryForReuse();

}  // namespace gradstream::rpc

#endif  // GRADSTREAM_COMMON_RPC_MALLOC_TUNING_H_
