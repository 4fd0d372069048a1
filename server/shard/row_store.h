// The rows of one partition of a row-sparse table on a shard, and how row
// gradients reach them (docs/design/sparse-tables.md). A partition is a
// chunk (ChunkState::rows), so every consistency mode, exactly-once push,
// parked pull and checkpoint applies to it as to a dense chunk.
#ifndef GRADSTREAM_SERVER_SHARD_ROW_STORE_H_
#define GRADSTREAM_SERVER_SHARD_ROW_STORE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/job/row_partition.h"
#include "common/optim/optimizer.h"
#include "server/shard/row_array.h"
#include "server/shard/types.h"

namespace gradstream::shard {

// Row `row`'s initial values: spec.dim draws of N(0, init_std^2), a function
// of (seed, table, row) only, whichever worker or partition touches it first.
void InitialRow(const TableSpec& spec, uint64_t row, float* out);

// What one job's table rows take on a shard, shared by its partitions.
struct RowBudget {
  explicit RowBudget(uint64_t max = 0) : max_bytes(max) {}
  uint64_t held() const { return rows.load() + kept.load(); }

  const uint64_t max_bytes;  // 0: no limit
  std::atomic<uint64_t> rows{0};  // rows with their state, ids and index entries
  std::atomic<uint64_t> kept{0};  // old rows an open [row snapshot] keeps
  // Set when new rows needed the bytes kept for a checkpoint: the open
  // images give them back, and that checkpoint fails.
  std::atomic<bool> rows_first{false};
};

// Rows created on first touch. Not thread-safe: the partition's
// ChunkState::mu guards it. A row's pointers stay valid until DropNewest
// or Restore drops it.
class RowStore {
 public:
  // `optimizer` gives the state slots a row starts with. `budget` (may be
  // null, must outlive the store) counts the bytes of every row created and
  // kept, and bounds what an open image keeps.
  RowStore(const TableSpec& spec, const Optimizer& optimizer, RowBudget* budget = nullptr);

  const TableSpec& spec() const { return spec_; }
  // InvalidArgument naming the first id that is not a row of the table, not
  // of this partition, or (when `unique`) there twice.
  [[nodiscard]] absl::Status CheckIds(absl::Span<const uint64_t> ids, bool unique) const;
  // The row's index, created with its initial values on first touch.
  uint32_t Touch(uint64_t row);
  // out[i] = Touch(ids[i]), with the index's memory fetched a few rows ahead
  // (a table's index is far larger than the caches).
  void TouchAll(absl::Span<const uint64_t> ids, uint32_t* out);
  bool Has(uint64_t row) const { return index_.contains(row); }
  // Forgets the rows created after the store held `keep`: an update refused
  // after it touched its rows leaves none behind.
  void DropNewest(size_t keep);
  // What a row's id and index entry take at most: 8 bytes of id, and a
  // 16-byte slot and a control byte of the index at its peak, while it
  // doubles (the old array at 7/8 full and the new one, 17 * 3 / (7/8)).
  static constexpr uint64_t kIdAndIndexBytes = 8 + 60;
  // Bytes one row takes at most: its values, state slots, id and index entry.
  uint64_t row_bytes() const {
    return uint64_t{spec_.dim} * sizeof(float) * (1 + slots_.size()) + kIdAndIndexBytes;
  }
  // Bytes the store takes: its rows, and what an open image keeps.
  uint64_t bytes() const { return size() * row_bytes() + kept_.size() * kept_row_bytes(); }
  float* params(uint32_t index) { return values_.row(index); }
  float* slot(int k, uint32_t index) { return slots_[k].row(index); }
  size_t size() const { return ids_.size(); }
  int num_slots() const { return static_cast<int>(slots_.size()); }

