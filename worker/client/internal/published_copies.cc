// PublishedCopies. See published_copies.h and [pull codec].
#include "worker/client/internal/published_copies.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/codec/decoder.h"
#include "common/codec/published.h"

namespace gradstream::client::internal {

PublishedCopies::PublishedCopies(const std::vector<uint32_t>& chunk_elems) {
  copies_.reserve(chunk_elems.size());
  for (uint32_t n : chunk_elems) copies_.push_back(std::make_unique<Copy>(n));
}

std::optional<PublishedCopies::Held> PublishedCopies::held(uint64_t chunk_id,
                                                           const float* dst) const {
  if (chunk_id >= copies_.size()) return std::nullopt;
  const Copy& c = *copies_[chunk_id];
  absl::MutexLock l(&c.mu);
  if (c.at == nullptr || c.at != dst) return std::nullopt;
  return c.held;
}

absl::Status PublishedCopies::Apply(uint64_t chunk_id, const PublishedAnswer& answer, float* dst) {
  if (chunk_id >= copies_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("published answer for unknown chunk ", chunk_id));
  }
  Copy& c = *copies_[chunk_id];
  absl::MutexLock l(&c.mu);
  const absl::Span<float> copy(dst, c.num_elems);
  const size_t bytes = copy.size() * sizeof(float);
  absl::StatusOr<uint32_t> mine = absl::InternalError("no answer applied");
  if (!answer.snapshot.empty()) {
    if (answer.snapshot.size() != bytes) {
      mine = absl::InvalidArgumentError(absl::StrCat("published snapshot of chunk ", chunk_id,
                                                     " has ", answer.snapshot.size(),
                                                     " bytes, want ", bytes));
    } else {
      std::memcpy(dst, answer.snapshot.data(), bytes);  // little-endian hosts only
      mine = PublishedChecksum(copy);
    }
  } else if (c.at == nullptr || c.at != dst) {
    mine = absl::InvalidArgumentError(absl::StrCat(
        "chunk ", chunk_id, ": the shard sent deltas, but no copy is held in this buffer"));
  } else {
    // Every delta is checked before the first is applied: dst stays
    // untouched on InvalidArgument.
    std::vector<ChunkDecoder> deltas;
    deltas.reserve(answer.deltas.size());
    for (const auto& [header, payload] : answer.deltas) {
      absl::StatusOr<ChunkDecoder> d = ChunkDecoder::Create(
          header, absl::string_view(payload.data(), payload.size()), c.num_elems, 1.0f);
      if (!d.ok()) {
        mine = d.status();
        break;
      }
      deltas.push_back(*std::move(d));
    }
    if (deltas.size() == answer.deltas.size()) {
      // No delta: the copy is current, checked as it stands.
      if (deltas.empty()) mine = PublishedChecksum(copy);
      for (const ChunkDecoder& d : deltas) mine = ApplyPublishedDelta(d, copy);
    }
  }
  absl::Status s = mine.status();
  if (s.ok() && *mine != answer.checksum) {
    s = absl::DataLossError(absl::StrCat(
        "chunk ", chunk_id, ": published copy at version ", answer.version, " has checksum ",
        *mine, ", the shard's has ", answer.checksum, " (the next pull asks for a snapshot)"));
  }
  if (!s.ok()) {
    c.at = nullptr;
    return s;
  }
  c.held = Held{answer.version, answer.checksum};
  c.at = dst;
  return absl::OkStatus();
}

std::vector<std::pair<uint64_t, PublishedCopies::Held>> PublishedCopies::Summary() const {
  std::vector<std::pair<uint64_t, Held>> out;
  for (uint64_t id = 0; id < copies_.size(); ++id) {
    absl::MutexLock l(&copies_[id]->mu);
    if (copies_[id]->at != nullptr) out.emplace_back(id, copies_[id]->held);
  }
  return out;
}

}  // namespace gradstream::client::internal
