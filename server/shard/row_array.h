// Rows of `dim` floats in blocks of 2 MiB (docs/design/sparse-tables.md,
// "Rows in blocks"): a new row never moves the rows held, so a table grows a
// block at a time instead of copying itself into an array twice its size.
#ifndef GRADSTREAM_SERVER_SHARD_ROW_ARRAY_H_
#define GRADSTREAM_SERVER_SHARD_ROW_ARRAY_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace gradstream::shard {

class RowArray {
 public:
  RowArray() = default;
  explicit RowArray(uint32_t dim);

  uint32_t dim() const { return dim_; }
  size_t rows() const { return rows_; }
  // Rows per block, a power of two; a block's rows are contiguous.
  size_t block_rows() const { return size_t{1} << shift_; }
  // Valid until Truncate drops the row.
  float* row(size_t i) { return blocks_[i >> shift_].get() + (i & mask_) * dim_; }
  const float* row(size_t i) const { return blocks_[i >> shift_].get() + (i & mask_) * dim_; }
  // A new last row, its values unset.
  float* Append();
  // Keeps the first `rows` rows (and the blocks they need).
  void Truncate(size_t rows);
  // Rows [begin, end) into `out`, contiguous.
  void CopyOut(size_t begin, size_t end, float* out) const;
  // Appends `rows` rows whose floats `read(float* out, size_t n)` fills a
  // block at a time; false as soon as a read returns false.
  template <typename Read>
  bool Fill(size_t rows, Read read) {
    while (rows > 0) {
      const size_t n = std::min(rows, block_rows() - (rows_ & mask_));
      float* out = Append();
      rows_ += n - 1;
      if (!read(out, n * dim_)) return false;
      rows -= n;
    }
    return true;
  }

 private:
  uint32_t dim_ = 0;
  int shift_ = 0;
  size_t mask_ = 0;
  size_t rows_ = 0;
  struct Free {
    void operator()(float* p) const;
  };
  std::vector<std::unique_ptr<float, Free>> blocks_;
};

}  // namespace gradstream::shard

#endif  // GRADSTREAM_SERVER_SHARD_ROW_ARRAY_H_
