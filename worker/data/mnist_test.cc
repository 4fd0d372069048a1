// MNIST IDX parsing on small files the test writes, plain and gzip; corrupt
// files must give statuses naming the file, never crashes. One test loads
// the real Fashion-MNIST from Debian's dataset-fashion-mnist when installed.
#include "worker/data/mnist.h"

#include <array>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/data/testing/gzip.h"

namespace gradstream {
namespace {

std::string BigEndian(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

using testing::Gzip;

// The status is InvalidArgument and its message names `path` and `problem`.
void ExpectInvalid(const absl::Status& s, const std::string& path, const std::string& problem) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(path), std::string::npos) << s << " does not name " << path;
  EXPECT_NE(s.message().find(problem), std::string::npos) << s << " does not say " << problem;
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

// ------------------------------------------------------------------ gzip --

TEST_F(MnistTest, GzipFilesLoadLikePlainOnes) {
  const auto plain = LoadMnistFiles(Write("i", Images(3, 4, 5)), Write("l", Labels(3)));
  const auto gz =
      LoadMnistFiles(Write("i.gz", Gzip(Images(3, 4, 5))), Write("l.gz", Gzip(Labels(3))));
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(gz.ok()) << gz.status();
  EXPECT_EQ(gz->features, plain->features);
  EXPECT_EQ(gz->labels, plain->labels);
  EXPECT_EQ(gz->shape, plain->shape);
  // Compression is recognised by content, not by name; members may be
  // concatenated as `cat a.gz b.gz` makes them.
  const std::string img = Images(3, 4, 5);
  const auto split = LoadMnistFiles(Write("i2", Gzip(img.substr(0, 30)) + Gzip(img.substr(30))),
                                    Write("l2", Labels(3)));
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->features, plain->features);
}

TEST_F(MnistTest, DirectoryMayHoldGzOrPlainNames) {
  // As Debian's dataset-fashion-mnist ships them: all four gzip-compressed.
  Write(std::string(kMnistTrainImages) + ".gz", Gzip(Images(4, 28, 28)));
  Write(std::string(kMnistTrainLabels) + ".gz", Gzip(Labels(4)));
  Write(std::string(kMnistTestImages) + ".gz", Gzip(Images(2, 28, 28)));
  Write(kMnistTestLabels, Labels(2));  // and one gunzipped by hand
  auto d = LoadMnist(dir_.string());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->train.num_examples(), 4);
  EXPECT_EQ(d->test.num_examples(), 2);
  EXPECT_FLOAT_EQ(d->train.features[255], 1.0f);
  std::filesystem::remove(dir_ / kMnistTestLabels);
  d = LoadMnist(dir_.string());
  ASSERT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find(std::string(kMnistTestLabels) + ".gz"), std::string::npos)
      << d.status();
}

TEST_F(MnistTest, RejectsBadHeadersInsideGzip) {
  std::string path = Write("i.gz", Gzip(Images(3, 4, 5, /*magic=*/2049)));
  ExpectInvalid(LoadMnistFiles(path, Write("l", Labels(3))).status(), path, "bad magic");
  path = Write("i2.gz", Gzip(Images(3, 0, 5)));
  ExpectInvalid(LoadMnistFiles(path, Write("l2", Labels(3))).status(), path, "bad image size");
  path = Write("i3.gz", Gzip(Images(3, kMnistMaxSide + 1, 1)));
  ExpectInvalid(LoadMnistFiles(path, Write("l3", Labels(3))).status(), path, "bad image size");
  const std::string lab = Write("l4.gz", Gzip(Labels(2)));
  ExpectInvalid(LoadMnistFiles(Write("i4.gz", Gzip(Images(3, 4, 5))), lab).status(), lab,
                "2 labels but");
}

TEST_F(MnistTest, RejectsTruncatedBodyInsideGzip) {
  // A well-formed gzip stream whose content ends early.
  std::string img = Images(3, 4, 5);
  img.resize(img.size() - 7);
  std::string path = Write("i.gz", Gzip(img));
  ExpectInvalid(LoadMnistFiles(path, Write("l", Labels(3))).status(), path, "truncated");
  path = Write("h.gz", Gzip(img.substr(0, 9)));
  ExpectInvalid(LoadMnistFiles(path, Write("l2", Labels(3))).status(), path, "IDX3 header");
  std::string lab = Labels(3);
  lab.pop_back();
  path = Write("l3.gz", Gzip(lab));
  ExpectInvalid(LoadMnistFiles(Write("i3", Images(3, 4, 5)), path).status(), path, "truncated");
}

