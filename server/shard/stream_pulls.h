// The per-stream half of the pull schedule: how many of one Session stream's
// pulls may wait at once, and the deadline each gets. Plain logic, no gRPC:
// server/shard/rpc/'s reactor and SessionHandler call it, and its tests run
// it alone.
//
// NOTE: [pull schedule] A pull is admitted when its stream has fewer than
// StreamPulls::kMaxWaiting unanswered (else RESOURCE_EXHAUSTED at once), gets
// the deadline PullDeadline gives, is ready when the job's consistency
// controller says so with every chunk initialized (Job::Ready), is answered
// in arrival order among parked pulls (PullWaitList::TakeReady), and ends
// without parameters when its deadline passes, its stream ends or the job
// closes ([parked pulls]). A half-closed stream finishes once none of its
// pulls is unanswered. Why: docs/design/pull-schedule.md.
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
