// Row-sparse tables on a shard (docs/design/sparse-tables.md): partitions,
// first-touch rows, per-row updates in every consistency mode, bad input,
// checkpoints.
#include <malloc.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "common/env/testing/fault_injection_env.h"
#include "common/env/testing/mem_env.h"
#include "common/env/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "server/shard/checkpoint.h"
#include "server/shard/job.h"
#include "server/shard/row_store.h"

namespace gradstream::shard {
namespace {

constexpr uint32_t kDim = 4;

TableSpec Spec(uint32_t partition = 0, uint32_t partitions = 1) {
  return TableSpec{.table = 2, .table_rows = 1000, .dim = kDim, .partition = partition,
                   .partitions = partitions, .init_std = 0.5f, .seed = 7};
}

Optimizer Sgd(float lr) { return *Optimizer::Create(OptimizerOptions{.learning_rate = lr}); }

std::vector<float> Initial(uint64_t row, const TableSpec& spec = Spec()) {
  std::vector<float> v(spec.dim);
  InitialRow(spec, row, v.data());
  return v;
}

TEST(RowPartition, SpreadsRowsEvenlyAndDependsOnTheTable) {
  constexpr int kRows = 100000, kParts = 4;
  int count[kParts] = {};
  int same = 0;
  for (uint64_t r = 0; r < kRows; ++r) {
    const uint32_t p = RowPartition(2, r, kParts);
    ASSERT_LT(p, static_cast<uint32_t>(kParts));
    ++count[p];
    same += p == RowPartition(3, r, kParts) ? 1 : 0;
  }
  for (int c : count) EXPECT_NEAR(c, kRows / kParts, kRows / kParts * 0.03);
  EXPECT_NEAR(same, kRows / kParts, kRows / kParts * 0.05);  // tables are independent
  EXPECT_EQ(RowPartition(2, 12345, 1), 0u);
}

TEST(InitialRow, IsAFunctionOfSeedTableAndRowWithTheAskedSpread) {
  EXPECT_EQ(Initial(5), Initial(5, Spec(1, 3)));  // the partitioning does not matter
  EXPECT_NE(Initial(5), Initial(6));
  TableSpec other = Spec();
  other.seed = 8;
  EXPECT_NE(Initial(5), Initial(5, other));
  double sum = 0, sq = 0;
  for (uint64_t r = 0; r < 20000; ++r) {
    for (float x : Initial(r)) {
      sum += x;
      sq += double{x} * x;
    }
  }
  const double n = 20000.0 * kDim;
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sq / n), 0.5, 0.01);
}

TEST(RowStore, CreatesRowsOnFirstTouchAndChecksIds) {
  const TableSpec spec = Spec(1, 2);
  RowStore store(spec, Sgd(0.1f));
  uint64_t mine = 0, theirs = 0;
  while (RowPartition(spec.table, mine, 2) != 1) ++mine;
  while (RowPartition(spec.table, theirs, 2) != 0) ++theirs;
  EXPECT_EQ(store.size(), 0u);
  const uint32_t at = store.Touch(mine);
  EXPECT_EQ(store.Touch(mine), at);
  EXPECT_EQ(store.size(), 1u);
  EXPECT_EQ(std::vector<float>(store.params(at), store.params(at) + kDim), Initial(mine, spec));
  const uint64_t out_of_range[] = {1000};
  EXPECT_TRUE(absl::StrContains(store.CheckIds(out_of_range, false).message(),
                                "row 1000 is out of range: table 2 has 1000 rows"));
  const uint64_t wrong[] = {theirs};
  EXPECT_TRUE(absl::StrContains(store.CheckIds(wrong, false).message(), "belongs to partition 0"));
  const uint64_t twice[] = {mine, mine};
  EXPECT_TRUE(store.CheckIds(twice, false).ok());
  EXPECT_TRUE(absl::StrContains(store.CheckIds(twice, true).message(), "twice"));
}

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::vector<float> FloatsOf(const std::string& s) {
  std::vector<float> v(s.size() / sizeof(float));
  std::memcpy(v.data(), s.data(), s.size());
  return v;
}

// One shard with a dense chunk (id 0, 2 elements) and one table partition
// (id 1, the whole table), three workers.
struct TableJob {
  testing::MemEnv files;
  Env* env = &files;
  std::unique_ptr<Executor> executor = std::make_unique<Executor>(1);
  JobOptions options;
  std::shared_ptr<Job> job;

