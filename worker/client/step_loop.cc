// StepLoop: see [step loop] in step_loop.h.
#include "worker/client/step_loop.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/env/env.h"
#include "common/status.h"

namespace gradstream::client {

StepLoop::StepLoop(PsClient* client, StepLoopOptions options, StepLoopHooks hooks)
    : client_(client),
      options_(options),
      hooks_(std::move(hooks)),
      num_tensors_(static_cast<uint32_t>(client->shard_map().tensors.size())),
      early_pull_(options_.early_pull &&
                  std::none_of(client->shard_map().tensors.begin(),
                               client->shard_map().tensors.end(),
                               [](const TensorInfo& t) { return t.is_table(); })),
      pushed_(num_tensors_, false),
      started_(options_.env->Now()) {
  encoder_ = StartHelperThread(options_.env, "gs-encode", [this] { EncodeLoop(); });
}

StepLoop::~StepLoop() {
  AbandonPull();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    queue_.clear();
  }
  encoder_.join();
}

absl::Status StepLoop::Push(uint32_t tensor, absl::Span<const float> grad, uint64_t clock) {
  absl::MutexLock lock(&mu_);
  if (tensor >= num_tensors_) {
    return absl::InvalidArgumentError(
        absl::StrCat("push of tensor ", tensor, ": the model has ", num_tensors_));
  }
  if (pushed_[tensor]) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a second gradient for tensor '", client_->shard_map().tensors[tensor].name,
        "' in clock ", clock, ": one backward per step"));
  }
  pushed_[tensor] = true;
  queue_.push_back(Queued{tensor, grad, clock});
  ++queued_;
  queued_elems_ += grad.size();
  return absl::OkStatus();
}

void StepLoop::EncodeLoop() {
  for (;;) {
    std::vector<std::function<void()>> releases;
    bool drain = false;
    {
      absl::MutexLock lock(&mu_);
      // Small gradients wait for more (see [encode thread]): they would
      // share a bucket anyway, and each wake-up costs the caller its core.
      auto encode = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() && (queued_elems_ >= options_.encode_batch_elems || flushers_ > 0);
      };
      auto work = [this, &encode]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || (!encoding_ && (!releases_.empty() || encode()));
      };
      // Idle between steps: no deadline, the destructor ends the wait.
      mu_.Await(absl::Condition(&work));
      if (stopping_) return;
      releases.swap(releases_);
      drain = encode();
      if (drain) ++wakeups_;
      encoding_ = true;  // the queue waits for the releases
    }
    // An early pull's kept answers ([early pull]): they precede the next
    // clock's gradients, whose AskEarly needs the pull landed whole.
    for (const auto& release : releases) release();
    if (!drain) {
      absl::MutexLock lock(&mu_);
      encoding_ = false;
      continue;
    }
    EncodeQueued();
    // Nothing queued: what waits in the open bucket would wait for the next
    // batch of backward, which fuses nothing into a bucket this size.
    client_->Flush(options_.idle_flush_bytes);
  }
}

void StepLoop::EncodeQueued() {
  for (;;) {
    Queued q;
    {
      absl::MutexLock lock(&mu_);
      if (queue_.empty()) {
        encoding_ = false;
        return;
      }
      q = queue_.front();
      queue_.pop_front();
      queued_elems_ -= q.grad.size();
    }
    if (early_pull_) AskEarly(q.clock);
    const absl::Time start = absl::Now();  // measures work: the real clock ([env time])
    PushHandle h = client_->Push(q.tensor, q.grad, q.clock);
    const double took = absl::ToDoubleSeconds(absl::Now() - start);
    absl::MutexLock lock(&mu_);
    open_.push_back(std::move(h));
    ++encoded_;
    encode_seconds_ += took;
  }
}

