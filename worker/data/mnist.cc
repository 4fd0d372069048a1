// IDX parsing. Every size is checked before it is used, so a corrupt header
// can neither overflow an allocation nor read past the buffer.
#include "worker/data/mnist.h"

#include <cstdint>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/data/internal/read_file.h"

namespace gradstream {
namespace {

constexpr uint32_t kImagesMagic = 2051;
constexpr uint32_t kLabelsMagic = 2049;
// Generous bound on one image side; keeps count*rows*cols far from overflow.
constexpr uint32_t kMaxSide = 1 << 14;

absl::Status CheckSize(const std::string& path, uint64_t want, uint64_t got) {
  if (got < want) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": truncated: header promises ", want, " bytes, file has ", got));
  }
  if (got > want) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", got - want, " trailing bytes after the ", want, " expected"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Dataset> LoadMnistFiles(const std::string& images_path,
                                       const std::string& labels_path) {
  GS_ASSIGN_OR_RETURN(const std::string images, internal::ReadFileBytes(images_path));
  GS_ASSIGN_OR_RETURN(const std::string labels, internal::ReadFileBytes(labels_path));

  if (images.size() < 16) {
    return absl::InvalidArgumentError(
        absl::StrCat(images_path, ": truncated: ", images.size(), " bytes, IDX3 header needs 16"));
  }
  const uint32_t magic = internal::LoadBigEndian32(images.data());
  if (magic != kImagesMagic) {
    return absl::InvalidArgumentError(absl::StrCat(images_path, ": bad magic ", magic,
                                                   ", expected ", kImagesMagic, " (IDX3 images)"));
  }
  const uint32_t count = internal::LoadBigEndian32(images.data() + 4);
  const uint32_t rows = internal::LoadBigEndian32(images.data() + 8);
  const uint32_t cols = internal::LoadBigEndian32(images.data() + 12);
  if (rows == 0 || cols == 0 || rows > kMaxSide || cols > kMaxSide) {
    return absl::InvalidArgumentError(
        absl::StrCat(images_path, ": bad image size ", rows, "x", cols));
  }
  const uint64_t pixels = uint64_t{rows} * cols;
  GS_RETURN_IF_ERROR(CheckSize(images_path, 16 + uint64_t{count} * pixels, images.size()));

  if (labels.size() < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(labels_path, ": truncated: ", labels.size(), " bytes, IDX1 header needs 8"));
  }
  const uint32_t label_magic = internal::LoadBigEndian32(labels.data());
  if (label_magic != kLabelsMagic) {
    return absl::InvalidArgumentError(absl::StrCat(labels_path, ": bad magic ", label_magic,
                                                   ", expected ", kLabelsMagic, " (IDX1 labels)"));
  }
  const uint32_t label_count = internal::LoadBigEndian32(labels.data() + 4);
  if (label_count != count) {
    return absl::InvalidArgumentError(absl::StrCat(labels_path, ": ", label_count, " labels but ",
                                                   images_path, " has ", count, " images"));
  }
  GS_RETURN_IF_ERROR(CheckSize(labels_path, 8 + uint64_t{count}, labels.size()));

  Dataset out;
  out.num_classes = 10;
  out.shape = InputShape{1, static_cast<int>(rows), static_cast<int>(cols)};
  out.labels.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    const uint8_t label = static_cast<uint8_t>(labels[8 + i]);
    if (label > 9) {
      return absl::InvalidArgumentError(
          absl::StrCat(labels_path, ": label ", int{label}, " of example ", i, " is not in 0..9"));
    }
    out.labels[i] = label;
  }
  out.features.resize(uint64_t{count} * pixels);
  const auto* p = reinterpret_cast<const unsigned char*>(images.data() + 16);
  for (size_t i = 0; i < out.features.size(); ++i) out.features[i] = p[i] / 255.0f;
  return out;
}

absl::StatusOr<TrainTest> LoadMnist(const std::string& dir) {
  const std::filesystem::path d(dir);
  TrainTest out;
  GS_ASSIGN_OR_RETURN(out.train, LoadMnistFiles(d / kMnistTrainImages, d / kMnistTrainLabels));
  GS_ASSIGN_OR_RETURN(out.test, LoadMnistFiles(d / kMnistTestImages, d / kMnistTestLabels));
  if (!(out.train.shape == out.test.shape)) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": train images are ", ShapeString(out.train.shape),
                     " but test images are ", ShapeString(out.test.shape)));
  }
  return out;
}

}  // namespace gradstream
