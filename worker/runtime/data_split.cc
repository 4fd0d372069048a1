#include "worker/runtime/data_split.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gradstream::runtime {

absl::StatusOr<std::vector<std::vector<int64_t>>> SplitPass(absl::Span<const int64_t> perm,
                                                            uint32_t rank, uint32_t world_size,
                                                            BatchSize size) {
  if ((size.per_worker > 0) == (size.global > 0) || size.per_worker < 0 || size.global < 0) {
    return absl::InvalidArgumentError(
        "gradstream: give a per-worker batch size or a global batch size, exactly one positive");
  }
  if (world_size == 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradstream: rank ", rank, " of world size ", world_size));
  }
  const int64_t n = static_cast<int64_t>(perm.size());
  const int64_t world = world_size;
  std::vector<std::vector<int64_t>> out;
  if (n == 0) return out;
  if (size.per_worker > 0) {
    const int64_t total = (n + world - 1) / world * world;  // padded from the start
    std::vector<int64_t> mine;
    for (int64_t i = rank; i < total; i += world) mine.push_back(perm[i % n]);
    for (size_t start = 0; start < mine.size(); start += size.per_worker) {
      const size_t end = std::min(mine.size(), start + static_cast<size_t>(size.per_worker));
      out.emplace_back(mine.begin() + start, mine.begin() + end);
    }
    return out;
  }
  if (size.global < world) {
    return absl::InvalidArgumentError(absl::StrCat("gradstream: global_batch_size ", size.global,
                                                   " is smaller than the world size ", world));
  }
  for (int64_t start = 0; start < n; start += size.global) {
    std::vector<int64_t> batch(perm.begin() + start,
                               perm.begin() + std::min(n, start + size.global));
    for (int64_t k = 0; static_cast<int64_t>(batch.size()) < world; ++k) {
      batch.push_back(perm[k % n]);
    }
    std::vector<int64_t> piece;
    for (size_t i = rank; i < batch.size(); i += world) piece.push_back(batch[i]);
    out.push_back(std::move(piece));
  }
  return out;
}

}  // namespace gradstream::runtime
