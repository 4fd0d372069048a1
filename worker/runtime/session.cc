#include "worker/runtime/session.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "glog/logging.h"

namespace gradstream::runtime {

client::StepLoopOptions LoopOptionsFor(const v1::JobSpec& spec) {
  client::StepLoopOptions loop;
  loop.early_pull = spec.consistency().mode() == v1::SYNC;
  return loop;
}

bool SendsInitialParams(InitialValues values, uint32_t rank, uint64_t start_clock) {
  if (start_clock != 0) return false;
  return values == InitialValues::kSameOnEveryWorker || rank == 0;
}

WorkerSession::WorkerSession(client::PsClient* client, SessionOptions options)
    : client_(client), options_(std::move(options)), meter_(options_.loop.env) {
  client::StepLoopHooks hooks;
  hooks.check = options_.check;
  hooks.will_pull = options_.will_pull;
  // Two things end a pull with DATA_LOSS and one answer serves both: a shard
  // that restarted without a checkpoint takes these values (a chunk that
  // has parameters ignores them: the first InitChunk wins), and a published
  // copy that failed its checksum was dropped, so the next pull gets a
  // snapshot.
  hooks.reinit = [this](absl::Span<const absl::Span<float>> held) {
    LOG(WARNING) << "a shard lost its parameters; sending this worker's and pulling again";
    std::vector<absl::Span<const float>> values(held.begin(), held.end());
    return client_->InitParams(values, options_.loop.push_wait);
  };
  loop_ = std::make_unique<client::StepLoop>(client_, options_.loop, std::move(hooks));
}

WorkerSession::~WorkerSession() = default;

absl::Status WorkerSession::Init(uint32_t rank, uint64_t start_clock,
                                 absl::Span<const absl::Span<const float>> params,
                                 absl::Duration timeout) {
  if (!SendsInitialParams(options_.initial_values, rank, start_clock)) return absl::OkStatus();
  return client_->InitParams(params, timeout);
}

absl::Status WorkerSession::Leave(absl::Duration timeout) {
  Env* env = options_.loop.env;
  const absl::Time deadline = env->Now() + timeout;
  loop_->AbandonPull();
  if (absl::Status s = loop_->WaitPushes(timeout); !s.ok()) return s;
  return client_->Leave(std::max(absl::ZeroDuration(), deadline - env->Now()));
}

Progress WorkerSession::ProgressAt(uint64_t clock, bool* new_window) {
  const client::ClientStats stats = client_->stats();
  Progress p = meter_.At(clock, &stats, new_window);
  p.wait_share = static_cast<float>(loop_->wait_share());
  return p;
}

}  // namespace gradstream::runtime