  // `dir`: checkpoints there on the real file system instead of in memory.
  explicit TableJob(ConsistencyMode mode, OptimizerType type = OptimizerType::kSgd,
                    const TableSpec& spec = Spec(), const std::string& dir = "") {
    options.job_id = "tables";
    options.optimizer.type = type;
    options.optimizer.learning_rate = 0.5f;
    options.optimizer.initial_accumulator = 0.1f;
    options.optimizer.epsilon = 1e-7f;
    options.consistency.mode = mode;
    options.consistency.staleness = 1;
    options.chunks = {ChunkSpec{0, 2}, ChunkSpec{1, 0, false, spec}};
    options.membership = MembershipEpoch{1, 0, {10, 11}};
    options.checkpoint_dir = dir.empty() ? "/ckpt" : dir;
    if (!dir.empty()) env = Env::Default();
    Reopen();
  }
  void Reopen() {
    auto opened = Job::Open(options, env, executor.get());
    ASSERT_TRUE(opened.ok()) << opened.status();
    job = opened->job;
    if (!opened->restored) {
      ASSERT_FALSE(*job->Init(0, Bytes({0, 0})));
    }
  }
  // Pushes rows `ids` with gradient rows `g` (ids.size() x kDim) at `clock`,
  // and the dense chunk's gradient {1, 1} with them.
  absl::StatusOr<bool> Push(uint64_t w, uint64_t clock, std::vector<uint64_t> ids,
                            std::vector<float> g, bool dense = true) {
    const std::string values = Bytes(g), chunk = Bytes({1, 1});
    PushBucket b;
    b.worker = w;
    b.clock = clock;
    if (dense) b.chunks.push_back({0, ChunkHeader{CodecType::kNone, 2}, chunk});
    b.rows.push_back({1, RowGrads{ids, values}});
    return job->Push(b);
  }
  // Pulls rows `ids` at `clock`: nullopt while the pull is parked.
  std::optional<absl::StatusOr<std::vector<float>>> Pull(uint64_t w, uint64_t clock,
                                                         std::vector<uint64_t> ids) {
    auto out = std::make_shared<std::optional<absl::StatusOr<std::vector<float>>>>();
    PullArgs p;
    p.worker = w;
    p.clock = clock;
    p.deadline = absl::InfiniteFuture();
    p.rows.push_back({1, std::move(ids)});
    job->Pull(p, [out](PullResult r) {
      if (!r.status.ok()) {
        *out = r.status;
      } else {
        EXPECT_TRUE(r.chunks.empty());  // rows only
        *out = FloatsOf(r.rows.at(0).values);
      }
    });
    return *out;
  }
  std::vector<float> Rows(std::vector<uint64_t> ids) { return **Pull(10, 0, std::move(ids)); }
};

std::vector<float> Concat(std::vector<std::vector<float>> rows) {
  std::vector<float> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

// x - lr * mean over the round's contributors, per element.
std::vector<float> Step(std::vector<float> x, const std::vector<float>& g, float scale) {
  for (size_t i = 0; i < x.size(); ++i) x[i] -= 0.5f * scale * g[i];
  return x;
}

TEST(TableJob, SyncRoundAveragesRowsAndLeavesUntouchedRowsAlone) {
  TableJob t(ConsistencyMode::kSync);
  const std::vector<float> g10 = {1, 2, 3, 4, 1, 1, 1, 1};  // rows 3, 7
  const std::vector<float> g11 = {2, 2, 2, 2, 8, 8, 8, 8};  // rows 7, 9
  ASSERT_FALSE(*t.Push(10, 0, {3, 7}, g10));
  EXPECT_FALSE(t.Pull(10, 1, {3, 7, 9, 5}).has_value());  // parked: the round is open
  ASSERT_FALSE(*t.Push(11, 0, {7, 9}, g11));
  ASSERT_TRUE(t.Pull(10, 1, {3, 7, 9, 5}).has_value());
  const std::vector<float> g7 = {3, 3, 3, 3};
  EXPECT_EQ(**t.Pull(10, 1, {3, 7, 9, 5}),
            Concat({Step(Initial(3), {1, 2, 3, 4}, 0.5f), Step(Initial(7), g7, 0.5f),
                    Step(Initial(9), {8, 8, 8, 8}, 0.5f), Initial(5)}));
  EXPECT_TRUE(*t.Push(11, 0, {9}, {100, 100, 100, 100}));  // a duplicate changes nothing
  EXPECT_EQ(t.Rows({9}), Step(Initial(9), {8, 8, 8, 8}, 0.5f));
  // A worker whose batch touched no row of the partition still closes the round.
  ASSERT_FALSE(*t.Push(10, 1, {}, {}));
  ASSERT_FALSE(*t.Push(11, 1, {3}, {2, 2, 2, 2}));
  EXPECT_EQ(t.Rows({3}), Step(Step(Initial(3), {1, 2, 3, 4}, 0.5f), {2, 2, 2, 2}, 0.5f));
  const JobStats s = t.job->Stats(false);
  EXPECT_EQ(s.min_version, 2u);
}

TEST(TableJob, ARowSumPastFloatRangeIsRefusedAndTheRoundKeepsItsSum) {
  TableJob t(ConsistencyMode::kSync);
  const float big = 3e38f;
  ASSERT_FALSE(*t.Push(10, 0, {3, 7}, {1, 1, 1, 1, big, big, big, big}));
  // Row 7 would sum past FLT_MAX; row 5, new to the round, is not added either.
  absl::StatusOr<bool> r = t.Push(11, 0, {5, 7}, {1, 1, 1, 1, big, big, big, big});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(r.status().message(),
                                "adding row 7 to its round would make the round's sum non-finite"))
      << r.status();
  EXPECT_FALSE(t.Pull(10, 1, {3, 5, 7}).has_value());  // the round is still open
  ASSERT_FALSE(*t.Push(11, 0, {7}, {-big, -big, -big, -big}));
  EXPECT_EQ(**t.Pull(10, 1, {3, 5, 7}),
            Concat({Step(Initial(3), {1, 1, 1, 1}, 0.5f), Initial(5), Initial(7)}));
}