  // NOTE: [row snapshot]
  // What a checkpoint keeps is an image of the rows as they were at
  // BeginSnapshot(), read in blocks while pushes and pulls go on: the first
  // change of a row of the image keeps its old values (KeepForSnapshot),
  // rows created since are not in it. Memory: the rows changed while the
  // image is open and not yet read by the last array's pass, counted in the
  // budget; a keep past the budget, or new rows that need the bytes
  // (RowBudget::rows_first), fail the image instead. One image at a time;
  // EndSnapshot() drops it.
  void BeginSnapshot();
  void EndSnapshot();
  // Rows in the image (creation order).
  uint64_t snapshot_rows() const { return snapshot_rows_; }
  // Rows [begin, end) of the image: their ids, or (`array` -1) their values
  // or (`array` k) state slot k, end - begin rows x dim floats. Reading the
  // last array (the last slot, or the values without slots) in order frees
  // what was kept of those rows. ResourceExhausted once the image failed.
  [[nodiscard]] absl::Status SnapshotIds(uint64_t begin, uint64_t end, uint64_t* out);
  [[nodiscard]] absl::Status SnapshotFloats(int array, uint64_t begin, uint64_t end, float* out);
  // Called before row `index` changes.
  void KeepForSnapshot(uint32_t index);
  // What keeping one row takes at most: its values and state slots, a
  // heap block's header, and the map's 32-byte slot and control byte at
  // its peak while it doubles (33 * 3 / (7/8)).
  static constexpr uint64_t kKeptEntryBytes = 16 + 114;
  uint64_t kept_row_bytes() const {
    return uint64_t{spec_.dim} * sizeof(float) * (1 + slots_.size()) + kKeptEntryBytes;
  }

  // Replaces the store with checkpointed rows in creation order, a row of
  // `values` and of each state slot per id (InvalidArgument for sizes that
  // do not fit the spec, an id twice or an id not of this partition).
  [[nodiscard]] absl::Status Restore(std::vector<uint64_t> ids, RowArray values,
                                     std::vector<RowArray> slots);

 private:
  void DropKept();
  // Frees what the image kept; its reads fail with `why` from now on.
  void FailSnapshot(std::string why);
  // Fails the image when new rows asked for the bytes it keeps.
  void YieldToRows();

  const TableSpec spec_;
  RowBudget* const budget_;
  std::vector<float> slot_init_;  // per slot: the value a fresh row's state starts at
  absl::flat_hash_map<uint64_t, uint32_t> index_;
  // A deque, not a vector: it grows a node at a time, never holding the ids
  // twice.
  std::deque<uint64_t> ids_;
  RowArray values_;
  std::vector<RowArray> slots_;
  // [row snapshot]: rows of the image, the first `released_` of which the
  // last pass has read, and the old values and slots of those changed since
  // it began, by index.
  bool snapshot_open_ = false;
  uint64_t snapshot_rows_ = 0;
  uint64_t released_ = 0;
  absl::Status snapshot_status_;
  absl::flat_hash_map<uint32_t, std::vector<float>> kept_;
};

// A sync round's sum of row gradients, in first-touch order.
struct RowSum {
  absl::flat_hash_map<uint64_t, uint32_t> index;
  std::vector<uint64_t> ids;
  std::vector<float> sum;
};

// Checks a push of rows: ids by CheckIds (each once), values the size of
// ids x dim and finite. InvalidArgument naming what is wrong.
[[nodiscard]] absl::Status CheckRowGrads(const RowStore& store, const RowGrads& grads);
// Adds checked `grads` to `sum`; InvalidArgument (and `sum` unchanged) when
// a sum would not be finite.
[[nodiscard]] absl::Status AddRows(const RowGrads& grads, uint32_t dim, RowSum* sum);
// Rows `ids` of `store` (created on first read) into `out->values`: fp32,
// or with `fp16` in half under one scale (common/codec/half_rows.h).
void ReadRows(absl::Span<const uint64_t> ids, bool fp16, RowStore* store, PulledRows* out);
// One optimizer step over the rows of `sum` (or of `grads`), scaled by
// `scale`; untouched rows do not change. See Optimizer::ApplyRows.
[[nodiscard]] absl::Status ApplyRowSum(const Optimizer& optimizer, const RowSum& sum, float scale,
                                       RowStore* store, OptimizerState* state);
[[nodiscard]] absl::Status ApplyRowGrads(const Optimizer& optimizer, const RowGrads& grads,
                                         float scale, RowStore* store, OptimizerState* state);

}  // namespace gradstream::shard

#endif  // GRADSTREAM_SERVER_SHARD_ROW_STORE_H_
