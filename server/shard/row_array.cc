#include "server/shard/row_array.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace gradstream::shard {

namespace {

// A block is a huge page where a row fits in one: rows are read at random
// over a table far larger than the TLB's reach in 4 KiB pages.
constexpr size_t kBlockBytes = size_t{2} << 20;

}  // namespace

void RowArray::Free::operator()(float* p) const { std::free(p); }

RowArray::RowArray(uint32_t dim) : dim_(dim) {
  constexpr size_t kBlockFloats = kBlockBytes / sizeof(float);
  while (dim_ > 0 && (size_t{dim_} << (shift_ + 1)) <= kBlockFloats) ++shift_;
  mask_ = block_rows() - 1;
}

float* RowArray::Append() {
  if ((rows_ >> shift_) == blocks_.size()) {
    const size_t pages = (block_rows() * dim_ * sizeof(float) + kBlockBytes - 1) / kBlockBytes;
    const size_t rounded = std::max<size_t>(1, pages) * kBlockBytes;
    void* p = std::aligned_alloc(kBlockBytes, rounded);
    if (p == nullptr) throw std::bad_alloc();
    // Advice (without it, 4 KiB pages), from the second block on: a huge
    // page is resident whole, and a small table should cost what it touches.
    if (!blocks_.empty()) madvise(p, rounded, MADV_HUGEPAGE);
    blocks_.emplace_back(static_cast<float*>(p));
  }
  return row(rows_++);
}

void RowArray::Truncate(size_t rows) {
  rows_ = std::min(rows_, rows);
  blocks_.resize((rows_ + mask_) >> shift_);
}

void RowArray::CopyOut(size_t begin, size_t end, float* out) const {
  while (begin < end) {
    const size_t n = std::min(end - begin, block_rows() - (begin & mask_));
    std::memcpy(out, row(begin), n * dim_ * sizeof(float));
    out += n * dim_;
    begin += n;
  }
}

}  // namespace gradstream::shard
