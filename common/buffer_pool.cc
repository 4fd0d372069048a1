// See buffer_pool.h.
#include "common/buffer_pool.h"

#include <utility>

namespace gradstream {

std::string BufferPool::Take(size_t bytes) {
  absl::MutexLock lock(&mu_);
  size_t best = free_.size();
  for (size_t i = 0; i < free_.size(); ++i) {
    const size_t cap = free_[i].capacity();
    if (cap >= bytes && (best == free_.size() || cap < free_[best].capacity())) best = i;
  }
  if (best == free_.size()) return std::string();
  std::string out = std::move(free_[best]);
  free_[best] = std::move(free_.back());
  free_.pop_back();
  bytes_ -= out.capacity();
  out.clear();  // keeps the capacity
  return out;
}

void BufferPool::Give(std::string buffer) {
  const size_t cap = buffer.capacity();
  if (cap < kMinPooledBytes) return;
  absl::MutexLock lock(&mu_);
  if (bytes_ + cap > max_bytes_) return;
  bytes_ += cap;
  free_.push_back(std::move(buffer));
}

size_t BufferPool::pooled_bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

}  // namespace gradstream
