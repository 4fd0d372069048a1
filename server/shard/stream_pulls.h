// The per-stream half of the pull schedule: how many of one Session stream's
// pulls may wait at once, and the deadline each gets. Plain logic, no gRPC:
// server/shard/rpc/'s reactor and SessionHandler call it, and its tests run
// it alone.
//
// NOTE: [pull schedule] When a worker's pull is answered, in one place each:
//   - admitted: at most StreamPulls::kMaxWaiting pulls of one stream are
//     unanswered at once; one more is answered RESOURCE_EXHAUSTED at once
//     (an honest worker has one per clock; the cap bounds what one stream
//     can park, see [parked pulls]);
//   - its deadline: now + the timeout the worker asked for, clamped to the
//     shard's --pull_timeout_ms (PullDeadline): a client never keeps a pull,
//     and its stream, longer than the shard allows;
//   - ready: when the job's consistency controller says so for the pull's
//     clock and the slowest member's clock, with every chunk initialized
//     (Job::Ready, ConsistencyController::PullReady in consistency.h);
//   - order: pulls that are not ready park in arrival order and are answered
//     in arrival order as they become ready (PullWaitList::TakeReady);
//   - its end without parameters: deadline passed, stream ended, job closed
//     (PullWaitList, [parked pulls]). A stream that half-closed finishes only
//     once none of its pulls is unanswered (StreamPulls::waiting).
#ifndef GRADSTREAM_SERVER_SHARD_STREAM_PULLS_H_
#define GRADSTREAM_SERVER_SHARD_STREAM_PULLS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace gradstream::shard {

// The deadline of a pull asked at `now` with `requested_timeout_ms` (<= 0:
// none asked): now + min(requested, longest), or now + longest.
absl::Time PullDeadline(absl::Time now, int64_t requested_timeout_ms, absl::Duration longest);

// The unanswered pulls of one stream. Not thread-safe: the stream's lock
// guards it.
class StreamPulls {
 public:
  static constexpr int kMaxWaiting = 16;

  // Counts one more unanswered pull, or returns ResourceExhausted (naming
  // the cap) and counts nothing when kMaxWaiting are unanswered already.
  absl::Status Admit();
  // One admitted pull got its answer. More Answered() than Admit() is a bug
  // (checked in debug builds, ignored otherwise).
  void Answered();
  // Admitted and not yet answered.
  int waiting() const { return waiting_; }

 private:
  int waiting_ = 0;
};

}  // namespace gradstream::shard

#endif  // GRADSTREAM_SERVER_SHARD_STREAM_PULLS_H_