TEST(TableJob, AdaGradKeepsOneAccumulatorPerRow) {
  TableJob t(ConsistencyMode::kAsync, OptimizerType::kAdaGrad);
  ASSERT_FALSE(*t.Push(10, 0, {4}, {2, 2, 2, 2}, false));
  ASSERT_FALSE(*t.Push(10, 1, {4, 6}, {2, 2, 2, 2, 1, 1, 1, 1}, false));
  // Async: each push on arrival, scaled by 1 / members (2).
  auto adagrad = [](std::vector<float> x, std::vector<float> gs) {
    float a = 0.1f;
    for (float g : gs) {
      a += g * g;
      for (float& v : x) v -= 0.5f * g / (std::sqrt(a) + 1e-7f);
    }
    return x;
  };
  const std::vector<float> row4 = t.Rows({4}), row6 = t.Rows({6});
  const std::vector<float> want4 = adagrad(Initial(4), {1, 1}), want6 = adagrad(Initial(6), {0.5f});
  for (uint32_t j = 0; j < kDim; ++j) {
    EXPECT_FLOAT_EQ(row4[j], want4[j]);
    EXPECT_FLOAT_EQ(row6[j], want6[j]);
  }
}

TEST(TableJob, BoundedPullsWaitForTheSlowestAsChunksDo) {
  TableJob t(ConsistencyMode::kBounded);
  ASSERT_TRUE(t.Pull(10, 1, {1}).has_value());  // staleness 1: clock 1 may read at min 0
  EXPECT_FALSE(t.Pull(10, 2, {1}).has_value());
  ASSERT_TRUE(t.job->AdvanceClock(10, 1).ok());
  ASSERT_TRUE(t.job->AdvanceClock(11, 1).ok());
  EXPECT_TRUE(t.Pull(10, 2, {1}).has_value());
}

TEST(TableJob, BadRowsAreRefusedAndTheWholeBucketChangesNothing) {
  TableJob t(ConsistencyMode::kAsync);
  auto refused = [&](std::vector<uint64_t> ids, std::vector<float> g, std::string why) {
    absl::StatusOr<bool> r = t.Push(10, 0, ids, g);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << why;
    EXPECT_TRUE(absl::StrContains(r.status().message(), why)) << r.status();
  };
  refused({1000}, {1, 1, 1, 1}, "row 1000 is out of range: table 2 has 1000 rows");
  refused({3, 3}, std::vector<float>(8, 1), "row 3 of table 2 is in the push twice");
  refused({5, 3, 5}, std::vector<float>(12, 1), "row 5 of table 2 is in the push twice");
  refused({3}, {1, 1, 1}, "1 rows of 4 floats need 16 bytes of values, not 12");
  refused({3}, {1, NAN, 1, 1}, "row 3: a gradient value is NaN or Inf");
  refused({3, 5}, {1, 1, 1, 1, 1, 1, 1, -INFINITY}, "row 5: a gradient value is NaN or Inf");
  refused({5, 3}, {1, 1, 1, 1, INFINITY, 1, 1, 1}, "row 3: a gradient value is NaN or Inf");
  EXPECT_EQ(t.Rows({3}), Initial(3));
  EXPECT_EQ(t.Rows({5}), Initial(5));
  auto bad_pull = t.Pull(10, 0, {1u << 20});
  ASSERT_TRUE(bad_pull.has_value());
  EXPECT_EQ(bad_pull->status().code(), absl::StatusCode::kInvalidArgument);
  // An answer that would not fit one message (6 MiB): ask in parts.
  auto huge_pull = t.Pull(10, 0, std::vector<uint64_t>((6 << 20) / 16 + 1, 3));
  ASSERT_TRUE(huge_pull.has_value());
  EXPECT_TRUE(absl::StrContains(huge_pull->status().message(), "ask in parts"))
      << huge_pull->status();
  EXPECT_TRUE(t.Pull(10, 0, std::vector<uint64_t>((6 << 20) / 16, 3))->ok());
  // The dense chunk of the refused buckets did not move either.
  PullArgs p;
  p.worker = 10;
  std::vector<float> dense;
  t.job->Pull(p, [&](PullResult r) { dense = FloatsOf(r.chunks.at(0).values); });
  EXPECT_EQ(dense, (std::vector<float>{0, 0}));
  // A table partition is not a dense chunk, and the other way round.
  EXPECT_EQ(t.job->Init(1, Bytes({0})).status().code(), absl::StatusCode::kInvalidArgument);
  PushBucket b;
  b.worker = 10;
  b.rows.push_back({0, RowGrads{}});
  EXPECT_TRUE(absl::StrContains(t.job->Push(b).status().message(), "not a table partition"));
}

