// MNIST loader for the four standard IDX files (LeCun et al., 1998).
//
// Format (http://yann.lecun.com/exdb/mnist/): big-endian uint32 header.
//   images: magic 2051 (0x00000803), count, rows, cols, then count*rows*cols
//           unsigned bytes, row-major.
//   labels: magic 2049 (0x00000801), count, then count unsigned bytes (0..9).
// Pixels are scaled to [0, 1] (p / 255); the dataset shape is {1, rows, cols}
// and num_classes is 10. Files are read from disk, nothing is downloaded.
// Each file may be gzip-compressed as distributed (Debian's
// dataset-fashion-mnist ships the four files as NAME.gz under
// /usr/share/datasets/fashion-mnist); compression is recognised by the gzip
// magic bytes, so the name does not matter to LoadMnistFiles.
//
// Bounds: a side is at most kMnistMaxSide pixels and the pixel body at most
// kMnistMaxBodyBytes, checked before anything is allocated; the body is read
// as it arrives, so a header that promises more than the file holds fails
// as "truncated" without allocating the promised size.
//
// Errors: NotFound (missing file, with its path); InvalidArgument for a bad
// magic number, bad dimensions, image/label counts that disagree, a
// truncated body or header, trailing bytes, a label > 9 or a corrupt gzip
// stream, each message starting with the file's path and saying what is
// wrong. Thread-compatible (no shared state).
#ifndef GRADSTREAM_WORKER_DATA_MNIST_H_
#define GRADSTREAM_WORKER_DATA_MNIST_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"

namespace gradstream {

inline constexpr char kMnistTrainImages[] = "train-images-idx3-ubyte";
inline constexpr char kMnistTrainLabels[] = "train-labels-idx1-ubyte";
inline constexpr char kMnistTestImages[] = "t10k-images-idx3-ubyte";
inline constexpr char kMnistTestLabels[] = "t10k-labels-idx1-ubyte";

inline constexpr uint32_t kMnistMaxSide = 1 << 14;
inline constexpr uint64_t kMnistMaxBodyBytes = uint64_t{1} << 30;

// Loads one split from an images file and a labels file.
[[nodiscard]] absl::StatusOr<Dataset> LoadMnistFiles(const std::string& images_path,
                                                     const std::string& labels_path);

// Loads train and test from `dir`, which holds the four files named above,
// each either as NAME or as NAME.gz (the plain file wins when both exist).
// NotFound names both candidates when neither exists.
[[nodiscard]] absl::StatusOr<TrainTest> LoadMnist(const std::string& dir);

}  // namespace gradstream

#endif  // GRADSTREAM_WORKER_DATA_MNIST_H_
