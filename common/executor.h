// A fixed pool of threads running submitted closures in FIFO order, and the
// project's one ParallelFor. The shard decodes and applies pushes on it (so
// gRPC's callback threads never block) and encodes a pull's chunks with
// ParallelFor; the worker's client encodes the chunks of one push with
// ParallelFor (ClientOptions::encode_threads).
#ifndef GRADSTREAM_COMMON_EXECUTOR_H_
#define GRADSTREAM_COMMON_EXECUTOR_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gradstream {

// Thread-safe. The destructor runs what was already submitted, then joins.
class Executor {
 public:
  // At least one thread, whatever `num_threads` says.
  explicit Executor(int num_threads);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Never blocks; runs `fn` on a pool thread. After shutdown began, runs nothing.
  void Submit(std::function<void()> fn);

  // Runs fn(0) .. fn(n-1) on the calling thread and on up to `max_helpers`
  // pool threads that are free, and returns once every call returned. Safe
  // from a pool thread: the caller works through the items itself and only
  // waits for items already running, so it never waits on a queued task.
  // `fn` must be thread-safe; it runs on whichever thread takes an item.
  void ParallelFor(size_t n, size_t max_helpers, const std::function<void(size_t)>& fn);

  size_t num_threads() const { return threads_.size(); }

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_EXECUTOR_H_
