// PublishedCopies. See published_copies.h and [pull codec].
#include "worker/client/internal/published_copies.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/codec/published.h"

namespace gradstream::client::internal {

PublishedCopies::PublishedCopies(const std::vector<uint32_t>& chunk_elems) {
  copies_.reserve(chunk_elems.size());
  for (uint32_t n : chunk_elems) {
    auto c = std::make_unique<Copy>();
    absl::MutexLock l(&c->mu);
    c->values.resize(n);
    copies_.push_back(std::move(c));
  }
}

std::optional<PublishedCopies::Held> PublishedCopies::held(uint64_t chunk_id) const {
  if (chunk_id >= copies_.size()) return std::nullopt;
  const Copy& c = *copies_[chunk_id];
  absl::MutexLock l(&c.mu);
  if (!c.has) return std::nullopt;
  return c.held;
}

absl::Status PublishedCopies::Apply(uint64_t chunk_id, const PublishedAnswer& answer, float* dst) {
  if (chunk_id >= copies_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("published answer for unknown chunk ", chunk_id));
  }
  Copy& c = *copies_[chunk_id];
  absl::MutexLock l(&c.mu);
  const size_t bytes = c.values.size() * sizeof(float);
  // The copy's checksum and dst = the copy come out of one pass over the
  // chunk (see [fused apply]): dst is written before the checksum is known.
  absl::StatusOr<uint32_t> mine = absl::InternalError("no answer applied");
  if (!answer.snapshot.empty()) {
    if (answer.snapshot.size() != bytes) {
      mine = absl::InvalidArgumentError(absl::StrCat("published snapshot of chunk ", chunk_id,
                                                     " has ", answer.snapshot.size(),
                                                     " bytes, want ", bytes));
    } else {
      std::memcpy(c.values.data(), answer.snapshot.data(), bytes);  // little-endian hosts only
      mine = ChecksumAndCopy(c.values, dst);
    }
  } else if (!c.has) {
    mine = absl::InvalidArgumentError(
        absl::StrCat("chunk ", chunk_id, ": the shard sent deltas, but no copy is held"));
  } else if (answer.deltas.empty()) {
    mine = ChecksumAndCopy(c.values, dst);
  } else {
    for (size_t i = 0; i < answer.deltas.size(); ++i) {
      const auto& [header, payload] = answer.deltas[i];
      const bool last = i + 1 == answer.deltas.size();
      mine = ApplyPublishedDelta(header, absl::string_view(payload.data(), payload.size()),
                                 absl::MakeSpan(c.values), last ? dst : nullptr);
      if (!mine.ok()) break;
    }
  }
  absl::Status s = mine.status();
  if (s.ok() && *mine != answer.checksum) {
    s = absl::DataLossError(absl::StrCat(
        "chunk ", chunk_id, ": published copy at version ", answer.version, " has checksum ",
        *mine, ", the shard's has ", answer.checksum, " (the next pull asks for a snapshot)"));
  }
  if (!s.ok()) {
    c.has = false;
    return s;
  }
  c.has = true;
  c.held = Held{answer.version, answer.checksum};
  return absl::OkStatus();
}

std::vector<std::pair<uint64_t, PublishedCopies::Held>> PublishedCopies::Summary() const {
  std::vector<std::pair<uint64_t, Held>> out;
  for (uint64_t id = 0; id < copies_.size(); ++id) {
    absl::MutexLock l(&copies_[id]->mu);
    if (copies_[id]->has) out.emplace_back(id, copies_[id]->held);
  }
  return out;
}

}  // namespace gradstream::client::internal