absl::Status StepLoop::WaitEncoded(absl::Time deadline) {
  bool here = false;
  {
    absl::MutexLock lock(&mu_);
    // The encode thread is idle: what is queued is encoded on this thread,
    // which would only wait, instead of being handed over at the cost of a
    // wake-up on a core that may be busy (see [encode thread]).
    here = !encoding_ && !queue_.empty();
    if (here) encoding_ = true;
  }
  if (here) EncodeQueued();
  absl::MutexLock lock(&mu_);
  ++flushers_;  // wakes the encode thread for what is queued
  auto all = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return encoded_ == queued_; };
  const bool done = options_.env->AwaitWithDeadline(&mu_, absl::Condition(&all), deadline);
  --flushers_;
  if (done) return absl::OkStatus();
  // The caller frees the gradients when this returns: those not started are
  // dropped, and the one being encoded is waited for (its own sends are
  // bounded by the client's rpc_deadline).
  const uint64_t dropped = queue_.size();
  queue_.clear();
  queued_ -= dropped;
  queued_elems_ = 0;
  mu_.Await(absl::Condition(&all));
  return absl::DeadlineExceededError(
      absl::StrCat(dropped, " gradients were still waiting to be encoded at the deadline"));
}

StepLoop::WaitTimer::~WaitTimer() {
  const int64_t ns = absl::ToInt64Nanoseconds(loop_->options_.env->Now() - start_);
  loop_->wait_ns_.fetch_add(ns, std::memory_order_relaxed);
}

double StepLoop::wait_seconds() const {
  return 1e-9 * static_cast<double>(wait_ns_.load(std::memory_order_relaxed));
}

double StepLoop::wait_share() const {
  const double wall = absl::ToDoubleSeconds(options_.env->Now() - started_);
  return wall > 0 ? std::min(1.0, wait_seconds() / wall) : 0.0;
}

double StepLoop::encode_seconds() const {
  absl::MutexLock lock(&mu_);
  return encode_seconds_;
}

uint64_t StepLoop::encode_wakeups() const {
  absl::MutexLock lock(&mu_);
  return wakeups_;
}

void StepLoop::AddPush(uint32_t tensor, PushHandle handle) {
  absl::MutexLock lock(&mu_);
  if (tensor < num_tensors_) pushed_[tensor] = true;
  open_.push_back(std::move(handle));
}

absl::Status StepLoop::EndClock(uint64_t clock,
                                std::optional<std::vector<absl::Span<float>>> next,
                                std::vector<PsClient::RowsAsk> rows, PullHandle* rows_pull) {
  const WaitTimer timer(this);
  const absl::Time deadline = options_.env->Now() + options_.push_wait;
  absl::Status encoded = WaitEncoded(deadline);
  std::vector<uint32_t> missing;
  {
    absl::MutexLock lock(&mu_);
    for (uint32_t t = 0; t < num_tensors_; ++t) {
      if (!pushed_[t]) missing.push_back(t);
    }
    pushed_.assign(num_tensors_, false);
  }
  GS_RETURN_IF_ERROR(encoded);
  // Zeros are encoded here: the encode thread is idle.
  std::vector<PushHandle> zeros;
  for (uint32_t t : missing) {
    if (client_->shard_map().tensors[t].is_table()) {
      // No row touched this clock: the partitions' rounds still need it.
      zeros.push_back(client_->PushRows(t, {}, {}, clock));
      continue;
    }
    const size_t n = client_->shard_map().tensors[t].num_elems;
    if (zeros_.size() < n) zeros_.resize(n, 0.0f);
    zeros.push_back(client_->Push(t, absl::MakeConstSpan(zeros_.data(), n), clock));
  }
  client_->Flush(0);
  std::vector<PushHandle> pushes;
  {
    absl::MutexLock lock(&mu_);
    pushes = std::exchange(open_, {});
  }
  pushes.insert(pushes.end(), zeros.begin(), zeros.end());
  std::optional<PullHandle> owed;
  if (next.has_value()) owed = TakePull(clock + 1, *std::move(next), std::move(rows), rows_pull);
  // Acknowledged everywhere before any shard hears the clock is done (see
  // [step loop]).
  const absl::Status acked = WaitHandles(std::move(pushes), deadline);
  if (owed.has_value()) {
    // Released after the acks, not before: until then the CPU is the
    // shards' and the encoder's, serving this clock's pushes ([early pull]).
    std::function<void()> release = PsClient::StopDeferring(*owed);
    absl::MutexLock lock(&mu_);
    releases_.push_back(std::move(release));
  }
  GS_RETURN_IF_ERROR(acked);
  return client_->AdvanceClock(clock + 1);
}

