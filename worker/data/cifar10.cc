// CIFAR-10 binary records, validated file by file before anything is appended.
#include "worker/data/cifar10.h"

#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/data/internal/read_file.h"

namespace gradstream {

absl::StatusOr<Dataset> LoadCifar10Files(std::span<const std::string> paths) {
  if (paths.empty()) return absl::InvalidArgumentError("no CIFAR-10 batch files given");
  constexpr int kPixels = kCifarRecordBytes - 1;
  Dataset out;
  out.num_classes = 10;
  out.shape = InputShape{3, 32, 32};
  for (const std::string& path : paths) {
    GS_ASSIGN_OR_RETURN(const std::string bytes, internal::ReadFileBytes(path));
    if (bytes.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": empty file"));
    if (bytes.size() % kCifarRecordBytes != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": size ", bytes.size(), " is not a multiple of the ", kCifarRecordBytes,
          "-byte record (truncated record ", bytes.size() / kCifarRecordBytes, "?)"));
    }
    const size_t records = bytes.size() / kCifarRecordBytes;
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    for (size_t r = 0; r < records; ++r) {
      if (p[r * kCifarRecordBytes] > 9) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": label ", int{p[r * kCifarRecordBytes]}, " of record ", r, " is not in 0..9"));
      }
    }
    const size_t base = out.features.size();
    out.features.resize(base + records * kPixels);
    float* f = out.features.data() + base;
    for (size_t r = 0; r < records; ++r) {
      const unsigned char* rec = p + r * kCifarRecordBytes;
      out.labels.push_back(rec[0]);
      for (int j = 0; j < kPixels; ++j) f[r * kPixels + j] = rec[1 + j] / 255.0f;
    }
  }
  return out;
}

absl::StatusOr<TrainTest> LoadCifar10(const std::string& dir) {
  const std::filesystem::path d(dir);
  std::vector<std::string> train;
  for (int i = 1; i <= 5; ++i) train.push_back(d / absl::StrCat("data_batch_", i, ".bin"));
  const std::vector<std::string> test = {d / "test_batch.bin"};
  TrainTest out;
  GS_ASSIGN_OR_RETURN(out.train, LoadCifar10Files(train));
  GS_ASSIGN_OR_RETURN(out.test, LoadCifar10Files(test));
  return out;
}

}  // namespace gradstream
