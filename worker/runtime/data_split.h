// How one pass over a dataset is split among a job's members at a clock:
// the one rule both front-ends use (the built-in trainer, and the Python
// package's gs.shard through gs_split_pass). Each front-end draws the pass's
// permutation with its own generator; the split of it is this.
#ifndef GRADSTREAM_WORKER_RUNTIME_DATA_SPLIT_H_
#define GRADSTREAM_WORKER_RUNTIME_DATA_SPLIT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace gradstream::runtime {

// Exactly one is positive.
struct BatchSize {
  // Per worker (as with DDP or Horovod): a clock consumes per_worker *
  // world_size samples.
  int64_t per_worker = 0;
  // Split across the members: a clock consumes `global` samples whatever
  // the world size, so scaling changes neither the batch nor what the
  // learning rate means.
  int64_t global = 0;
};

// Rank `rank` of `world_size`'s batches of one pass over `perm` (the
// pass's order of example indices).
// Per worker: perm is padded with its first indices to a multiple of
// world_size (as torch's DistributedSampler does); rank r takes
// perm[r::world_size], cut into per_worker pieces (the last may be short).
// Global: perm is cut into ceil(n / global) global batches; rank r takes
// every world_size-th index of each, starting at r; a last batch smaller
// than world_size is padded with the pass's first indices, so every rank
// has a piece and every rank makes the same number of clocks per pass.
// InvalidArgument when neither or both sizes are positive, rank >=
// world_size, or global < world_size.
[[nodiscard]] absl::StatusOr<std::vector<std::vector<int64_t>>> SplitPass(
    absl::Span<const int64_t> perm, uint32_t rank, uint32_t world_size, BatchSize size);

}  // namespace gradstream::runtime

#endif  // GRADSTREAM_WORKER_RUNTIME_DATA_SPLIT_H_