void StepLoop::StartPull(uint64_t clock, std::vector<absl::Span<float>> targets,
                         std::vector<PsClient::RowsAsk> rows, PullHandle* rows_pull) {
  std::optional<PullHandle> owed =
      TakePull(clock, std::move(targets), std::move(rows), rows_pull);
  if (owed.has_value()) PsClient::Release(*owed);
}

std::optional<PullHandle> StepLoop::TakePull(uint64_t clock,
                                             std::vector<absl::Span<float>> targets,
                                             std::vector<PsClient::RowsAsk> rows,
                                             PullHandle* rows_pull) {
  std::optional<Pull> dropped, early;
  {
    absl::MutexLock lock(&mu_);
    // This clock's pull in flight: the next clock's early one stays.
    if (pull_.has_value() && pull_->clock == clock) return std::nullopt;
    early = std::exchange(early_, std::nullopt);
  }
  auto same = [&targets](const std::vector<absl::Span<float>>& t) {
    if (t.size() != targets.size()) return false;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i].data() != targets[i].data() || t[i].size() != targets[i].size()) return false;
    }
    return true;
  };
  // The pull asked early, when it is this one ([early pull]). Settled before
  // its release means failed (its answers wait): asked anew.
  if (early.has_value() && early->clock == clock && rows.empty() && same(early->targets) &&
      !PsClient::Progress(early->handle).settled) {
    PullHandle owed = early->handle;
    absl::MutexLock lock(&mu_);
    if (pull_.has_value()) PsClient::Abandon(pull_->handle);
    dropped = std::exchange(pull_, std::move(early));
    return owed;
  }
  early.reset();  // dropping the last handle abandons it
  absl::MutexLock lock(&mu_);
  if (pull_.has_value()) PsClient::Abandon(pull_->handle);
  const bool with_rows = !rows.empty();
  PullHandle h = with_rows ? client_->PullWithRows(clock, targets, std::move(rows))
                           : client_->Pull(clock, targets);
  if (with_rows && rows_pull != nullptr) *rows_pull = h;
  dropped = std::exchange(pull_, Pull{clock, std::move(targets), std::move(h), 0, 0});
  return std::nullopt;
}

void StepLoop::AskEarly(uint64_t clock) {
  std::optional<Pull> stale;
  {
    absl::MutexLock lock(&mu_);
    if (early_.has_value() && early_->clock == clock + 1) return;
    if (unwanted_ == clock + 1) return;
  }
  if (hooks_.will_pull && !hooks_.will_pull(clock + 1)) {
    absl::MutexLock lock(&mu_);
    unwanted_ = clock + 1;  // asked once per clock, not per gradient
    stale = std::exchange(early_, std::nullopt);
    return;
  }
  absl::MutexLock lock(&mu_);  // early_ is set in EncodeQueued only (one thread: encoding_)
  stale = std::exchange(early_, std::nullopt);
  // Over a pull of this clock that landed whole: its requests name the
  // published copies that pull left.
  if (!pull_.has_value() || pull_->clock != clock) return;
  if (!PsClient::Wait(pull_->handle, absl::ZeroDuration(), options_.env).ok()) return;
  early_ = Pull{clock + 1, pull_->targets, client_->PullDeferred(clock + 1, pull_->targets), 0, 0};
}

std::optional<uint64_t> StepLoop::pull_clock() const {
  absl::MutexLock lock(&mu_);
  if (!pull_.has_value()) return std::nullopt;
  return pull_->clock;
}

