// See encode_pool.h.
#include "worker/client/internal/encode_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>

namespace gradstream::client::internal {

EncodePool::EncodePool(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

EncodePool::~EncodePool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (auto& t : threads_) t.join();
}

void EncodePool::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !tasks_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (tasks_.empty()) return;  // stopping
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void EncodePool::Run(size_t n, const std::function<void(size_t)>& fn) {
  struct Shared {
    std::atomic<size_t> next{0};
    absl::Mutex mu;
    size_t finished ABSL_GUARDED_BY(mu) = 0;
  };
  auto shared = std::make_shared<Shared>();
  // Every worker, the caller included, takes indices until none are left; a
  // helper that starts late finds nothing to do and returns at once.
  auto work = [shared, n, &fn] {
    size_t done = 0;
    for (size_t i; (i = shared->next.fetch_add(1)) < n;) {
      fn(i);
      ++done;
    }
    absl::MutexLock lock(&shared->mu);
    shared->finished += done;
  };
  const size_t helpers = std::min(threads_.size(), n > 0 ? n - 1 : 0);
  {
    absl::MutexLock lock(&mu_);
    for (size_t h = 0; h < helpers; ++h) tasks_.push_back(work);
  }
  work();
  // Wait for the helpers' calls (they reference `fn`, which lives on our stack).
  absl::MutexLock lock(&shared->mu);
  auto all = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared->mu) { return shared->finished == n; };
  shared->mu.Await(absl::Condition(&all));
}

}  // namespace gradstream::client::internal
