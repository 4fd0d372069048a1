// See executor.h.
#include "common/executor.h"

#include <algorithm>
#include <atomic>
#include <memory>

namespace gradstream {

Executor::Executor(int num_threads) {
  if (num_threads < 1) num_threads = 1;
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { Loop(); });
}

Executor::~Executor() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  for (auto& t : threads_) t.join();
}

void Executor::Submit(std::function<void()> fn) {
  absl::MutexLock l(&mu_);
  if (stopping_) return;
  queue_.push_back(std::move(fn));
}

void Executor::ParallelFor(size_t n, size_t max_helpers,
                           const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  // Shared with the helpers, which may start after the caller returned
  // (they then find no item left and touch nothing else).
  struct Work {
    std::function<void(size_t)> fn;
    size_t n = 0;
    std::atomic<size_t> next{0};
    absl::Mutex mu;
    size_t done ABSL_GUARDED_BY(mu) = 0;
  };
  auto work = std::make_shared<Work>();
  work->fn = fn;
  work->n = n;
  auto run = [](Work& w) {
    size_t mine = 0;
    for (size_t i; (i = w.next.fetch_add(1)) < w.n; ++mine) w.fn(i);
    if (mine == 0) return;
    absl::MutexLock l(&w.mu);
    w.done += mine;
  };
  const size_t helpers = std::min({max_helpers, threads_.size(), n - 1});
  for (size_t h = 0; h < helpers; ++h) Submit([work, run] { run(*work); });
  run(*work);
  absl::MutexLock l(&work->mu);
  auto finished = [&work]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(work->mu) {
    return work->done == work->n;
  };
  work->mu.Await(absl::Condition(&finished));
}

void Executor::Loop() {
  for (;;) {
    std::function<void()> fn;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping and drained
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    fn();
  }
}

}  // namespace gradstream
