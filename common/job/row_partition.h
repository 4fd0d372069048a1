// Which partition of a row-sparse table holds a row (docs/design/sparse-tables.md):
// the one function workers and shards both use to place rows.
#ifndef GRADSTREAM_COMMON_JOB_ROW_PARTITION_H_
#define GRADSTREAM_COMMON_JOB_ROW_PARTITION_H_

#include <cstdint>

#include "common/philox.h"

namespace gradstream {

// A hash, so that a vocabulary's frequent ids (which it numbers first)
// spread over every partition; depends on (table, row, partitions) only.
inline uint32_t RowPartition(uint32_t table, uint64_t row, uint32_t partitions) {
  if (partitions <= 1) return 0;
  const uint64_t h = SplitMix64(row ^ SplitMix64(0x7461626c65ull + table));  // "table"
  // Lemire's multiply-shift: uniform over [0, partitions) without a division.
  return static_cast<uint32_t>((static_cast<unsigned __int128>(h) * partitions) >> 64);
}

// The most bytes (values, and ids at 8 each) of one partition's rows one
// worker pushes in one clock, over all the pieces they travel in (ps.proto,
// PushedRows): what a shard holds for a stream before it applies them.
inline constexpr uint64_t kMaxPushedRowsBytes = uint64_t{256} << 20;

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_JOB_ROW_PARTITION_H_
