// See stream_pulls.h ([pull schedule]).
#include "server/shard/stream_pulls.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace gradstream::shard {

absl::Time PullDeadline(absl::Time now, int64_t requested_timeout_ms, absl::Duration longest) {
  const absl::Duration timeout = requested_timeout_ms > 0
                                     ? std::min(absl::Milliseconds(requested_timeout_ms), longest)
                                     : longest;
  return now + timeout;
}

absl::Status StreamPulls::Admit() {
  if (waiting_ >= kMaxWaiting) {
    return absl::ResourceExhaustedError(absl::StrCat("this stream already has ", waiting_,
                                                     " pulls waiting (at most ", kMaxWaiting,
                                                     " per stream)"));
  }
  ++waiting_;
  return absl::OkStatus();
}

void StreamPulls::Answered() {
  DCHECK_GT(waiting_, 0) << "a pull answered that was never admitted";
  if (waiting_ > 0) --waiting_;
}

}  // namespace gradstream::shard
