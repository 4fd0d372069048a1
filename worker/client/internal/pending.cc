// Completion and PullState. See pending.h.
#include "worker/client/internal/pending.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gradstream::client::internal {

std::shared_ptr<Completion> Completion::Failed(absl::Status status) {
  auto c = std::make_shared<Completion>(1);
  c->Done(status.ok() ? absl::InternalError("Completion::Failed with OK") : std::move(status));
  return c;
}

void Completion::Add(int n) {
  absl::MutexLock lock(&mu_);
  pending_ += n;
}

void Completion::Done(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (!status.ok() && status_.ok()) status_ = status;
  --pending_;
}

absl::Status Completion::Wait(absl::Duration timeout, Env* env) {
  absl::MutexLock lock(&mu_);
  auto finished = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return pending_ <= 0 || !status_.ok();
  };
  if (!env->AwaitWithTimeout(&mu_, absl::Condition(&finished), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("no answer within ", absl::FormatDuration(timeout), " (", pending_,
                     " outstanding)"));
  }
  return status_;
}

bool Completion::done() const {
  absl::MutexLock lock(&mu_);
  return pending_ <= 0 || !status_.ok();
}

PullState::PullState(std::vector<PullTarget> targets,
                     std::vector<std::vector<uint64_t>> shard_chunks, PublishedCopies* published,
                     bool deferred)
    : targets_(std::move(targets)),
      deferring_(deferred),
      published_(published),
      completion_(std::make_shared<Completion>(0)) {
  {
    absl::MutexLock lock(&progress_mu_);
    for (const PullTarget& t : targets_) {
      if (t.dst == nullptr) continue;
      if (t.tensor >= tensor_pending_.size()) tensor_pending_.resize(t.tensor + 1, 0);
      ++tensor_pending_[t.tensor];
    }
  }
  int involved = 0;
  for (auto& chunks : shard_chunks) {
    auto part = std::make_unique<Part>();
    if (!chunks.empty()) ++involved;
    part->expected = std::move(chunks);
    parts_.push_back(std::move(part));
  }
  completion_->Add(involved);
}

void PullState::End(const absl::Status& status) {
  {
    absl::MutexLock lock(&progress_mu_);
    if (error_.ok()) error_ = status;
  }
  completion_->Done(status);
}

void PullState::Arrived(absl::Span<const uint64_t> chunk_ids) {
  if (chunk_ids.empty()) return;
  absl::MutexLock lock(&progress_mu_);
  chunks_done_ += chunk_ids.size();
  for (uint64_t id : chunk_ids) --tensor_pending_[targets_[id].tensor];
}

absl::Status PullState::WaitTensors(absl::Span<const uint32_t> tensors, absl::Duration timeout,
                                    Env* env) {
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(progress_mu_) {
    if (!error_.ok()) return true;
    if (tensors.empty()) {
      for (uint32_t n : tensor_pending_) {
        if (n > 0) return false;
      }
      return true;
    }
    for (uint32_t t : tensors) {
      if (t < tensor_pending_.size() && tensor_pending_[t] > 0) return false;
    }
    return true;
  };
  // Released answers not yet run: this thread would only wait for them.
  for (;;) {
    {
      absl::MutexLock lock(&progress_mu_);
      if (ready()) break;
    }
    if (!RunKept()) break;
  }
  absl::MutexLock lock(&progress_mu_);
  if (!env->AwaitWithTimeout(&progress_mu_, absl::Condition(&ready), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("pull: no answer within ", absl::FormatDuration(timeout)));
  }
  return error_;
}

uint64_t PullState::chunks_done() const {
  absl::MutexLock lock(&progress_mu_);
  return chunks_done_;
}

bool PullState::Expected(Part& part, uint32_t shard, uint64_t chunk_id) {
  if (chunk_id < targets_.size() && targets_[chunk_id].dst != nullptr) return true;
  part.finished = true;
  End(absl::InternalError(
      absl::StrCat("shard ", shard, " sent chunk ", chunk_id, " that was not asked for")));
  return false;
}

void PullState::SplitPart(uint32_t shard, int n) {
  if (shard >= parts_.size()) return;
  absl::MutexLock lock(&parts_[shard]->mu);
  parts_[shard]->open_requests = n;
}

void PullState::Settle(Part& part, uint32_t shard) {
  if (part.finished || part.abandoned || part.open_requests > 0) return;
  if (part.received.size() == part.expected.size()) {
    part.finished = true;
    completion_->Done(absl::OkStatus());
  } else if (part.kept == 0) {
    part.finished = true;
    End(absl::InternalError(absl::StrCat(
        "shard ", shard, " answered ", part.received.size(), " of ", part.expected.size(),
        " chunks")));
  }
}

