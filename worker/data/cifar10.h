// CIFAR-10 loader for the binary version (Krizhevsky, 2009).
//
// Format (https://www.cs.toronto.edu/~kriz/cifar.html, "binary version"):
// a file is a sequence of 3073-byte records: 1 label byte (0..9), then 3072
// pixel bytes: the 1024 red values of the 32x32 image row-major, then green,
// then blue. That is already CHW, so records are copied in order and scaled
// to [0, 1] (p / 255). Shape {3, 32, 32}, num_classes 10.
// Train = data_batch_1.bin .. data_batch_5.bin (in that order), test =
// test_batch.bin. Nothing is downloaded. The batches are read as distributed
// (cifar-10-binary.tar.gz, holding cifar-10-batches-bin/*.bin) or
// extracted; any file may also be gzip-compressed (recognised by its magic).
// A batch is at most kCifarMaxBatchBytes (a real one is 30,730,000), checked
// before it is kept in memory.
//
// Errors: NotFound (missing file or archive member, with its path);
// InvalidArgument for an empty batch, a size that is not a multiple of 3073
// (truncated record), a label > 9, a corrupt gzip stream or tar header, or an
// archive cut short, naming the file (and member) and the problem.
// Thread-compatible.
#ifndef GRADSTREAM_WORKER_DATA_CIFAR10_H_
#define GRADSTREAM_WORKER_DATA_CIFAR10_H_

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"

namespace gradstream {

inline constexpr int kCifarRecordBytes = 1 + 3 * 32 * 32;
inline constexpr uint64_t kCifarMaxBatchBytes = uint64_t{1} << 28;
inline constexpr char kCifarArchive[] = "cifar-10-binary.tar.gz";
inline constexpr char kCifarBatchDir[] = "cifar-10-batches-bin";

// Loads and concatenates the given batch files, in order.
[[nodiscard]] absl::StatusOr<Dataset> LoadCifar10Files(std::span<const std::string> paths);

// Loads train (data_batch_1..5.bin) and test (test_batch.bin) from `path`:
//   - a tar archive (gzip-compressed or not), such as cifar-10-binary.tar.gz;
//   - a directory holding the batches, or a cifar-10-batches-bin/ folder
//     with them, or cifar-10-binary.tar.gz (tried in that order).
[[nodiscard]] absl::StatusOr<TrainTest> LoadCifar10(const std::string& path);

// Loads train and test from the members of a tar archive (see above).
[[nodiscard]] absl::StatusOr<TrainTest> LoadCifar10Archive(const std::string& archive_path);

}  // namespace gradstream

#endif  // GRADSTREAM_WORKER_DATA_CIFAR10_H_
