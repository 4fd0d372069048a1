// MNIST loader for the four standard IDX files (LeCun et al., 1998).
//
// Format (http://yann.lecun.com/exdb/mnist/): big-endian uint32 header.
//   images: magic 2051 (0x00000803), count, rows, cols, then count*rows*cols
//           unsigned bytes, row-major.
//   labels: magic 2049 (0x00000801), count, then count unsigned bytes (0..9).
// Pixels are scaled to [0, 1] (p / 255); the dataset shape is {1, rows, cols}
// and num_classes is 10. Files are read from disk; nothing is downloaded and
// gzip is not handled (gunzip them first).
//
// Errors: NotFound (missing file, with its path); InvalidArgument for a bad
// magic number, a truncated or oversized file, zero dimensions, mismatching
// image/label counts or a label > 9, each naming the file and the problem.
// Thread-compatible (no shared state).
#ifndef GRADSTREAM_WORKER_DATA_MNIST_H_
#define GRADSTREAM_WORKER_DATA_MNIST_H_

#include <string>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"

namespace gradstream {

inline constexpr char kMnistTrainImages[] = "train-images-idx3-ubyte";
inline constexpr char kMnistTrainLabels[] = "train-labels-idx1-ubyte";
inline constexpr char kMnistTestImages[] = "t10k-images-idx3-ubyte";
inline constexpr char kMnistTestLabels[] = "t10k-labels-idx1-ubyte";

// Loads one split from an images file and a labels file.
[[nodiscard]] absl::StatusOr<Dataset> LoadMnistFiles(const std::string& images_path,
                                                     const std::string& labels_path);

// Loads train and test from `dir`, which holds the four files named above.
[[nodiscard]] absl::StatusOr<TrainTest> LoadMnist(const std::string& dir);

}  // namespace gradstream

#endif  // GRADSTREAM_WORKER_DATA_MNIST_H_