TEST_F(MnistTest, RejectsTrailingBytesPlainAndGzip) {
  std::string path = Write("i", Images(3, 4, 5) + "xyz");
  ExpectInvalid(LoadMnistFiles(path, Write("l", Labels(3))).status(), path, "3 trailing bytes");
  path = Write("i.gz", Gzip(Images(3, 4, 5) + "xyz"));
  ExpectInvalid(LoadMnistFiles(path, Write("l2", Labels(3))).status(), path, "trailing bytes");
}

TEST_F(MnistTest, RejectsCorruptAndCutGzipStreams) {
  const std::string gz = Gzip(Images(50, 28, 28));
  ASSERT_GT(gz.size(), 100u);
  // A cut compressed stream: the inflater runs out of input mid-stream.
  std::string path = Write("cut.gz", gz.substr(0, gz.size() / 2));
  ExpectInvalid(LoadMnistFiles(path, Write("l", Labels(50))).status(), path, "corrupt gzip");
  // Only the trailer (CRC-32 and length) missing: the pixels all arrive, the
  // end-of-stream check still fails.
  path = Write("notrailer.gz", gz.substr(0, gz.size() - 8));
  ExpectInvalid(LoadMnistFiles(path, Write("l2", Labels(50))).status(), path, "corrupt gzip");
  // Flipped bits in the deflate data or in the CRC.
  for (size_t at : {gz.size() / 2, gz.size() - 6}) {
    std::string bad = gz;
    bad[at] = static_cast<char>(bad[at] ^ 0x55);
    path = Write("flip" + std::to_string(at) + ".gz", bad);
    const absl::Status s = LoadMnistFiles(path, Write("l3", Labels(50))).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(path), std::string::npos) << s;
  }
  // Garbage after the last member is not a second member.
  path = Write("garbage.gz", gz + "garbage!");
  ExpectInvalid(LoadMnistFiles(path, Write("l4", Labels(50))).status(), path, "corrupt gzip");
}

TEST_F(MnistTest, HugeHeaderCountIsRejectedWithoutAllocating) {
  // Over the limit: refused from the header alone.
  std::string path =
      Write("i", BigEndian(2051) + BigEndian(0xFFFFFFFF) + BigEndian(1 << 14) + BigEndian(1 << 14));
  ExpectInvalid(LoadMnistFiles(path, Write("l", Labels(3))).status(), path, "limit");
  // Under the limit but far beyond the (compressed) file: read as it
  // arrives, so it fails as truncated after reading what exists.
  path = Write("i.gz", Gzip(BigEndian(2051) + BigEndian(1000000) + BigEndian(28) + BigEndian(28) +
                            std::string(100, '\0')));
  const std::string lab = BigEndian(2049) + BigEndian(1000000) + std::string(1000000, '\0');
  ExpectInvalid(LoadMnistFiles(path, Write("l.gz", Gzip(lab))).status(), path, "truncated");
}

// ------------------------------------------------------------ real data --

TEST(FashionMnist, LoadsDebianPackageWhenInstalled) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(std::filesystem::path(dir) /
                               (std::string(kMnistTrainImages) + ".gz"))) {
    GTEST_SKIP() << dir << " is absent: apt-get install dataset-fashion-mnist "
                 << "(scripts/install_deps.sh does) to run this test";
  }
  auto d = LoadMnist(dir);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->train.num_examples(), 60000);
  EXPECT_EQ(d->test.num_examples(), 10000);
  EXPECT_EQ(d->train.shape, (InputShape{1, 28, 28}));
  EXPECT_TRUE(ValidateDataset(d->train).ok());
  EXPECT_TRUE(ValidateDataset(d->test).ok());
  // Fashion-MNIST is balanced: 6000 train and 1000 test images per class.
  std::array<int, 10> train{}, test{};
  for (int32_t l : d->train.labels) ++train[l];
  for (int32_t l : d->test.labels) ++test[l];
  for (int c = 0; c < 10; ++c) {
    EXPECT_EQ(train[c], 6000) << "class " << c;
    EXPECT_EQ(test[c], 1000) << "class " << c;
  }
  double mean = 0;
  for (float f : d->test.features) mean += f;
  mean /= d->test.features.size();
  EXPECT_GT(mean, 0.2);  // real images, not zeros (about 0.29 for Fashion-MNIST)
  EXPECT_LT(mean, 0.4);
}

}  // namespace
}  // namespace gradstream