void PullState::OnAnswer(uint32_t shard, absl::Span<const AnsweredChunk> chunks, bool last) {
  if (shard >= parts_.size()) return;
  Part& part = *parts_[shard];
  absl::MutexLock lock(&part.mu);
  if (part.finished || part.abandoned) return;
  for (const AnsweredChunk& c : chunks) {
    if (!Expected(part, shard, c.chunk_id)) return;
    const size_t want = size_t{targets_[c.chunk_id].num_elems} * sizeof(float);
    if (c.published == nullptr && c.values.size() != want) {
      part.finished = true;
      End(absl::InternalError(absl::StrCat("shard ", shard, " sent ", c.values.size(),
                                           " bytes for chunk ", c.chunk_id, " of ",
                                           targets_[c.chunk_id].num_elems, " elements")));
      return;
    }
  }
  std::vector<uint64_t> arrived;
  arrived.reserve(chunks.size());
  for (const AnsweredChunk& c : chunks) {
    const PullTarget& t = targets_[c.chunk_id];
    if (!t.positions.empty()) {
      const size_t row = size_t{t.dim} * sizeof(float);
      for (size_t i = 0; i < t.positions.size(); ++i) {
        std::memcpy(t.dst + size_t{t.positions[i]} * t.dim, c.values.data() + i * row, row);
      }
    } else if (c.published == nullptr) {
      std::memcpy(t.dst, c.values.data(), c.values.size());  // little-endian hosts only
    } else {
      absl::Status s =
          published_ == nullptr
              ? absl::InternalError("a published answer, but the client keeps no copies")
              : published_->Apply(c.chunk_id, *c.published, t.dst);
      if (!s.ok()) {
        part.finished = true;
        Arrived(arrived);
        End(absl::Status(s.code(), absl::StrCat("shard ", shard, ": ", s.message())));
        return;
      }
    }
    if (part.received.insert(c.chunk_id).second) arrived.push_back(c.chunk_id);
  }
  Arrived(arrived);
  if (last) --part.open_requests;
  Settle(part, shard);
}

bool PullState::Defer(uint32_t shard, uint64_t first_chunk,
                      std::function<void(PullState&)> apply) {
  absl::MutexLock lock(&defer_mu_);
  if (!deferring_ || shard >= parts_.size()) return false;
  {
    absl::MutexLock part_lock(&parts_[shard]->mu);
    ++parts_[shard]->kept;
  }
  deferred_.push_back(Kept{first_chunk, shard, std::move(apply)});
  return true;
}

bool PullState::deferring() const {
  absl::MutexLock lock(&defer_mu_);
  return deferring_;
}

std::function<void()> PullState::StopDeferring() {
  {
    absl::MutexLock lock(&defer_mu_);
    if (deferring_) {  // the first call: nothing is kept after it
      deferring_ = false;
      // The next forward reads the first chunks first.
      std::stable_sort(deferred_.begin(), deferred_.end(), [](const Kept& a, const Kept& b) {
        return a.first_chunk < b.first_chunk;
      });
      released_ = std::move(deferred_);
    }
  }
  return [this]() {
    while (RunKept()) {
    }
  };
}

bool PullState::RunKept() {
  Kept k;
  {
    absl::MutexLock lock(&defer_mu_);
    if (next_released_ == released_.size()) return false;
    k = std::move(released_[next_released_++]);
  }
  k.apply(*this);
  Part& part = *parts_[k.shard];
  absl::MutexLock lock(&part.mu);
  --part.kept;
  Settle(part, k.shard);
  return true;
}

void PullState::Fail(uint32_t shard, const absl::Status& status) {
  if (shard >= parts_.size()) return;
  Part& part = *parts_[shard];
  absl::MutexLock lock(&part.mu);
  if (part.finished) return;
  part.finished = true;
  End(status);
}

void PullState::Abandon() {
  for (auto& part : parts_) {
    absl::MutexLock lock(&part->mu);
    part->abandoned = true;
  }
  // Anyone still waiting learns it (a pull that ended keeps its status).
  if (!completion_->done()) End(absl::CancelledError("pull abandoned"));
}

bool PullState::abandoned(uint32_t shard) const {
  absl::MutexLock lock(&parts_[shard]->mu);
  return parts_[shard]->abandoned;
}

}  // namespace gradstream::client::internal
