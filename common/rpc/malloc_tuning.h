// glibc malloc settings for processes that receive large messages.
#ifndef GRADSTREAM_COMMON_RPC_MALLOC_TUNING_H_
#define GRADSTREAM_COMMON_RPC_MALLOC_TUNING_H_

namespace gradstream::rpc {

// NOTE: [receive memory] Keeps freed memory in the heap for reuse: blocks up
// to 32 MiB (past any message the shard accepts) come from the heap, and up
// to 256 MiB of free memory at a heap's top stays mapped, so gRPC's receive
// slices stop faulting their pages in afresh for every message. The cost:
// that much freed memory may stay in the process. Why, and the measurement:
// docs/design/receive-memory.md; why no other allocator is linked:
// docs/design/allocator-choice.md.
//
// Call once at the start of main(), before threads start. Returns false when
// the allocator refused a setting (not glibc, or a sanitizer's allocator);
// nothing else changes then.
[[nodiscard]] bool KeepFreedMemoryForReuse();

}  // namespace gradstream::rpc

#endif  // GRADSTREAM_COMMON_RPC_MALLOC_TUNING_H_