TEST(TableJob, ACheckpointKeepsRowsAndTheirState) {
  TableJob t(ConsistencyMode::kSync, OptimizerType::kAdaGrad);
  ASSERT_FALSE(*t.Push(10, 0, {3, 8}, std::vector<float>(8, 1)));
  ASSERT_FALSE(*t.Push(11, 0, {8}, {3, 3, 3, 3}));
  const std::vector<float> before = t.Rows({3, 8});
  ASSERT_TRUE(t.job->Checkpoint().ok());
  t.Reopen();
  EXPECT_EQ(t.Rows({3, 8}), before);
  // The accumulators came back too: a second step equals one on the old job.
  ASSERT_FALSE(*t.Push(10, 1, {8}, {1, 1, 1, 1}));
  ASSERT_FALSE(*t.Push(11, 1, {}, {}));
  float a = 0.1f + 2.0f * 2.0f;  // round 0: mean (1 + 3) / 2
  float x = Initial(8)[0] - 0.5f * 2.0f / (std::sqrt(a) + 1e-7f);
  a += 0.5f * 0.5f;  // round 1: (1 + nothing) / 2 contributors
  x -= 0.5f * 0.5f / (std::sqrt(a) + 1e-7f);
  EXPECT_FLOAT_EQ(t.Rows({8})[0], x);
  EXPECT_TRUE(*t.Push(10, 0, {3}, {1, 1, 1, 1}));  // clock 0 is in the checkpoint
}

// Peak resident memory since the last call, in bytes (VmHWM, reset through
// /proc/self/clear_refs).
uint64_t PeakRssSinceLast() {
  std::ifstream status("/proc/self/status");
  uint64_t kb = 0;
  for (std::string line; std::getline(status, line);) {
    if (absl::StartsWith(line, "VmHWM:")) kb = std::stoull(line.substr(6));
  }
  std::ofstream("/proc/self/clear_refs") << "5";
  return kb << 10;
}

// What RSS holds per byte the program touches: ThreadSanitizer adds 4 bytes
// of shadow per byte (measured here: a restore grew RSS by 5.6x the table
// under TSan, 1.15x without).
#if defined(__SANITIZE_THREAD__)
constexpr uint64_t kRssPerByte = 5;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr uint64_t kRssPerByte = 5;
#else
constexpr uint64_t kRssPerByte = 1;
#endif
#else
constexpr uint64_t kRssPerByte = 1;
#endif

uint64_t RssNow() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

// See [streamed table checkpoint]: writing a checkpoint copies no table, and
// restoring one holds it once. Before, each held it three times over (a
// copy of the rows, the body, the framed file), so the largest table a shard
// could checkpoint was a third of what it could hold.
TEST(TableJob, ACheckpointOfATableHoldsNoSecondCopy) {
  testing::TempDir dir;
  TableSpec spec = Spec();
  spec.table_rows = 1 << 18;
  spec.dim = 64;
  TableJob t(ConsistencyMode::kAsync, OptimizerType::kAdaGrad, spec, dir.path());
  constexpr uint64_t kBatch = 1 << 15;
  for (uint64_t lo = 0; lo < spec.table_rows; lo += kBatch) {
    std::vector<uint64_t> ids(kBatch);
    for (uint64_t i = 0; i < kBatch; ++i) ids[i] = lo + i;
    ASSERT_FALSE(*t.Push(10, lo / kBatch, ids, std::vector<float>(kBatch * spec.dim, 0.01f)));
  }
  const uint64_t table = t.job->row_bytes();  // values, AdaGrad's accumulators, ids, index
  ASSERT_EQ(table, spec.table_rows * (spec.dim * 8 + RowStore::kIdAndIndexBytes));
  const std::vector<uint64_t> some = {0, 77, 100000, spec.table_rows - 1};
  const std::vector<float> before = t.Rows(some);

  PeakRssSinceLast();
  const uint64_t rss = RssNow();
  absl::StatusOr<Job::CheckpointInfo> info = t.job->Checkpoint();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_GT(info->bytes, spec.table_rows * (spec.dim * 8 + sizeof(uint64_t)));  // every row
  EXPECT_LT(PeakRssSinceLast() - rss, kRssPerByte * table / 8)
      << "writing took more than a piece";

  t.job.reset();
  PeakRssSinceLast();
  const uint64_t empty = RssNow();
  t.Reopen();
  EXPECT_LT(PeakRssSinceLast() - empty, kRssPerByte * table * 3 / 2)
      << "restoring held the table twice";
  EXPECT_EQ(t.Rows(some), before);
  EXPECT_EQ(t.job->row_bytes(), table);
}

// Rows live in blocks (server/shard/row_array.h): a new row moves none, and
// a growing store holds its rows once. Arrays that doubled held the first
// 2^18 rows twice while the next row copied them into an array twice as big.
TEST(RowStore, GrowsWithoutMovingOrCopyingItsRows) {
  TableSpec spec = Spec();
  spec.table_rows = 1 << 20;
  spec.dim = 64;
  OptimizerOptions o;
  o.type = OptimizerType::kAdaGrad;
  RowStore store(spec, *Optimizer::Create(o));
  const float* first = store.params(store.Touch(0));
  const std::vector<float> first_values(first, first + spec.dim);
  constexpr uint64_t kRows = (uint64_t{1} << 18) + 1;
  std::vector<uint64_t> ids(kRows - 1);
  for (uint64_t i = 0; i < ids.size(); ++i) ids[i] = i + 1;
  std::vector<uint32_t> at(ids.size());
  PeakRssSinceLast();
  const uint64_t rss = RssNow();
  store.TouchAll(ids, at.data());
  const uint64_t held = kRows * store.row_bytes();  // 128 MiB of values and state, ids, index
  EXPECT_LT(PeakRssSinceLast() - rss, kRssPerByte * held * 5 / 4)
      << "growing held the rows twice";
  EXPECT_EQ(store.params(0), first);
  EXPECT_EQ(std::vector<float>(first, first + spec.dim), first_values);
  EXPECT_EQ(std::vector<float>(store.params(at.back()), store.params(at.back()) + spec.dim),
            Initial(kRows - 1, spec));
}

