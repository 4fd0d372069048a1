#include "server/shard/pull_waitlist.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "glog/logging.h"

namespace gradstream::shard {

void PullWaitList::Fail(const PullArgs& args, const PullCallback& done, absl::Status why) {
  DCHECK(!why.ok());
  PullResult r;
  r.request_id = args.request_id;
  r.status = std::move(why);
  done(std::move(r));
}

std::optional<PendingPull> PullWaitList::ParkUnlessReady(PendingPull pull, ReadyFn ready) {
  absl::Status closed;
  {
    absl::MutexLock l(&mu_);
    if (ready(pull.args)) return pull;
    if (closed_.ok()) {
      parked_.push_back(std::move(pull));
      return std::nullopt;
    }
    closed = closed_;
  }
  Fail(pull.args, pull.done, std::move(closed));
  return std::nullopt;
}

std::vector<PendingPull> PullWaitList::TakeReady(ReadyFn ready) {
  std::vector<PendingPull> out;
  absl::MutexLock l(&mu_);
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (ready(it->args)) {
      out.push_back(std::move(*it));
      it = parked_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void PullWaitList::FailIf(absl::FunctionRef<bool(const PullArgs&)> which, StatusFn why) {
  std::list<PendingPull> failed;
  {
    absl::MutexLock l(&mu_);
    for (auto it = parked_.begin(); it != parked_.end();) {
      auto next = std::next(it);
      if (which(it->args)) failed.splice(failed.end(), parked_, it);
      it = next;
    }
  }
  for (PendingPull& p : failed) Fail(p.args, p.done, why(p.args));
}

absl::Time PullWaitList::Expire(absl::Time now, StatusFn why) {
  FailIf([now](const PullArgs& a) { return a.deadline <= now; }, why);
  absl::Time next = absl::InfiniteFuture();
  absl::MutexLock l(&mu_);
  for (const PendingPull& p : parked_) next = std::min(next, p.args.deadline);
  return next;
}

void PullWaitList::Close(const absl::Status& why) {
  absl::Status status;
  {
    absl::MutexLock l(&mu_);
    if (closed_.ok()) closed_ = why.ok() ? absl::CancelledError("pulls cancelled") : why;
    status = closed_;
  }
  FailIf([](const PullArgs&) { return true; }, [&](const PullArgs&) { return status; });
}

void PullWaitList::CancelStream(uint64_t stream, const absl::Status& why) {
  FailIf([stream](const PullArgs& a) { return a.stream == stream; },
         [&](const PullArgs&) { return why; });
}

size_t PullWaitList::size() const {
  absl::MutexLock l(&mu_);
  return parked_.size();
}

}  // namespace gradstream::shard
