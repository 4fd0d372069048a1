// Dataset helpers and the shuffling minibatch iterator.
#include "worker/data/dataset.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/data/rng.h"

namespace gradstream {

absl::Status ValidateDataset(const Dataset& data) {
  if (data.num_classes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes must be > 0, got ", data.num_classes));
  }
  if (data.shape.channels <= 0 || data.shape.height <= 0 || data.shape.width <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("bad input shape ", ShapeString(data.shape)));
  }
  const int64_t want = data.num_examples() * data.example_size();
  if (static_cast<int64_t>(data.features.size()) != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("features hold ", data.features.size(), " floats, expected ", want, " (",
                     data.num_examples(), " examples of ", ShapeString(data.shape), ")"));
  }
  for (int64_t i = 0; i < data.num_examples(); ++i) {
    if (data.labels[i] < 0 || data.labels[i] >= data.num_classes) {
      return absl::InvalidArgumentError(absl::StrCat("label ", data.labels[i], " of example ", i,
                                                     " is outside [0, ", data.num_classes, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Dataset> Subset(const Dataset& data, std::span<const int64_t> indices) {
  Dataset out;
  out.num_classes = data.num_classes;
  out.shape = data.shape;
  const int64_t d = data.example_size();
  out.features.resize(indices.size() * d);
  out.labels.resize(indices.size());
  for (size_t k = 0; k < indices.size(); ++k) {
    const int64_t i = indices[k];
    if (i < 0 || i >= data.num_examples()) {
      return absl::InvalidArgumentError(
          absl::StrCat("index ", i, " outside [0, ", data.num_examples(), ")"));
    }
    std::copy_n(data.example(i), d, out.features.data() + k * d);
    out.labels[k] = data.labels[i];
  }
  return out;
}

absl::StatusOr<std::unique_ptr<MinibatchIterator>> MinibatchIterator::Create(
    const Dataset* data, std::vector<int64_t> indices, int batch_size, uint64_t seed, int rank) {
  if (data == nullptr) return absl::InvalidArgumentError("null dataset");
  if (batch_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size must be > 0, got ", batch_size));
  }
  if (static_cast<int64_t>(indices.size()) < batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard has ", indices.size(), " examples, fewer than one batch of ", batch_size));
  }
  for (int64_t i : indices) {
    if (i < 0 || i >= data->num_examples()) {
      return absl::InvalidArgumentError(
          absl::StrCat("index ", i, " outside [0, ", data->num_examples(), ")"));
    }
  }
  return std::unique_ptr<MinibatchIterator>(
      new MinibatchIterator(data, std::move(indices), batch_size, seed, rank));
}

MinibatchIterator::MinibatchIterator(const Dataset* data, std::vector<int64_t> indices,
                                     int batch_size, uint64_t seed, int rank)
    : data_(data), indices_(std::move(indices)), batch_size_(batch_size), seed_(seed), rank_(rank) {
  batch_.x.resize(static_cast<size_t>(batch_size_) * data_->example_size());
  batch_.y.resize(batch_size_);
  batch_.size = batch_size_;
  Reshuffle();
}

void MinibatchIterator::Reshuffle() {
  // Always permute from the canonical order, so an epoch's permutation does
  // not depend on earlier epochs (a restarted worker can jump to any epoch).
  order_ = indices_;
  SplitMix64 rng(MixSeed(seed_, static_cast<uint64_t>(rank_), static_cast<uint64_t>(epoch_)));
  for (size_t i = order_.size() - 1; i > 0; --i) {
    std::swap(order_[i], order_[rng.UniformInt(i + 1)]);
  }
  pos_ = 0;
}

const Batch& MinibatchIterator::Next() {
  if (pos_ + batch_size_ > static_cast<int64_t>(order_.size())) {
    ++epoch_;
    Reshuffle();
  }
  const int64_t d = data_->example_size();
  for (int k = 0; k < batch_size_; ++k) {
    const int64_t i = order_[pos_ + k];
    std::copy_n(data_->example(i), d, batch_.x.data() + k * d);
    batch_.y[k] = data_->labels[i];
  }
  batch_.epoch = epoch_;
  pos_ += batch_size_;
  return batch_;
}

}  // namespace gradstream
