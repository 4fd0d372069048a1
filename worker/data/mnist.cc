// IDX parsing. Every size is checked against the limits in mnist.h before it
// is used, so a corrupt header can neither overflow an allocation nor read
// past the data; the bodies are read only after both headers agree.
#include "worker/data/mnist.h"

#include <cstdint>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/data/internal/byte_source.h"

namespace gradstream {
namespace {

using internal::ByteSource;
using internal::LoadBigEndian32;

constexpr uint32_t kImagesMagic = 2051;
constexpr uint32_t kLabelsMagic = 2049;

absl::Status BadMagic(const ByteSource& f, uint32_t magic, uint32_t want, const char* kind) {
  return absl::InvalidArgumentError(absl::StrCat(f.path(), ": bad magic ", magic, ", expected ",
                                                 want, " (", kind, ")",
                                                 f.gzip() ? " after gunzip" : ""));
}

// `dir`/`name`, or `dir`/`name`.gz when only that exists.
std::string PickFile(const std::filesystem::path& dir, const char* name) {
  const std::filesystem::path plain = dir / name;
  std::error_code ec;
  if (std::filesystem::exists(plain, ec)) return plain.string();
  const std::filesystem::path gz = dir / absl::StrCat(name, ".gz");
  if (std::filesystem::exists(gz, ec)) return gz.string();
  return plain.string();
}

absl::StatusOr<Dataset> LoadSplit(const std::filesystem::path& dir, const char* images,
                                  const char* labels) {
  const std::string img = PickFile(dir, images), lab = PickFile(dir, labels);
  for (const std::string& path : {img, lab}) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file (nor ",
                                              std::filesystem::path(path).filename().string(),
                                              ".gz) in ", dir.string()));
    }
  }
  return LoadMnistFiles(img, lab);
}

}  // namespace

absl::StatusOr<Dataset> LoadMnistFiles(const std::string& images_path,
                                       const std::string& labels_path) {
  GS_ASSIGN_OR_RETURN(const std::unique_ptr<ByteSource> images, ByteSource::Open(images_path));
  GS_ASSIGN_OR_RETURN(const std::unique_ptr<ByteSource> labels, ByteSource::Open(labels_path));

  std::string header;
  GS_RETURN_IF_ERROR(images->Read(16, "the IDX3 header", &header));
  const uint32_t magic = LoadBigEndian32(header.data());
  if (magic != kImagesMagic) return BadMagic(*images, magic, kImagesMagic, "IDX3 images");
  const uint32_t count = LoadBigEndian32(header.data() + 4);
  const uint32_t rows = LoadBigEndian32(header.data() + 8);
  const uint32_t cols = LoadBigEndian32(header.data() + 12);
  if (rows == 0 || cols == 0 || rows > kMnistMaxSide || cols > kMnistMaxSide) {
    return absl::InvalidArgumentError(absl::StrCat(images_path, ": bad image size ", rows, "x",
                                                   cols, " (each side must be 1..",
                                                   kMnistMaxSide, ")"));
  }
  const uint64_t pixels = uint64_t{rows} * cols;
  const uint64_t body = uint64_t{count} * pixels;
  if (body > kMnistMaxBodyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(images_path, ": header promises ", count,
                                                   " images of ", rows, "x", cols, " = ", body,
                                                   " bytes, over the ", kMnistMaxBodyBytes,
                                                   "-byte limit"));
  }

  header.clear();
  GS_RETURN_IF_ERROR(labels->Read(8, "the IDX1 header", &header));
  const uint32_t label_magic = LoadBigEndian32(header.data());
  if (label_magic != kLabelsMagic) {
    return BadMagic(*labels, label_magic, kLabelsMagic, "IDX1 labels");
  }
  const uint32_t label_count = LoadBigEndian32(header.data() + 4);
  if (label_count != count) {
    return absl::InvalidArgumentError(absl::StrCat(labels_path, ": ", label_count, " labels but ",
                                                   images_path, " has ", count, " images"));
  }

  std::string label_bytes;
  GS_RETURN_IF_ERROR(labels->Read(count, absl::StrCat(count, " labels"), &label_bytes));
  GS_RETURN_IF_ERROR(labels->ExpectEnd());
  Dataset out;
  out.num_classes = 10;
  out.shape = InputShape{1, static_cast<int>(rows), static_cast<int>(cols)};
  out.labels.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    const uint8_t label = static_cast<uint8_t>(label_bytes[i]);
    if (label > 9) {
      return absl::InvalidArgumentError(
          absl::StrCat(labels_path, ": label ", int{label}, " of example ", i, " is not in 0..9"));
    }
    out.labels[i] = label;
  }

  std::string pixel_bytes;
  GS_RETURN_IF_ERROR(images->Read(body, absl::StrCat(count, " images of ", rows, "x", cols),
                                  &pixel_bytes));
  GS_RETURN_IF_ERROR(images->ExpectEnd());
  out.features.resize(body);
  const auto* p = reinterpret_cast<const unsigned char*>(pixel_bytes.data());
  for (size_t i = 0; i < out.features.size(); ++i) out.features[i] = p[i] / 255.0f;
  return out;
}

absl::StatusOr<TrainTest> LoadMnist(const std::string& dir) {
  const std::filesystem::path d(dir);
  TrainTest out;
  GS_ASSIGN_OR_RETURN(out.train, LoadSplit(d, kMnistTrainImages, kMnistTrainLabels));
  GS_ASSIGN_OR_RETURN(out.test, LoadSplit(d, kMnistTestImages, kMnistTestLabels));
  if (!(out.train.shape == out.test.shape)) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": train images are ", ShapeString(out.train.shape),
                     " but test images are ", ShapeString(out.test.shape)));
  }
  return out;
}

}  // namespace gradstream