// The bytes a store counts (what the shard's row budget sees) bound what it
// takes, ids and index included, also as its index doubles: narrow rows,
// where the index is most of it. Counting only values and state, it counted
// 16 bytes per row here and took over 4x that.
TEST(RowStore, TheBytesItCountsBoundWhatItTakes) {
  TableSpec spec = Spec();
  spec.table_rows = uint64_t{1} << 24;
  spec.dim = 4;
  OptimizerOptions o;
  o.type = OptimizerType::kSgd;  // no state: a row is 16 bytes of values
  RowBudget counted;
  RowStore store(spec, *Optimizer::Create(o), &counted);
  // Just past the 917,504 rows where the index doubles: its most bytes per
  // row (and a block of values just begun).
  constexpr uint64_t kRows = 917504 + 4096;
  constexpr uint64_t kBatch = uint64_t{1} << 10;
  std::vector<uint64_t> ids(kBatch);
  std::vector<uint32_t> at(kBatch);
  PeakRssSinceLast();
  const uint64_t rss = RssNow();
  for (uint64_t lo = 0; lo < kRows; lo += kBatch) {
    for (uint64_t i = 0; i < kBatch; ++i) ids[i] = (lo + i) * 7;
    store.TouchAll(ids, at.data());
  }
  const uint64_t took = PeakRssSinceLast() - rss;
  EXPECT_EQ(counted.rows.load(), kRows * store.row_bytes());
  // Measured: it takes 0.98x what it counts here (0.53x where the index is
  // 7/8 full); 5% of room for another host's allocator and huge pages.
  EXPECT_LE(took, kRssPerByte * counted.rows.load() * 21 / 20) << "took more than it counted";
  EXPECT_GT(took, kRssPerByte * counted.rows.load() / 2) << "counted far more than it took";
  EXPECT_TRUE(store.Has(7 * (kRows - 1)));
  EXPECT_FALSE(store.Has(7 * kRows));
}

// As above for what an open image keeps ([row snapshot]): the old values of
// every row of the image, changed once each, at the kept map's peak.
TEST(RowStore, TheBytesItKeepsBoundWhatItTakes) {
  TableSpec spec = Spec();
  spec.table_rows = uint64_t{1} << 24;
  spec.dim = 4;
  OptimizerOptions o;
  o.type = OptimizerType::kSgd;
  RowBudget counted;
  RowStore store(spec, *Optimizer::Create(o), &counted);
  // Just past where the kept map doubles (917,504 entries).
  constexpr uint64_t kRows = 917504 + 4096;
  // glibc's default threshold, held fixed: freed arrays of the map's growth
  // go back to the kernel instead of raising the threshold and staying in
  // the heap, so RSS is what the store holds.
  if (mallopt(M_MMAP_THRESHOLD, 128 << 10) != 1) GTEST_SKIP() << "not glibc's allocator";
  std::vector<uint64_t> ids(kRows);
  std::vector<uint32_t> at(kRows);
  for (uint64_t i = 0; i < kRows; ++i) ids[i] = i * 7;
  store.TouchAll(ids, at.data());
  store.BeginSnapshot();
  PeakRssSinceLast();
  const uint64_t rss = RssNow();
  for (uint32_t a : at) store.KeepForSnapshot(a);
  const uint64_t took = PeakRssSinceLast() - rss;
  EXPECT_EQ(counted.kept.load(), kRows * store.kept_row_bytes());
  // Measured: 0.99x what it counts (1.06x with the threshold left to glibc).
  EXPECT_LE(took, kRssPerByte * counted.kept.load() * 21 / 20) << "took more than it counted";
  EXPECT_GT(took, kRssPerByte * counted.kept.load() / 2) << "counted far more than it took";
  store.EndSnapshot();
  EXPECT_EQ(counted.kept.load(), 0u);
}

// Files whose first Append waits until Release(): a checkpoint held
// mid-write, after its first block of rows.
class HeldWriteEnv : public testing::MemEnv {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    absl::StatusOr<std::unique_ptr<WritableFile>> file = MemEnv::NewWritableFile(path);
    if (!file.ok()) return file;
    return std::make_unique<File>(this, *std::move(file));
  }
  void WaitHeld() { held_.WaitForNotification(); }
  void Release() { release_.Notify(); }

 private:
  class File final : public WritableFile {
   public:
    File(HeldWriteEnv* env, std::unique_ptr<WritableFile> target)
        : env_(env), target_(std::move(target)) {}
    absl::Status Append(std::string_view data) override {
      if (!env_->held_.HasBeenNotified()) {
        env_->held_.Notify();
        env_->release_.WaitForNotification();
      }
      return target_->Append(data);
    }
    absl::Status WriteAt(uint64_t offset, std::string_view data) override {
      return target_->WriteAt(offset, data);
    }
    absl::Status Sync() override { return target_->Sync(); }
    absl::Status Close() override { return target_->Close(); }

   private:
    HeldWriteEnv* const env_;
    const std::unique_ptr<WritableFile> target_;
  };

  absl::Notification held_, release_;
};

