// Shards, subsets and the shuffling minibatch iterator.
#include "worker/data/dataset.h"

#include <algorithm>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace gradstream {
namespace {

Dataset Ramp(int n, int dims) {
  Dataset d;
  d.num_classes = 3;
  d.shape = InputShape{dims, 1, 1};
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < dims; ++j) d.features.push_back(i * 10.0f + j);
    d.labels.push_back(i % 3);
  }
  return d;
}

TEST(Subset, CopiesRows) {
  Dataset d = Ramp(10, 2);
  const std::vector<int64_t> idx = {7, 2};
  auto s = Subset(d, idx);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->features, (std::vector<float>{70, 71, 20, 21}));
  EXPECT_EQ(s->labels, (std::vector<int32_t>{1, 2}));
  const std::vector<int64_t> bad = {10};
  EXPECT_EQ(Subset(d, bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ValidateDataset, CatchesMismatch) {
  Dataset d = Ramp(4, 2);
  EXPECT_TRUE(ValidateDataset(d).ok());
  d.labels[1] = 3;
  EXPECT_EQ(ValidateDataset(d).code(), absl::StatusCode::kInvalidArgument);
  d = Ramp(4, 2);
  d.features.pop_back();
  EXPECT_EQ(ValidateDataset(d).code(), absl::StatusCode::kInvalidArgument);
}

std::vector<int64_t> FirstValues(MinibatchIterator& it, int batches) {
  std::vector<int64_t> out;
  for (int b = 0; b < batches; ++b) {
    const Batch& batch = it.Next();
    for (int k = 0; k < batch.size; ++k) out.push_back(static_cast<int64_t>(batch.x[k * 2] / 10));
  }
  return out;
}

TEST(MinibatchIterator, EpochVisitsEveryExampleOnceAndIsDeterministic) {
  Dataset d = Ramp(100, 2);
  std::vector<int64_t> shard;  // rank 1 of 4: 1, 5, ..., 97
  for (int64_t i = 1; i < 100; i += 4) shard.push_back(i);
  auto it = MinibatchIterator::Create(&d, shard, 5, /*seed=*/9, /*rank=*/1);
  ASSERT_TRUE(it.ok());
  EXPECT_EQ((*it)->batches_per_epoch(), 5);
  const std::vector<int64_t> epoch0 = FirstValues(**it, 5);
  EXPECT_EQ(std::set<int64_t>(epoch0.begin(), epoch0.end()),
            std::set<int64_t>(shard.begin(), shard.end()));
  EXPECT_NE(epoch0, shard) << "not shuffled";
  const Batch& b = (*it)->Next();
  EXPECT_EQ(b.epoch, 1);
  // Labels travel with their features.
  for (int k = 0; k < b.size; ++k) EXPECT_EQ(b.y[k], static_cast<int>(b.x[2 * k] / 10) % 3);

  auto again = MinibatchIterator::Create(&d, shard, 5, 9, 1);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(FirstValues(**again, 5), epoch0);
  auto other_rank = MinibatchIterator::Create(&d, shard, 5, 9, 2);
  ASSERT_TRUE(other_rank.ok());
  EXPECT_NE(FirstValues(**other_rank, 5), epoch0);
}

TEST(MinibatchIterator, DropsTheShortTailEveryEpoch) {
  Dataset d = Ramp(23, 2);
  std::vector<int64_t> all(23);
  for (int i = 0; i < 23; ++i) all[i] = i;
  auto it = MinibatchIterator::Create(&d, all, 10, 1, 0);
  ASSERT_TRUE(it.ok());
  EXPECT_EQ((*it)->Next().epoch, 0);
  EXPECT_EQ((*it)->Next().epoch, 0);
  const Batch& third = (*it)->Next();
  EXPECT_EQ(third.epoch, 1);
  EXPECT_EQ(third.size, 10);
}

TEST(MinibatchIterator, RejectsTooSmallShard) {
  Dataset d = Ramp(4, 2);
  EXPECT_EQ(MinibatchIterator::Create(&d, {0, 1, 2}, 4, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MinibatchIterator::Create(&d, {0, 1, 9}, 2, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gradstream
