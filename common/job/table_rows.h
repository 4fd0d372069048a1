// Rows a table partition holds and moved, or their sum over a table's
// partitions (docs/design/sparse-tables.md): what a shard reports and the
// coordinator and CLI show. Its wire form is v1::TableRows (precision_proto.h).
#ifndef GRADSTREAM_COMMON_JOB_TABLE_ROWS_H_
#define GRADSTREAM_COMMON_JOB_TABLE_ROWS_H_

#include <cstdint>

namespace gradstream {

struct TableRowStats {
  uint64_t held = 0;
  uint64_t bytes = 0;   // values and optimizer state
  uint64_t pushed = 0;  // rows summed over every push
  uint64_t pulled = 0;  // and pull
  // Partitions whose rows a shard restart without a checkpoint lost: they
  // started again from the table's initializer.
  uint64_t lost = 0;

  TableRowStats& operator+=(const TableRowStats& o) {
    held += o.held;
    bytes += o.bytes;
    pushed += o.pushed;
    pulled += o.pulled;
    lost += o.lost;
    return *this;
  }
};

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_JOB_TABLE_ROWS_H_
