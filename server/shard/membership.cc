#include "server/shard/membership.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gradstream::shard {
namespace {

bool Contains(const std::vector<uint64_t>& v, uint64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

Membership::Membership(MembershipEpoch first) { epochs_.push_back(std::move(first)); }

absl::StatusOr<uint64_t> Membership::Hello(uint64_t worker, uint64_t incarnation) {
  absl::MutexLock l(&mu_);
  auto [it, inserted] = incarnations_.emplace(worker, incarnation);
  if (!inserted) {
    if (incarnation < it->second) {
      return absl::FailedPreconditionError(absl::StrCat("stale incarnation ", incarnation,
                                                        " of worker ", worker, ": incarnation ",
                                                        it->second, " already joined"));
    }
    it->second = incarnation;
  }
  return epochs_.back().epoch;
}

absl::Status Membership::CheckIncarnation(uint64_t worker, uint64_t incarnation) const {
  absl::ReaderMutexLock l(&mu_);
  auto it = incarnations_.find(worker);
  if (it != incarnations_.end() && incarnation < it->second) {
    return absl::FailedPreconditionError(absl::StrCat("incarnation ", incarnation, " of worker ",
                                                      worker, " was replaced by incarnation ",
                                                      it->second));
  }
  return absl::OkStatus();
}

bool Membership::AdvanceClock(uint64_t worker, uint64_t clock) {
  absl::MutexLock l(&mu_);
  if (catching_up_) caught_up_.insert(worker);
  auto [it, inserted] = clocks_.emplace(worker, clock);
  if (inserted) return true;
  if (clock <= it->second) return false;
  it->second = clock;
  return true;
}

uint64_t Membership::WorkerClock(uint64_t worker) const {
  absl::ReaderMutexLock l(&mu_);
  if (departed_.contains(worker)) return std::numeric_limits<uint64_t>::max();
  auto it = clocks_.find(worker);
  return it == clocks_.end() ? 0 : it->second;
}

uint64_t Membership::MemberClock(uint64_t worker) const {
  absl::ReaderMutexLock l(&mu_);
  return MemberClockForWindowLocked(worker);
}

uint64_t Membership::MemberClockForWindowLocked(uint64_t worker) const {
  auto it = clocks_.find(worker);
  uint64_t c = it == clocks_.end() ? 0 : it->second;
  if (Contains(epochs_.back().workers, worker)) {
    uint64_t joined = epochs_.back().effective_clock;
    for (size_t i = epochs_.size(); i-- > 0;) {
      if (!Contains(epochs_[i].workers, worker)) break;
      joined = epochs_[i].effective_clock;
    }
    c = std::max(c, joined);
  }
  return c;
}

absl::Status Membership::CheckClock(uint64_t worker, uint64_t clock, uint64_t window,
                                    const char* what) const {
  absl::ReaderMutexLock l(&mu_);
  if (catching_up_ && !caught_up_.contains(worker)) return absl::OkStatus();
  const uint64_t base = MemberClockForWindowLocked(worker);
  const uint64_t limit =
      base > std::numeric_limits<uint64_t>::max() - window ? std::numeric_limits<uint64_t>::max()
                                                           : base + window;
  if (clock <= limit) return absl::OkStatus();
  return absl::OutOfRangeError(absl::StrCat(what, " clock ", clock, " of worker ", worker,
                                            " is outside its window: at most ", limit,
                                            " (its clock ", base, " + ", window, ")"));
}

bool Membership::IsCurrentMember(uint64_t worker) const {
  absl::ReaderMutexLock l(&mu_);
  return Contains(epochs_.back().workers, worker);
}

void Membership::AllowCatchUp() {
  absl::MutexLock l(&mu_);
  catching_up_ = true;
  caught_up_.clear();
}

absl::StatusOr<uint64_t> Membership::Update(MembershipEpoch epoch) {
  Joined joined;
  return Update(std::move(epoch), 0, &joined);
}

absl::StatusOr<uint64_t> Membership::Update(MembershipEpoch epoch, uint64_t passed,
                                            Joined* joined) {
  absl::MutexLock l(&mu_);
  const MembershipEpoch& last = epochs_.back();
  if (epoch.epoch <= last.epoch) return last.epoch;
  if (epoch.effective_clock < last.effective_clock) {
    return absl::InvalidArgumentError(
        absl::StrCat("epoch ", epoch.epoch, " takes effect at clock ", epoch.effective_clock,
                     ", before epoch ", last.epoch, " (clock ", last.effective_clock, ")"));
  }
  // See [rejoin clock].
  joined->start = std::max(epoch.effective_clock, passed);
  joined->workers.clear();
  for (uint64_t w : epoch.workers) {
    if (Contains(last.workers, w)) continue;
    joined->workers.push_back(w);
    clocks_[w] = joined->start;
    departed_.erase(w);
  }
  for (uint64_t w : epoch.departed) {
    if (!Contains(epoch.workers, w)) departed_.insert(w);
  }
  epochs_.push_back(std::move(epoch));
  return epochs_.back().epoch;
}

const MembershipEpoch* Membership::EpochAtLocked(uint64_t clock) const {
  // Epochs are sorted by effective clock; the last one at or before `clock`
  // is in effect there.
  const MembershipEpoch* found = nullptr;
  for (const MembershipEpoch& e : epochs_) {
    if (e.effective_clock <= clock) found = &e;
  }
  return found;
}

std::vector<uint64_t> Membership::MembersAt(uint64_t clock, uint64_t* epoch) const {
  absl::ReaderMutexLock l(&mu_);
  const MembershipEpoch* found = EpochAtLocked(clock);
  if (found == nullptr) {
    *epoch = 0;
    return {};
  }
  *epoch = found->epoch;
  return found->workers;
}

bool Membership::LeftBefore(uint64_t worker, uint64_t clock) const {
  absl::ReaderMutexLock l(&mu_);
  if (departed_.contains(worker)) return false;  // let go for good: it died
  const MembershipEpoch* at = EpochAtLocked(clock);
  if (at == nullptr || Contains(at->workers, worker)) return false;
  for (const MembershipEpoch& e : epochs_) {
    if (e.effective_clock >= at->effective_clock) break;
    if (Contains(e.workers, worker)) return true;
  }
  return false;
}

std::optional<uint64_t> Membership::NextStaffedClock(uint64_t clock) const {
  absl::ReaderMutexLock l(&mu_);
  // The candidates are `clock` itself and each later effective clock.
  auto staffed_at = [&](uint64_t c) ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    const MembershipEpoch* e = EpochAtLocked(c);
    return e != nullptr && !e->workers.empty();
  };
  if (staffed_at(clock)) return clock;
  for (const MembershipEpoch& e : epochs_) {
    if (e.effective_clock > clock && staffed_at(e.effective_clock)) return e.effective_clock;
  }
  return std::nullopt;
}

std::optional<uint64_t> Membership::NextEpochClock(uint64_t clock) const {
  absl::ReaderMutexLock l(&mu_);
  for (const MembershipEpoch& e : epochs_) {
    if (e.effective_clock > clock) return e.effective_clock;
  }
  return std::nullopt;
}

uint64_t Membership::MemberClockLocked(uint64_t worker) const {
  // See [member clocks].
  auto it = clocks_.find(worker);
  if (it != clocks_.end()) return it->second;
  uint64_t c = epochs_.back().effective_clock;
  for (size_t i = epochs_.size(); i-- > 0;) {
    if (!Contains(epochs_[i].workers, worker)) break;
    c = epochs_[i].effective_clock;
  }
  return c;
}

uint64_t Membership::MinClockLocked() const {
  const MembershipEpoch& last = epochs_.back();
  if (last.workers.empty()) return last.effective_clock;
  uint64_t min = std::numeric_limits<uint64_t>::max();
  for (uint64_t w : last.workers) min = std::min(min, MemberClockLocked(w));
  return min;
}

uint64_t Membership::MinClock() const {
  absl::ReaderMutexLock l(&mu_);
  return MinClockLocked();
}

Membership::Summary Membership::Summarize() const {
  absl::ReaderMutexLock l(&mu_);
  const MembershipEpoch& last = epochs_.back();
  Summary s;
  s.min_clock = MinClockLocked();
  s.max_clock = s.min_clock;
  for (uint64_t w : last.workers) s.max_clock = std::max(s.max_clock, MemberClockLocked(w));
  s.epoch = last.epoch;
  s.members = static_cast<uint32_t>(last.workers.size());
  return s;
}

uint64_t Membership::SaveTo(JobSnapshot* snap) const {
  absl::ReaderMutexLock l(&mu_);
  snap->epochs = epochs_;
  snap->worker_clocks.assign(clocks_.begin(), clocks_.end());
  snap->incarnations.assign(incarnations_.begin(), incarnations_.end());
  return MinClockLocked();
}

absl::Status Membership::ReplaceEpochs(std::vector<MembershipEpoch> epochs) {
  if (epochs.empty()) return absl::InvalidArgumentError("no epochs");
  for (size_t i = 1; i < epochs.size(); ++i) {
    if (epochs[i].epoch <= epochs[i - 1].epoch ||
        epochs[i].effective_clock < epochs[i - 1].effective_clock) {
      return absl::InvalidArgumentError(
          absl::StrCat("epoch ", epochs[i].epoch, " is out of order"));
    }
  }
  absl::MutexLock l(&mu_);
  departed_.clear();
  for (size_t i = 0; i < epochs.size(); ++i) {
    for (uint64_t w : epochs[i].workers) {
      if (i > 0 && !Contains(epochs[i - 1].workers, w)) departed_.erase(w);
    }
    for (uint64_t w : epochs[i].departed) {
      if (!Contains(epochs[i].workers, w)) departed_.insert(w);
    }
  }
  epochs_ = std::move(epochs);
  for (uint64_t w : epochs_.back().workers) {
    uint64_t start = epochs_.back().effective_clock;
    for (size_t i = epochs_.size(); i-- > 0;) {
      if (!Contains(epochs_[i].workers, w)) break;
      start = epochs_[i].effective_clock;
    }
    auto it = clocks_.find(w);
    if (it != clocks_.end() && it->second < start) it->second = start;
  }
  return absl::OkStatus();
}

void Membership::RestoreFrom(const JobSnapshot& snap) {
  absl::MutexLock l(&mu_);
  if (!snap.epochs.empty()) {
    MembershipEpoch requested = epochs_.back();
    epochs_ = snap.epochs;
    // A CreateJob that brings a newer epoch than the checkpoint's wins.
    if (requested.epoch > epochs_.back().epoch &&
        requested.effective_clock >= epochs_.back().effective_clock) {
      epochs_.push_back(std::move(requested));
    }
  }
  for (const auto& [w, c] : snap.worker_clocks) clocks_[w] = c;
  for (const auto& [w, i] : snap.incarnations) incarnations_[w] = i;
}

}  // namespace gradstream::shard
