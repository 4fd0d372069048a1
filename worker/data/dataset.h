// In-memory datasets and the minibatch iterator.
//
// A Dataset is the common currency of the synthetic generator and the MNIST /
// CIFAR-10 loaders: features as float32 row-major [num_examples x
// example_size], int32 labels in [0, num_classes). Images are stored CHW
// (channel planes, then rows), which is what the models and cuDNN (NCHW) use.
//
// Which examples a worker owns is the worker runtime's split
// (worker/runtime/data_split.h), the same for the built-in trainer and the
// Python package.
#ifndef GRADSTREAM_WORKER_DATA_DATASET_H_
#define GRADSTREAM_WORKER_DATA_DATASET_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job/model.h"  // InputShape

namespace gradstream {

struct Dataset {
  std::vector<float> features;  // num_examples() x shape.elems(), row-major
  std::vector<int32_t> labels;  // num_examples(), each in [0, num_classes)
  int num_classes = 0;
  InputShape shape;

  int64_t num_examples() const { return static_cast<int64_t>(labels.size()); }
  int64_t example_size() const { return shape.elems(); }
  const float* example(int64_t i) const { return features.data() + i * example_size(); }
};

// A train split and a test split of the same task.
struct TrainTest {
  Dataset train;
  Dataset test;
};

// Checks the invariants above (sizes agree, labels in range, classes > 0).
// InvalidArgument with what is wrong.
[[nodiscard]] absl::Status ValidateDataset(const Dataset& data);

// Copies the listed examples into a new dataset (e.g. to materialize a shard).
// InvalidArgument on an out-of-range index.
[[nodiscard]] absl::StatusOr<Dataset> Subset(const Dataset& data, std::span<const int64_t> indices);

// One minibatch; owned by the iterator, valid until its next Next().
struct Batch {
  std::vector<float> x;    // size x example_size, row-major
  std::vector<int32_t> y;  // size
  int size = 0;
  int64_t epoch = 0;  // epoch this batch belongs to (0-based)
};

// Yields fixed-size minibatches over a subset of a dataset, reshuffling at the
// start of every epoch with a permutation that depends only on
// (seed, rank, epoch): Fisher–Yates over the shard's index list (in the order
// given), driven by SplitMix64(MixSeed(seed, rank, epoch)), swapping position
// i with UniformInt(i + 1) for i = n-1 down to 1.
//
// Every batch is full: the last size % batch_size examples of an epoch's
// permutation are skipped (they differ every epoch), so a sync round never
// waits for a short batch.
//
// Not thread-safe. Holds a non-owning pointer to the dataset, which must
// outlive the iterator.
class MinibatchIterator {
 public:
  // InvalidArgument when batch_size <= 0, the index list is shorter than one
  // batch, or an index is out of range.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MinibatchIterator>> Create(
      const Dataset* data, std::vector<int64_t> indices, int batch_size, uint64_t seed, int rank);

  // The next batch (reference valid until the next call).
  const Batch& Next();

  int64_t batches_per_epoch() const { return static_cast<int64_t>(order_.size()) / batch_size_; }
  // Epoch of the batch Next() will return.
  int64_t epoch() const { return epoch_; }

 private:
  MinibatchIterator(const Dataset* data, std::vector<int64_t> indices, int batch_size,
                    uint64_t seed, int rank);
  void Reshuffle();

  const Dataset* const data_;
  const std::vector<int64_t> indices_;
  const int batch_size_;
  const uint64_t seed_;
  const int rank_;
  std::vector<int64_t> order_;  // this epoch's permutation of indices_
  int64_t epoch_ = 0;
  int64_t pos_ = 0;  // next position in order_
  Batch batch_;
};

}  // namespace gradstream

#endif  // GRADSTREAM_WORKER_DATA_DATASET_H_
