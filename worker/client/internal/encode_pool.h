// A few threads that help the calling thread encode the chunks of one push in
// parallel (chunks have independent encoders and residuals). See
// ClientOptions::encode_threads.
#ifndef GRADSTREAM_WORKER_CLIENT_INTERNAL_ENCODE_POOL_H_
#define GRADSTREAM_WORKER_CLIENT_INTERNAL_ENCODE_POOL_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gradstream::client::internal {

// Thread-safe. The destructor joins the threads.
class EncodePool {
 public:
  explicit EncodePool(int threads);
  ~EncodePool();

  // Calls fn(0) .. fn(n-1), each exactly once, on the pool's threads and the
  // calling thread; returns when all calls returned. `fn` must not block on
  // another Run().
  void Run(size_t n, const std::function<void(size_t)>& fn);

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace gradstream::client::internal

#endif  // GRADSTREAM_WORKER_CLIENT_INTERNAL_ENCODE_POOL_H_
