// CIFAR-10 binary records, validated batch by batch before anything is
// appended; batches come from files or from the members of the archive.
#include "worker/data/cifar10.h"

#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status.h"
#include "worker/data/internal/byte_source.h"
#include "worker/data/internal/tar.h"

namespace gradstream {
namespace {

constexpr int kPixels = kCifarRecordBytes - 1;

std::vector<std::string> TrainNames() {
  std::vector<std::string> names;
  for (int i = 1; i <= 5; ++i) names.push_back(absl::StrCat("data_batch_", i, ".bin"));
  return names;
}
constexpr char kTestName[] = "test_batch.bin";

// Appends the records of one batch; `where` names it in errors.
absl::Status AppendRecords(absl::string_view where, absl::string_view bytes, Dataset* out) {
  if (bytes.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": empty file"));
  if (bytes.size() % kCifarRecordBytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": size ", bytes.size(), " is not a multiple of the ", kCifarRecordBytes,
        "-byte record (truncated record ", bytes.size() / kCifarRecordBytes, "?)"));
  }
  const size_t records = bytes.size() / kCifarRecordBytes;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  for (size_t r = 0; r < records; ++r) {
    if (p[r * kCifarRecordBytes] > 9) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": label ", int{p[r * kCifarRecordBytes]}, " of record ", r, " is not in 0..9"));
    }
  }
  const size_t base = out->features.size();
  out->features.resize(base + records * kPixels);
  float* f = out->features.data() + base;
  for (size_t r = 0; r < records; ++r) {
    const unsigned char* rec = p + r * kCifarRecordBytes;
    out->labels.push_back(rec[0]);
    for (int j = 0; j < kPixels; ++j) f[r * kPixels + j] = rec[1 + j] / 255.0f;
  }
  return absl::OkStatus();
}

Dataset EmptyCifar() {
  Dataset d;
  d.num_classes = 10;
  d.shape = InputShape{3, 32, 32};
  return d;
}

absl::StatusOr<TrainTest> LoadDirectory(const std::filesystem::path& dir) {
  std::vector<std::string> train;
  for (const std::string& name : TrainNames()) train.push_back(dir / name);
  const std::vector<std::string> test = {dir / kTestName};
  TrainTest out;
  GS_ASSIGN_OR_RETURN(out.train, LoadCifar10Files(train));
  GS_ASSIGN_OR_RETURN(out.test, LoadCifar10Files(test));
  return out;
}

}  // namespace

absl::StatusOr<Dataset> LoadCifar10Files(std::span<const std::string> paths) {
  if (paths.empty()) return absl::InvalidArgumentError("no CIFAR-10 batch files given");
  Dataset out = EmptyCifar();
  for (const std::string& path : paths) {
    GS_ASSIGN_OR_RETURN(const std::unique_ptr<internal::ByteSource> src,
                        internal::ByteSource::Open(path));
    GS_ASSIGN_OR_RETURN(const std::string bytes, src->ReadAll(kCifarMaxBatchBytes));
    GS_RETURN_IF_ERROR(AppendRecords(path, bytes, &out));
  }
  return out;
}

absl::StatusOr<TrainTest> LoadCifar10Archive(const std::string& archive_path) {
  GS_ASSIGN_OR_RETURN(const std::unique_ptr<internal::ByteSource> src,
                      internal::ByteSource::Open(archive_path));
  const std::vector<std::string> train_names = TrainNames();
  auto wanted = [&](absl::string_view base) {
    if (base == kTestName) return true;
    for (const std::string& t : train_names) {
      if (base == t) return true;
    }
    return false;
  };
  GS_ASSIGN_OR_RETURN(const auto members,
                      internal::ReadTarMembers(*src, wanted, kCifarMaxBatchBytes));
  auto append = [&](const std::string& base, Dataset* d) -> absl::Status {
    const auto it = members.find(base);
    if (it == members.end()) {
      return absl::NotFoundError(absl::StrCat(archive_path, ": the archive has no ", base));
    }
    return AppendRecords(absl::StrCat(archive_path, ": ", it->second.name), it->second.data, d);
  };
  TrainTest out{EmptyCifar(), EmptyCifar()};
  for (const std::string& name : train_names) GS_RETURN_IF_ERROR(append(name, &out.train));
  GS_RETURN_IF_ERROR(append(kTestName, &out.test));
  return out;
}

absl::StatusOr<TrainTest> LoadCifar10(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_regular_file(p, ec)) return LoadCifar10Archive(path);
  if (!fs::is_directory(p, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
  }
  if (fs::exists(p / TrainNames()[0], ec)) return LoadDirectory(p);
  if (fs::is_directory(p / kCifarBatchDir, ec)) return LoadDirectory(p / kCifarBatchDir);
  if (fs::exists(p / kCifarArchive, ec)) return LoadCifar10Archive(p / kCifarArchive);
  return absl::NotFoundError(absl::StrCat(path, ": no CIFAR-10 batches: neither ",
                                          TrainNames()[0], ", ", kCifarBatchDir, "/ nor ",
                                          kCifarArchive, " is there"));
}

}  // namespace gradstream
