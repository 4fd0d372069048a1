// MNIST IDX parsing on small files the test writes; corrupt files must give
// statuses, never crashes.
#include "worker/data/mnist.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gradstream {
namespace {

std::string BigEndian(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

class MnistTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::path(::testing::TempDir()) /
        ("mnist_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  // `n` images of rows x cols with pixel (i, p) = (i * 7 + p) % 256.
  static std::string Images(uint32_t n, uint32_t rows, uint32_t cols, uint32_t magic = 2051) {
    std::string s = BigEndian(magic) + BigEndian(n) + BigEndian(rows) + BigEndian(cols);
    for (uint32_t i = 0; i < n; ++i)
      for (uint32_t p = 0; p < rows * cols; ++p) s.push_back(static_cast<char>((i * 7 + p) % 256));
    return s;
  }
  static std::string Labels(uint32_t n, uint32_t magic = 2049) {
    std::string s = BigEndian(magic) + BigEndian(n);
    for (uint32_t i = 0; i < n; ++i) s.push_back(static_cast<char>(i % 10));
    return s;
  }

  std::filesystem::path dir_;
};

TEST_F(MnistTest, ParsesSmallFiles) {
  const auto img = Write("i", Images(3, 4, 5));
  const auto lab = Write("l", Labels(3));
  auto d = LoadMnistFiles(img, lab);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->num_examples(), 3);
  EXPECT_EQ(d->shape, (InputShape{1, 4, 5}));
  EXPECT_EQ(d->num_classes, 10);
  EXPECT_EQ(d->labels, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_FLOAT_EQ(d->features[0], 0.0f);
  EXPECT_FLOAT_EQ(d->features[20 + 3], (7 + 3) / 255.0f);  // image 1, pixel 3
  EXPECT_TRUE(ValidateDataset(*d).ok());
}

TEST_F(MnistTest, LoadsDirectoryWithStandardNames) {
  Write(kMnistTrainImages, Images(4, 28, 28));
  Write(kMnistTrainLabels, Labels(4));
  Write(kMnistTestImages, Images(2, 28, 28));
  Write(kMnistTestLabels, Labels(2));
  auto d = LoadMnist(dir_.string());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->train.num_examples(), 4);
  EXPECT_EQ(d->test.num_examples(), 2);
  EXPECT_FLOAT_EQ(d->train.features[255], 1.0f);  // (0 * 7 + 255) % 256 = 255
}

TEST_F(MnistTest, MissingFileIsNotFoundWithPath) {
  auto d = LoadMnist(dir_.string());
  ASSERT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find(kMnistTrainImages), std::string::npos) << d.status();
}

TEST_F(MnistTest, RejectsBadMagic) {
  const auto lab = Write("l", Labels(3));
  auto d = LoadMnistFiles(Write("i", Images(3, 4, 5, /*magic=*/2049)), lab);
  ASSERT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("magic"), std::string::npos) << d.status();
  d = LoadMnistFiles(Write("i2", Images(3, 4, 5)), Write("l2", Labels(3, 2051)));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(MnistTest, RejectsTruncatedFiles) {
  std::string img = Images(3, 4, 5);
  img.pop_back();
  auto d = LoadMnistFiles(Write("i", img), Write("l", Labels(3)));
  ASSERT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("truncated"), std::string::npos) << d.status();
  // Header cut short.
  d = LoadMnistFiles(Write("i2", Images(3, 4, 5).substr(0, 10)), Write("l2", Labels(3)));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  std::string lab = Labels(3);
  lab.pop_back();
  d = LoadMnistFiles(Write("i3", Images(3, 4, 5)), Write("l3", lab));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  // A count that promises more than the file holds must not allocate or crash.
  std::string huge = BigEndian(2051) + BigEndian(0xFFFFFFFF) + BigEndian(28) + BigEndian(28);
  d = LoadMnistFiles(Write("i4", huge), Write("l4", Labels(3)));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(MnistTest, RejectsCountMismatchAndBadLabel) {
  auto d = LoadMnistFiles(Write("i", Images(3, 4, 5)), Write("l", Labels(2)));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  std::string lab = Labels(3);
  lab.back() = 10;
  d = LoadMnistFiles(Write("i2", Images(3, 4, 5)), Write("l2", lab));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gradstream