void StepLoop::AbandonPull() {
  std::optional<Pull> dropped, early;
  absl::MutexLock lock(&mu_);
  if (pull_.has_value()) PsClient::Abandon(pull_->handle);
  if (early_.has_value()) PsClient::Abandon(early_->handle);
  dropped = std::exchange(pull_, std::nullopt);
  early = std::exchange(early_, std::nullopt);
}

bool StepLoop::TensorsReady(absl::Span<const uint32_t> tensors) {
  PullHandle h;
  {
    absl::MutexLock lock(&mu_);
    if (!pull_.has_value()) return false;
    h = pull_->handle;
  }
  return PsClient::WaitTensors(h, tensors, absl::ZeroDuration()).ok();
}

absl::Status StepLoop::WaitTensors(absl::Span<const uint32_t> tensors) {
  const WaitTimer timer(this);
  uint64_t seen = 0;
  absl::Time moved = options_.env->Now();
  for (;;) {
    PullHandle h;
    uint64_t generation = 0, clock = 0;
    {
      absl::MutexLock lock(&mu_);
      if (!pull_.has_value()) {
        return absl::FailedPreconditionError("no pull was asked for (StartPull or EndClock)");
      }
      h = pull_->handle;
      generation = pull_->generation;
      clock = pull_->clock;
    }
    absl::Status s = PsClient::WaitTensors(h, tensors, options_.wait_slice, options_.env);
    if (s.ok()) return s;
    const PsClient::PullProgress progress = PsClient::Progress(h);
    if (!progress.settled) {
      // Only this wait's slice ran out: the same pull goes on (see [step loop]).
      if (hooks_.check) GS_RETURN_IF_ERROR(hooks_.check());
      if (progress.chunks_done != seen) {
        seen = progress.chunks_done;
        moved = options_.env->Now();
      } else if (options_.env->Now() - moved > options_.stall_deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("pull at clock ", clock, ": no answer for ",
                         absl::FormatDuration(options_.stall_deadline), " (", s.message(), ")"));
      }
      continue;
    }
    // The pull ended with an error; ask again only where that can help.
    const bool lost = absl::IsDataLoss(s);
    if (!lost && !absl::IsDeadlineExceeded(s)) return s;
    if (hooks_.check) GS_RETURN_IF_ERROR(hooks_.check());
    if (lost) {
      {
        absl::MutexLock lock(&mu_);
        if (pull_.has_value() && pull_->generation == generation &&
            pull_->reinits >= options_.max_reinits) {
          return s;
        }
      }
      if (!hooks_.reinit) return s;
      std::vector<absl::Span<float>> targets;
      {
        absl::MutexLock lock(&mu_);
        if (pull_.has_value()) targets = pull_->targets;
      }
      GS_RETURN_IF_ERROR(hooks_.reinit(targets));
    } else if (options_.env->Now() - moved > options_.stall_deadline) {
      return s;  // the shard held it past its limit, again and again
    }
    absl::MutexLock lock(&mu_);
    // Another waiter may have asked again already.
    if (!pull_.has_value() || pull_->generation != generation) continue;
    PsClient::Abandon(pull_->handle);
    pull_->handle = client_->Pull(pull_->clock, pull_->targets);
    ++pull_->generation;
    if (lost) ++pull_->reinits;
  }
}

absl::Status StepLoop::WaitPushes(absl::Duration timeout) {
  const absl::Time deadline = options_.env->Now() + timeout;
  GS_RETURN_IF_ERROR(WaitEncoded(deadline));
  client_->Flush(0);
  std::vector<PushHandle> all;
  {
    absl::MutexLock lock(&mu_);
    all = open_;
  }
  return WaitHandles(std::move(all), deadline);
}

absl::Status StepLoop::WaitHandles(std::vector<PushHandle> handles, absl::Time deadline) {
  absl::Status first;
  for (const PushHandle& h : handles) {
    first.Update(PsClient::Wait(h, std::max(absl::ZeroDuration(), deadline - options_.env->Now()),
                               options_.env));
  }
  return first;
}

}  // namespace gradstream::client
