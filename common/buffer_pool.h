// A bounded pool of reusable byte buffers for message payloads. A fresh
// 1 MiB std::string per payload costs page faults and zero-filling every
// time (measured on the worker: 64 MiB of fp32 chunks took ~170 ms to push
// with fresh buffers, ~15 ms with recycled ones on the 2-core dev box), so a
// payload handed back once its message is done is the next one's buffer.
// Users: the worker's push and init payloads (worker/client/ps_client.cc).
#ifndef GRADSTREAM_COMMON_BUFFER_POOL_H_
#define GRADSTREAM_COMMON_BUFFER_POOL_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gradstream {

// Thread-safe: any thread may Take and Give.
class BufferPool {
 public:
  // Buffers with less capacity than this are dropped by Give(): small strings
  // are cheap to make (no page faults: malloc serves them from its bins).
  static constexpr size_t kMinPooledBytes = 4096;

  // `max_bytes` bounds the total capacity of the buffers the pool holds (not
  // of those handed out by Take()); 0 disables pooling.
  explicit BufferPool(size_t max_bytes) : max_bytes_(max_bytes) {}

  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // An empty string: the pooled one with the smallest capacity >= `bytes`
  // when there is one (it leaves the pool), otherwise a new empty string with
  // nothing reserved (the caller reserves, or lets its writes grow it, as it
  // would without a pool). The search is linear: a pool holds
  // max_bytes / (payload size) buffers, a few hundred at most.
  std::string Take(size_t bytes);

  // Hands a buffer back for a later Take(). Dropped (freed) when its
  // capacity is below kMinPooledBytes, or when keeping it would take the
  // pooled total past max_bytes -- which a buffer larger than max_bytes by
  // itself always would.
  void Give(std::string buffer);

  // Total capacity of the buffers held now.
  size_t pooled_bytes() const;

 private:
  const size_t max_bytes_;
  mutable absl::Mutex mu_;
  std::vector<std::string> free_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;  // sum of free_'s capacities
};

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_BUFFER_POOL_H_
