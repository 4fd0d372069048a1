// CIFAR-10 loader for the binary version (Krizhevsky, 2009).
//
// Format (https://www.cs.toronto.edu/~kriz/cifar.html, "binary version"):
// a file is a sequence of 3073-byte records: 1 label byte (0..9), then 3072
// pixel bytes: the 1024 red values of the 32x32 image row-major, then green,
// then blue. That is already CHW, so records are copied in order and scaled
// to [0, 1] (p / 255). Shape {3, 32, 32}, num_classes 10.
// Train = data_batch_1.bin .. data_batch_5.bin (in that order), test =
// test_batch.bin. Nothing is downloaded.
//
// Errors: NotFound (missing file, with its path); InvalidArgument for an empty
// file, a size that is not a multiple of 3073 (truncated record) or a label
// > 9, naming the file, the record and the problem. Thread-compatible.
#ifndef GRADSTREAM_WORKER_DATA_CIFAR10_H_
#define GRADSTREAM_WORKER_DATA_CIFAR10_H_

#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"

namespace gradstream {

inline constexpr int kCifarRecordBytes = 1 + 3 * 32 * 32;

// Loads and concatenates the given batch files, in order.
[[nodiscard]] absl::StatusOr<Dataset> LoadCifar10Files(std::span<const std::string> paths);

// Loads train (data_batch_1..5.bin) and test (test_batch.bin) from `dir`.
[[nodiscard]] absl::StatusOr<TrainTest> LoadCifar10(const std::string& dir);

}  // namespace gradstream

#endif  // GRADSTREAM_WORKER_DATA_CIFAR10_H_