// See [row snapshot]: a checkpoint does not hold a table partition while it
// writes its rows, and what it writes is the rows as they were when it began.
TEST(TableJob, PushesGoOnWhileACheckpointWritesTheRows) {
  TableSpec spec = Spec();
  spec.table_rows = 1 << 14;
  spec.dim = 64;  // 4 MiB of values: written in several blocks
  TableJob t(ConsistencyMode::kAsync, OptimizerType::kAdaGrad, spec);
  HeldWriteEnv held;
  t.env = &held;
  t.Reopen();
  std::vector<uint64_t> all(spec.table_rows);
  for (uint64_t i = 0; i < all.size(); ++i) all[i] = i;
  ASSERT_FALSE(*t.Push(10, 0, all, std::vector<float>(all.size() * spec.dim, 0.01f), false));
  const uint64_t late = spec.table_rows - 5;  // in the last block the checkpoint reads
  const std::vector<float> before = t.Rows({late});

  absl::StatusOr<Job::CheckpointInfo> info;
  std::thread checkpoint([&] { info = t.job->Checkpoint(); });
  held.WaitHeld();  // the first block is in the file, the rest not read yet
  absl::Notification pushed;
  std::thread push([&] {
    EXPECT_FALSE(*t.Push(10, 1, {late}, std::vector<float>(spec.dim, 1.0f), false));
    pushed.Notify();
  });
  const bool went_on = pushed.WaitForNotificationWithTimeout(absl::Seconds(20));
  EXPECT_TRUE(went_on) << "a push waited for the checkpoint's write";
  const std::vector<float> after = went_on ? t.Rows({late}) : std::vector<float>();
  held.Release();
  EXPECT_NE(after, before);
  push.join();
  checkpoint.join();
  ASSERT_TRUE(info.ok()) << info.status();

  t.Reopen();  // from the checkpoint: the rows and clocks from when it began
  EXPECT_EQ(t.Rows({late}), before);
  EXPECT_FALSE(*t.Push(10, 1, {late}, std::vector<float>(spec.dim, 1.0f), false))
      << "clock 1 came after the checkpoint: not a duplicate";
  EXPECT_EQ(t.Rows({late}), after);
}

// See [row snapshot]: an image keeps the old values of a row changed while
// it is open, counted in the budget, only until the last array's pass has
// read that row; a row changed after that pass is not kept at all.
TEST(RowStore, AnImageKeepsOnlyRowsItHasNotReadAndCountsThem) {
  TableSpec spec = Spec();
  spec.table_rows = 100;
  OptimizerOptions o;
  o.type = OptimizerType::kAdaGrad;  // one state slot: the last pass is the slot's
  o.initial_accumulator = 0.1f;
  RowBudget budget;
  RowStore store(spec, *Optimizer::Create(o), &budget);
  for (uint64_t i = 0; i < spec.table_rows; ++i) store.Touch(i);
  const uint64_t rows = budget.rows.load();
  std::vector<float> values(spec.table_rows * kDim), slots(spec.table_rows * kDim);
  store.BeginSnapshot();
  auto change = [&](uint32_t i) {
    store.KeepForSnapshot(i);
    for (uint32_t j = 0; j < kDim; ++j) {
      store.params(i)[j] += 1;
      store.slot(0, i)[j] += 1;
    }
  };
  for (uint32_t i = 0; i < spec.table_rows; ++i) change(i);
  EXPECT_EQ(budget.kept.load(), spec.table_rows * store.kept_row_bytes());
  EXPECT_EQ(budget.rows.load(), rows);
  ASSERT_TRUE(store.SnapshotFloats(-1, 0, spec.table_rows, values.data()).ok());
  EXPECT_EQ(budget.kept.load(), spec.table_rows * store.kept_row_bytes()) << "slots not read yet";
  ASSERT_TRUE(store.SnapshotFloats(0, 0, 40, slots.data()).ok());
  EXPECT_EQ(budget.kept.load(), 60 * store.kept_row_bytes());
  change(10);  // read by both passes: nothing to keep
  EXPECT_EQ(budget.kept.load(), 60 * store.kept_row_bytes());
  ASSERT_TRUE(store.SnapshotFloats(0, 40, spec.table_rows, slots.data() + 40 * kDim).ok());
  EXPECT_EQ(budget.kept.load(), 0u);
  for (uint64_t i = 0; i < spec.table_rows; ++i) {
    EXPECT_EQ(std::vector<float>(values.begin() + i * kDim, values.begin() + (i + 1) * kDim),
              Initial(i, spec));
    EXPECT_EQ(slots[i * kDim], 0.1f);
  }
  store.EndSnapshot();
  EXPECT_EQ(budget.held(), rows);
}

