// CIFAR-10 binary parsing on small files the test writes.
#include "worker/data/cifar10.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace gradstream {
namespace {

class Cifar10Test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::path(::testing::TempDir()) /
        ("cifar_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  // `n` records; record r has label (first_label + r) % 10, pixel p = (r + p) % 256.
  static std::string Records(int n, int first_label = 0) {
    std::string s;
    for (int r = 0; r < n; ++r) {
      s.push_back(static_cast<char>((first_label + r) % 10));
      for (int p = 0; p < 3072; ++p) s.push_back(static_cast<char>((r + p) % 256));
    }
    return s;
  }

  std::filesystem::path dir_;
};

TEST_F(Cifar10Test, LoadsDirectoryInBatchOrder) {
  for (int i = 1; i <= 5; ++i) Write(absl::StrCat("data_batch_", i, ".bin"), Records(2, i));
  Write("test_batch.bin", Records(3));
  auto d = LoadCifar10(dir_.string());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->train.num_examples(), 10);
  EXPECT_EQ(d->test.num_examples(), 3);
  EXPECT_EQ(d->train.shape, (InputShape{3, 32, 32}));
  EXPECT_EQ(d->train.labels[0], 1);  // data_batch_1 first
  EXPECT_EQ(d->train.labels[9], 6);  // data_batch_5, record 1
  // Channel planes are kept: pixel 1024 is the first green value.
  EXPECT_FLOAT_EQ(d->test.features[1024], (1024 % 256) / 255.0f);
  EXPECT_FLOAT_EQ(d->test.features[3072 + 255], 0.0f);  // record 1: (1 + 255) % 256
  EXPECT_FLOAT_EQ(d->test.features[3072 + 254], 1.0f);
  EXPECT_TRUE(ValidateDataset(d->train).ok());
}

TEST_F(Cifar10Test, MissingBatchIsNotFound) {
  Write("data_batch_1.bin", Records(1));
  auto d = LoadCifar10(dir_.string());
  ASSERT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find("data_batch_2.bin"), std::string::npos) << d.status();
}

TEST_F(Cifar10Test, RejectsTruncatedRecord) {
  std::string s = Records(2);
  s.resize(s.size() - 100);
  const std::vector<std::string> paths = {Write("b.bin", s)};
  auto d = LoadCifar10Files(paths);
  ASSERT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("b.bin"), std::string::npos) << d.status();
}

TEST_F(Cifar10Test, RejectsBadLabelAndEmptyFile) {
  std::string s = Records(2);
  s[3073] = 11;
  std::vector<std::string> paths = {Write("b.bin", s)};
  EXPECT_EQ(LoadCifar10Files(paths).status().code(), absl::StatusCode::kInvalidArgument);
  paths = {Write("e.bin", "")};
  EXPECT_EQ(LoadCifar10Files(paths).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gradstream
