#include "server/shard/executor.h"

namespace gradstream::shard {

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

}  // namespace gradstream::shard