// An image whose kept rows would pass the budget fails, gives back what it
// kept, and leaves the rows alone; the next image starts afresh.
TEST(RowStore, AnImagePastTheBudgetFailsAndGivesBackWhatItKept) {
  TableSpec spec = Spec();
  spec.table_rows = 10;
  OptimizerOptions o;
  o.type = OptimizerType::kSgd;
  RowStore sizer(spec, *Optimizer::Create(o));
  RowBudget budget(spec.table_rows * sizer.row_bytes() + 2 * sizer.kept_row_bytes());
  RowStore store(spec, *Optimizer::Create(o), &budget);
  for (uint64_t i = 0; i < spec.table_rows; ++i) store.Touch(i);
  std::vector<float> out(spec.table_rows * kDim);
  store.BeginSnapshot();
  store.KeepForSnapshot(0);
  store.KeepForSnapshot(1);
  EXPECT_EQ(budget.held(), budget.max_bytes);
  store.KeepForSnapshot(2);
  EXPECT_EQ(budget.kept.load(), 0u);
  absl::Status failed = store.SnapshotFloats(-1, 0, spec.table_rows, out.data());
  EXPECT_EQ(failed.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(failed.message(), "checkpoint abandoned")) << failed;
  EXPECT_EQ(store.params(2)[0], Initial(2, spec)[0]);
  store.EndSnapshot();
  store.BeginSnapshot();
  store.KeepForSnapshot(3);
  EXPECT_EQ(budget.kept.load(), sizer.kept_row_bytes());
  EXPECT_TRUE(store.SnapshotFloats(-1, 0, spec.table_rows, out.data()).ok());
  store.EndSnapshot();
}

// New rows go before a checkpoint: rows that fit the budget only without
// what an open checkpoint keeps are created, that checkpoint fails (and is
// written whole the next time), and nothing else is lost.
TEST(TableJob, NewRowsTakeTheBytesACheckpointKept) {
  TableSpec spec = Spec();
  spec.table_rows = 1 << 14;
  spec.dim = 64;
  TableJob t(ConsistencyMode::kAsync, OptimizerType::kAdaGrad, spec);
  HeldWriteEnv held;
  t.env = &held;
  constexpr uint64_t kRowBytes = 64 * 8 + RowStore::kIdAndIndexBytes;
  const uint64_t first = spec.table_rows - 64;
  t.options.max_row_bytes = spec.table_rows * kRowBytes;  // 64 rows to spare
  t.Reopen();
  std::vector<uint64_t> ids(first);
  for (uint64_t i = 0; i < first; ++i) ids[i] = i;
  ASSERT_FALSE(*t.Push(10, 0, ids, std::vector<float>(ids.size() * spec.dim, 0.01f), false));

  absl::StatusOr<Job::CheckpointInfo> info;
  std::thread checkpoint([&] { info = t.job->Checkpoint(); });
  held.WaitHeld();  // the last rows are not read yet
  const std::vector<uint64_t> changed = {first - 3, first - 2, first - 1};
  ASSERT_FALSE(*t.Push(10, 1, changed, std::vector<float>(3 * spec.dim, 1.0f), false));
  EXPECT_EQ(t.job->row_bytes(), first * kRowBytes + 3 * (64 * 8 + RowStore::kKeptEntryBytes))
      << "kept rows are counted";
  EXPECT_EQ(t.job->Stats(false).tables.at(0).rows.bytes, t.job->row_bytes());
  std::vector<uint64_t> fresh(64);
  for (uint64_t i = 0; i < fresh.size(); ++i) fresh[i] = first + i;
  absl::StatusOr<bool> pushed =
      t.Push(10, 2, fresh, std::vector<float>(fresh.size() * spec.dim, 1.0f), false);
  held.Release();
  checkpoint.join();
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_EQ(info.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(info.status().message(), "new rows needed the memory"))
      << info.status();
  EXPECT_EQ(t.job->row_bytes(), spec.table_rows * kRowBytes) << "what it kept is given back";
  EXPECT_TRUE(held.FileNames().empty());
  const std::vector<float> rows = t.Rows({first - 1, first + 63});

  ASSERT_TRUE(t.job->Checkpoint().ok());
  t.Reopen();
  EXPECT_EQ(t.Rows({first - 1, first + 63}), rows);
}

// A disk that fills in the middle of a table's rows: the checkpoint fails
// with the disk's error, the old file stays, the snapshot it opened is
// closed (the next checkpoint opens its own), and rows changed meanwhile
// are in the next one.
TEST(TableJob, AFullDiskMidTableKeepsTheOldCheckpoint) {
  TableSpec spec = Spec();
  spec.table_rows = 1 << 14;
  spec.dim = 64;
  TableJob t(ConsistencyMode::kAsync, OptimizerType::kAdaGrad, spec);
  testing::FaultInjectionEnv disk(&t.files);
  t.env = &disk;
  t.Reopen();
  std::vector<uint64_t> all(spec.table_rows);
  for (uint64_t i = 0; i < all.size(); ++i) all[i] = i;
  ASSERT_FALSE(*t.Push(10, 0, all, std::vector<float>(all.size() * spec.dim, 0.01f), false));
  ASSERT_TRUE(t.job->Checkpoint().ok());
  const std::string path = CheckpointPath("/ckpt", "tables", 0);
  const std::string old = *t.files.ReadFile(path);
  ASSERT_FALSE(*t.Push(10, 1, {7}, std::vector<float>(spec.dim, 1.0f), false));
  const std::vector<float> seven = t.Rows({7});

  disk.SetFreeBytes(3 << 20);  // the values' first blocks fit, not the rest
  absl::StatusOr<Job::CheckpointInfo> full = t.job->Checkpoint();
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted) << full.status();
  EXPECT_EQ(*t.files.ReadFile(path), old);
  EXPECT_EQ(t.files.FileNames(), std::vector<std::string>{path});
  disk.SetFreeBytes(std::nullopt);
  ASSERT_TRUE(t.job->Checkpoint().ok());
  t.Reopen();
  EXPECT_EQ(t.Rows({7}), seven);
}

