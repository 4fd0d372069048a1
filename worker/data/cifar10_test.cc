// CIFAR-10 binary parsing on small files the test writes: extracted batches,
// and the archive as distributed (a gzip-compressed tar), whole or damaged.
#include "worker/data/cifar10.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/data/testing/gzip.h"

namespace gradstream {
namespace {

using testing::Gzip;

// A ustar archive of (name, data) regular files, ended by two zero blocks.
std::string Tar(const std::vector<std::pair<std::string, std::string>>& files) {
  std::string out;
  for (const auto& [name, data] : files) {
    std::string h(512, '\0');
    h.replace(0, name.size(), name);
    std::snprintf(&h[100], 8, "%07o", 0644);
    std::snprintf(&h[108], 8, "%07o", 0);
    std::snprintf(&h[116], 8, "%07o", 0);
    std::snprintf(&h[124], 12, "%011o", static_cast<unsigned>(data.size()));
    std::snprintf(&h[136], 12, "%011o", 0);
    h[156] = '0';
    h.replace(257, 6, std::string("ustar\0", 6));
    h.replace(263, 2, "00");
    h.replace(148, 8, "        ");
    unsigned sum = 0;
    for (char c : h) sum += static_cast<unsigned char>(c);
    std::snprintf(&h[148], 8, "%06o", sum);
    out += h + data + std::string((512 - data.size() % 512) % 512, '\0');
  }
  return out + std::string(1024, '\0');
}

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

 public:
  // `n` records; record r has label (first_label + r) % 10, pixel p = (r + p) % 256.
  static std::string Records(int n, int first_label = 0) {
    std::string s;
    for (int r = 0; r < n; ++r) {
      s.push_back(static_cast<char>((first_label + r) % 10));
      for (int p = 0; p < 3072; ++p) s.push_back(static_cast<char>((r + p) % 256));
    }
    return s;
  }

 protected:
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

// -------------------------------------------------------------- archive --

// The distributed layout: cifar-10-batches-bin/ with the six batches (and a
// readme the loader skips), batch i holding i records.
std::vector<std::pair<std::string, std::string>> Members() {
  std::vector<std::pair<std::string, std::string>> m = {
      {"cifar-10-batches-bin/batches.meta.txt", "airplane\nautomobile\n"}};
  for (int i = 5; i >= 1; --i) {  // any order in the archive
    m.push_back({absl::StrCat("cifar-10-batches-bin/data_batch_", i, ".bin"),
                 Cifar10Test::Records(i, i)});
  }
  m.push_back({"cifar-10-batches-bin/test_batch.bin", Cifar10Test::Records(2)});
  return m;
}

TEST_F(Cifar10Test, LoadsTarGzArchiveAsDistributed) {
  const std::string archive = Write(kCifarArchive, Gzip(Tar(Members())));
  for (const std::string& path : {archive, dir_.string()}) {  // the file, or its folder
    auto d = LoadCifar10(path);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->train.num_examples(), 1 + 2 + 3 + 4 + 5);
    EXPECT_EQ(d->test.num_examples(), 2);
    EXPECT_EQ(d->train.labels[0], 1);  // data_batch_1 first, whatever the archive order
    EXPECT_EQ(d->train.labels[1], 2);  // data_batch_2, record 0
    EXPECT_FLOAT_EQ(d->test.features[3072 + 254], 1.0f);
    EXPECT_TRUE(ValidateDataset(d->train).ok());
  }
  // An uncompressed tar works too.
  auto d = LoadCifar10(Write("plain.tar", Tar(Members())));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->train.num_examples(), 15);
}

TEST_F(Cifar10Test, LoadsExtractedSubfolder) {
  std::filesystem::create_directories(dir_ / kCifarBatchDir);
  for (const auto& [name, data] : Members()) Write(name, data);
  auto d = LoadCifar10(dir_.string());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->train.num_examples(), 15);
  EXPECT_EQ(d->test.num_examples(), 2);
}

TEST_F(Cifar10Test, EmptyFolderIsNotFoundNamingTheChoices) {
  auto d = LoadCifar10(dir_.string());
  ASSERT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find(kCifarArchive), std::string::npos) << d.status();
}

TEST_F(Cifar10Test, ArchiveMissingABatchIsNotFound) {
  auto m = Members();
  m.erase(m.begin() + 3);  // data_batch_3.bin
  const std::string path = Write("a.tar.gz", Gzip(Tar(m)));
  auto d = LoadCifar10(path);
  ASSERT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find("data_batch_3.bin"), std::string::npos) << d.status();
  EXPECT_NE(d.status().message().find(path), std::string::npos) << d.status();
}

TEST_F(Cifar10Test, ArchiveWithTruncatedRecordNamesTheMember) {
  auto m = Members();
  m.back().second.pop_back();  // test_batch.bin one byte short
  auto d = LoadCifar10(Write("a.tar.gz", Gzip(Tar(m))));
  ASSERT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("a.tar.gz: cifar-10-batches-bin/test_batch.bin: size"),
            std::string::npos)
      << d.status();
}

TEST_F(Cifar10Test, RejectsDamagedArchives) {
  const std::string tar = Tar(Members());
  const std::string gz = Gzip(tar);
  auto expect_invalid = [&](const std::string& name, const std::string& bytes,
                            const std::string& problem) {
    const std::string path = Write(name, bytes);
    const absl::Status s = LoadCifar10(path).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name << ": " << s;
    EXPECT_NE(s.message().find(path), std::string::npos) << s;
    EXPECT_NE(s.message().find(problem), std::string::npos) << name << ": " << s;
  };
  expect_invalid("cut.tar.gz", gz.substr(0, gz.size() / 2), "corrupt gzip");
  std::string flipped = gz;
  flipped[gz.size() - 6] ^= 0x01;  // CRC-32
  expect_invalid("crc.tar.gz", flipped, "corrupt gzip");
  expect_invalid("cut.tar", tar.substr(0, tar.size() / 2), "truncated");
  std::string bad_header = tar;
  bad_header[0] = 'X';  // the first header's checksum no longer matches
  expect_invalid("sum.tar", bad_header, "bad checksum");
  expect_invalid("notatar.tar.gz", Gzip(std::string(2000, 'z')), "bad checksum");
}

}  // namespace
}  // namespace gradstream
