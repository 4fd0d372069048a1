// Determinism, golden values and balance of the synthetic task.
#include "worker/data/synthetic.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "worker/data/load.h"
#include "worker/data/rng.h"

namespace gradstream {
namespace {

SyntheticConfig Small() {
  SyntheticConfig c;
  c.num_train = 3000;
  c.num_test = 600;
  return c;
}

TEST(SplitMix64, MatchesReferenceOutput) {
  // First outputs of Vigna's splitmix64.c seeded with 1234567.
  SplitMix64 g(1234567);
  EXPECT_EQ(g.Next(), 6457827717110365317ULL);
  EXPECT_EQ(g.Next(), 3203168211198807973ULL);
  EXPECT_EQ(g.Next(), 9817491932198370423ULL);
}

TEST(SplitMix64, NormalHasUnitMoments) {
  SplitMix64 g(7);
  double sum = 0, sum2 = 0;
  constexpr int kN = 200000;
  for (int i = 0; i < kN; ++i) {
    const double z = g.Normal();
    sum += z;
    sum2 += z * z;
  }
  EXPECT_NEAR(sum / kN, 0.0, 0.01);
  EXPECT_NEAR(sum2 / kN, 1.0, 0.02);
}

TEST(Synthetic, SameSeedSameBytes) {
  auto a = GenerateSynthetic(Small());
  auto b = GenerateSynthetic(Small());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->train.features.size(), b->train.features.size());
  EXPECT_EQ(0, std::memcmp(a->train.features.data(), b->train.features.data(),
                           a->train.features.size() * sizeof(float)));
  EXPECT_EQ(a->train.labels, b->train.labels);
  EXPECT_EQ(0, std::memcmp(a->test.features.data(), b->test.features.data(),
                           a->test.features.size() * sizeof(float)));
  EXPECT_EQ(a->test.labels, b->test.labels);

  SyntheticConfig other = Small();
  other.seed = 54321;
  auto c = GenerateSynthetic(other);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->train.features, c->train.features);
}

TEST(Synthetic, DefaultsHaveDocumentedShape) {
  auto d = GenerateSynthetic(SyntheticConfig{});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->train.num_examples(), 20000);
  EXPECT_EQ(d->test.num_examples(), 5000);
  EXPECT_EQ(d->train.shape, (InputShape{20, 1, 1}));
  EXPECT_EQ(d->train.num_classes, 10);
  EXPECT_TRUE(ValidateDataset(d->train).ok());
  EXPECT_TRUE(ValidateDataset(d->test).ok());
}

// Golden values of the default task (seed 12345), computed once by this code.
// If they change, the data every experiment trains on changed: don't update
// them casually, the generation order is a documented contract.
TEST(Synthetic, GoldenValues) {
  auto d = GenerateSynthetic(SyntheticConfig{});
  ASSERT_TRUE(d.ok());
  const Dataset& tr = d->train;
  const Dataset& te = d->test;
  EXPECT_EQ(tr.labels[0], 9);
  EXPECT_EQ(tr.labels[1], 3);
  EXPECT_EQ(tr.labels[19999], 4);
  EXPECT_EQ(te.labels[4999], 7);
  EXPECT_FLOAT_EQ(tr.features[0], 1.7829944f);
  EXPECT_FLOAT_EQ(tr.features[1], 0.4717277f);
  EXPECT_FLOAT_EQ(tr.features[20 * 19999 + 19], 1.6908102f);
  EXPECT_FLOAT_EQ(te.features[0], -1.7253765f);
}

TEST(Synthetic, ClassesAreBalanced) {
  auto d = GenerateSynthetic(SyntheticConfig{});
  ASSERT_TRUE(d.ok());
  std::vector<int> counts(10, 0);
  for (int32_t y : d->train.labels) ++counts[y];
  // Expected 2000 each; binomial sd ~ 42, so +-200 is a > 4 sigma band.
  for (int k = 0; k < 10; ++k) {
    EXPECT_GT(counts[k], 1800) << "class " << k;
    EXPECT_LT(counts[k], 2200) << "class " << k;
  }
}

TEST(Synthetic, RejectsBadConfig) {
  SyntheticConfig c = Small();
  c.dims = 0;
  EXPECT_EQ(GenerateSynthetic(c).status().code(), absl::StatusCode::kInvalidArgument);
  c = Small();
  c.noise = -1;
  EXPECT_EQ(GenerateSynthetic(c).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LoadDataset, DispatchesByName) {
  DatasetOptions o;
  o.synthetic = Small();
  auto d = LoadDataset(o);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->train.num_examples(), 3000);
  o.name = "imagenet";
  EXPECT_EQ(LoadDataset(o).status().code(), absl::StatusCode::kNotFound);
  o.name = "mnist";
  o.dir = "/nonexistent/gradstream";
  EXPECT_EQ(LoadDataset(o).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gradstream