// An update the optimizer refuses (finite gradients whose step is not)
// leaves no rows behind: the rows it touched first are forgotten again.
TEST(TableJob, ARefusedUpdateCreatesNoRows) {
  for (ConsistencyMode mode : {ConsistencyMode::kAsync, ConsistencyMode::kSync}) {
    TableJob t(mode, OptimizerType::kAdaGrad);
    ASSERT_FALSE(*t.Push(10, 0, {1}, std::vector<float>(4, 1), false));
    ASSERT_FALSE(*t.Push(11, 0, {}, {}, false));
    const uint64_t held = t.job->Stats(false).tables.at(0).rows.bytes;
    ASSERT_GT(held, 0u);
    // 1e20 squared overflows the accumulator: async refuses the push, sync
    // the round it closes.
    ASSERT_TRUE(t.Push(10, 1, {}, {}, false).ok());
    absl::StatusOr<bool> r = t.Push(11, 1, {2, 3}, std::vector<float>(8, 1e20f), false);
    EXPECT_EQ(r.ok(), mode == ConsistencyMode::kSync) << r.status();
    const JobStats s = t.job->Stats(false);
    EXPECT_EQ(s.tables.at(0).rows.held, 1u);
    EXPECT_EQ(s.tables.at(0).rows.bytes, held);
  }
}

// A table may take at most max_row_bytes on the shard: rows past it are
// refused with the figures, nothing changed, instead of growing until the
// shard is killed; rows already held still move.
TEST(TableJob, RowsPastTheShardsBudgetAreRefused) {
  TableJob t(ConsistencyMode::kAsync, OptimizerType::kAdaGrad);
  // 3 rows with their accumulators, ids and index entries
  constexpr uint64_t kRowBytes = kDim * sizeof(float) * 2 + RowStore::kIdAndIndexBytes;
  t.options.max_row_bytes = 3 * kRowBytes;
  t.options.checkpoint_dir.clear();
  t.Reopen();
  ASSERT_FALSE(*t.Push(10, 0, {1, 2}, std::vector<float>(8, 1), false));
  absl::StatusOr<bool> over = t.Push(10, 1, {3, 4}, std::vector<float>(8, 1), false);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(over.status().message(), "2 new rows of table 2 (200 bytes"))
      << over.status();
  auto pull = t.Pull(10, 1, {5, 6});
  ASSERT_TRUE(pull.has_value());
  EXPECT_EQ(pull->status().code(), absl::StatusCode::kResourceExhausted);
  JobStats s = t.job->Stats(false);
  ASSERT_EQ(s.tables.size(), 1u);
  EXPECT_EQ(s.tables[0].chunk_id, 1u);
  EXPECT_EQ(s.tables[0].rows.held, 2u);
  EXPECT_EQ(s.tables[0].rows.bytes, 2 * kRowBytes);
  ASSERT_FALSE(*t.Push(10, 1, {2, 3}, std::vector<float>(8, 1), false));  // one new: fits
  s = t.job->Stats(false);
  EXPECT_EQ(s.tables[0].rows.held, 3u);
  EXPECT_EQ(s.tables[0].rows.pushed, 4u);
  EXPECT_EQ(s.tables[0].rows.pulled, 0u);  // the refused pull read nothing
}

// A shard that gets a running job again without a checkpoint has lost the
// table's rows (no worker holds them): its partitions go on from the resume
// clock with rows from the initializer, instead of waiting for rounds that
// passed.
// Its rows are lost, and the partition says so (GetStats, `gradstream
// status`, gs_shard_table_rows_lost); one restored from a checkpoint does not.
TEST(TableJob, AResumedJobWithoutACheckpointGoesOnFromTheResumeClock) {
  TableJob t(ConsistencyMode::kSync);
  EXPECT_EQ(t.job->Stats(false).tables.at(0).rows.lost, 0u);
  ASSERT_TRUE(t.job->Checkpoint().ok());
  t.options.resume = true;
  t.Reopen();
  EXPECT_EQ(t.job->Stats(false).tables.at(0).rows.lost, 0u) << "restored";
  t.options.checkpoint_dir.clear();
  t.options.resume_clock = 5;
  t.Reopen();
  EXPECT_EQ(t.job->Stats(false).tables.at(0).rows.lost, 1u);
  auto rows = t.Pull(10, 5, {3});
  ASSERT_TRUE(rows.has_value());
  ASSERT_TRUE(rows->ok()) << rows->status();
  EXPECT_EQ(**rows, Initial(3));
  ASSERT_FALSE(*t.Push(10, 5, {3}, {2, 2, 2, 2}, false));
  ASSERT_FALSE(*t.Push(11, 5, {}, {}, false));
  EXPECT_EQ(**t.Pull(10, 6, {3}), Step(Initial(3), {2, 2, 2, 2}, 0.5f));
}

}  // namespace
}  // namespace gradstream::shard
