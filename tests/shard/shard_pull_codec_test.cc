// Compressed pulls (see [pull codec] in common/codec/published.h) through the
// real processes: 2 gs_shard children on loopback and 3 in-process PsClients
// under bounded staleness s = 3 (and sync, and async), one of them slow. After every pull each
// worker's published copies must agree bit for bit with every other
// worker's at the same version (and with the shard's: each answer carries
// the shard's checksum, which the client checks) and the caller's buffers
// must hold exactly those copies; after a shard is killed with -9 and
// restarted from its checkpoint, and after a worker restarts with a new
// incarnation, the same holds.
#include <atomic>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/codec/published.h"
#include "gtest/gtest.h"
#include "worker/client/ps_client.h"
#include "worker/client/testing/shard_process.h"

namespace gradstream::client {
namespace {

using testing::ShardProcess;

constexpr absl::Duration kWait = absl::Seconds(30);
constexpr uint32_t kStaleness = 3;
constexpr uint64_t kClocks = 24;

// Every (chunk, version) -> checksum any worker reported; the first report
// fixes it, every later one must equal it.
class Ledger {
 public:
  void Record(uint64_t worker, const std::vector<PsClient::PublishedCopyInfo>& copies) {
    absl::MutexLock l(&mu_);
    for (const auto& c : copies) {
      auto [it, fresh] = seen_.emplace(std::pair{c.chunk_id, c.version}, c.checksum);
      ++reports_;
      if (!fresh && it->second != c.checksum) {
        errors_.push_back(absl::StrCat("worker ", worker, " chunk ", c.chunk_id, " version ",
                                       c.version, ": checksum ", c.checksum,
                                       ", another worker had ", it->second));
      }
      if (!fresh) ++agreed_;
    }
  }
  void Error(std::string e) {
    absl::MutexLock l(&mu_);
    errors_.push_back(std::move(e));
  }
  std::vector<std::string> errors() const {
    absl::MutexLock l(&mu_);
    return errors_;
  }
  uint64_t agreed() const {
    absl::MutexLock l(&mu_);
    return agreed_;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::pair<uint64_t, uint64_t>, uint32_t> seen_ ABSL_GUARDED_BY(mu_);
  uint64_t reports_ ABSL_GUARDED_BY(mu_) = 0, agreed_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> errors_ ABSL_GUARDED_BY(mu_);
};

class PullCodecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/gs_pull_codec_" + std::to_string(::getpid());
    std::filesystem::create_directories(dir_);
    for (int i = 0; i < 2; ++i) {
      auto p = ShardProcess::Start(GS_SHARD_BINARY,
                                   {"--executor_threads=2", "--checkpoint_dir=" + dir_});
      ASSERT_TRUE(p.ok()) << p.status();
      shards_.push_back(*std::move(p));
    }
    CodecPolicy policy;
    policy.default_codec = "twobit";
    auto map = SplitModel({{"w", 40000}, {"b", 10}},
                          {shards_[0]->address(), shards_[1]->address()}, 16384, policy);
    ASSERT_TRUE(map.ok()) << map.status();
    map_ = *map;
    setup_.optimizer.set_type("momentum");
    setup_.optimizer.set_learning_rate(0.05f);
    setup_.optimizer.set_momentum(0.9f);
    setup_.consistency.set_mode(v1::BOUNDED);
    setup_.consistency.set_staleness(kStaleness);
    setup_.workers = {1, 2, 3};
    setup_.checkpoint_every = 4;
    setup_.pull_codec = v1::CODEC_TWOBIT;
  }
  // Installs the job (in `mode`) on both shards.
  void Create(v1::ConsistencyMode mode) {
    setup_.consistency.set_mode(mode);
    ASSERT_TRUE(testing::CreateJob(map_, setup_, kWait).ok());
  }
  void TearDown() override {
    shards_.clear();
    std::filesystem::remove_all(dir_);
  }

  ClientOptions Options(uint64_t worker, uint64_t incarnation = 1) const {
    ClientOptions o;
    o.job_id = "job";
    o.worker_id = worker;
    o.incarnation = incarnation;
    o.epoch = 1;
    o.seed = 42;
    o.rpc_deadline = absl::Seconds(10);
    o.reconnect.initial_backoff = absl::Milliseconds(10);
    o.reconnect.max_backoff = absl::Milliseconds(200);
    return o;
  }

  // One worker's clocks [from, to): pull, check, push, advance. The slow one
  // sleeps per clock, so the others run into the staleness bound.
  void Run(PsClient& client, uint64_t worker, uint64_t from, uint64_t to, bool slow,
           std::vector<std::vector<float>>& params) {
    std::mt19937 rng(static_cast<uint32_t>(worker * 1000 + from));
    std::normal_distribution<float> noise(0.0f, 0.5f);
    for (uint64_t c = from; c < to; ++c) {
      std::vector<absl::Span<float>> out;
      for (auto& p : params) out.push_back(absl::MakeSpan(p));
      absl::Status s;
      for (int attempt = 0; attempt < 3; ++attempt) {
        s = PsClient::Wait(client.Pull(c, out), kWait);
        // A copy that failed its checksum is dropped and re-pulled whole;
        // counted, because it must not happen.
        if (!absl::IsDataLoss(s)) break;
        data_loss_.fetch_add(1);
      }
      if (!s.ok()) {
        return ledger_.Error(absl::StrCat("worker ", worker, " pull ", c, ": ", s.ToString()));
      }
      // The caller's buffers hold exactly the published copies.
      const std::vector<PsClient::PublishedCopyInfo> copies = client.published_copies();
      if (copies.size() != map_.chunks.size()) {
        return ledger_.Error(absl::StrCat("worker ", worker, " holds ", copies.size(), " copies"));
      }
      for (const auto& info : copies) {
        const ChunkInfo& ch = map_.chunks[info.chunk_id];
        const uint32_t mine = PublishedChecksum(
            absl::MakeConstSpan(params[ch.tensor].data() + ch.offset, ch.num_elems));
        if (mine != info.checksum) {
          return ledger_.Error(absl::StrCat("worker ", worker, " clock ", c, " chunk ",
                                            info.chunk_id, ": buffer is not the published copy"));
        }
      }
      ledger_.Record(worker, copies);
      std::vector<PushHandle> pushes;
      for (const TensorInfo& t : map_.tensors) {
        std::vector<float> g(t.num_elems);
        for (float& x : g) x = noise(rng) + 0.1f * params[t.index][&x - g.data()];
        pushes.push_back(client.Push(t.index, g, c));
      }
      for (const PushHandle& h : pushes) {
        if (absl::Status p = PsClient::Wait(h, kWait); !p.ok()) {
          return ledger_.Error(absl::StrCat("worker ", worker, " push ", c, ": ", p.ToString()));
        }
      }
      if (slow) absl::SleepFor(absl::Milliseconds(25));
      if (absl::Status a = client.AdvanceClock(c + 1); !a.ok()) {
        return ledger_.Error(absl::StrCat("worker ", worker, " clock ", c, ": ", a.ToString()));
      }
    }
  }

  // Rank 0's part: random initial parameters.
  bool Init(PsClient& client, std::vector<std::vector<float>>& params) {
    std::mt19937 rng(9);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<absl::Span<const float>> spans;
    for (auto& p : params) {
      for (float& x : p) x = d(rng);
      spans.push_back(p);
    }
    absl::Status s = client.InitParams(spans, kWait);
    if (!s.ok()) ledger_.Error(s.ToString());
    return s.ok();
  }

  std::vector<std::vector<float>> Buffers() const {
    std::vector<std::vector<float>> b;
    for (const TensorInfo& t : map_.tensors) b.emplace_back(t.num_elems, 0.0f);
    return b;
  }

  void ExpectClean() {
    for (const std::string& e : ledger_.errors()) ADD_FAILURE() << e;
    EXPECT_EQ(data_loss_.load(), 0u);
    EXPECT_GT(ledger_.agreed(), kClocks * map_.chunks.size())
        << "workers should often hold the same version";
  }

  std::string dir_;
  std::vector<std::unique_ptr<ShardProcess>> shards_;
  ShardMap map_;
  testing::JobSetup setup_;
  Ledger ledger_;
  std::atomic<uint64_t> data_loss_{0};
};

class PullCodecModeTest : public PullCodecTest,
                          public ::testing::WithParamInterface<v1::ConsistencyMode> {};

TEST_P(PullCodecModeTest, WorkersAgreeWithTheShardAfterEveryStep) {
  Create(GetParam());
  std::vector<std::thread> threads;
  std::vector<ClientStats> stats(3);
  for (uint64_t w = 1; w <= 3; ++w) {
    threads.emplace_back([&, w] {
      auto client = PsClient::Connect(map_, Options(w));
      if (!client.ok()) return ledger_.Error(client.status().ToString());
      auto params = Buffers();
      if (w == 1 && !Init(**client, params)) return;
      Run(**client, w, 0, kClocks, /*slow=*/w == 3, params);
      stats[w - 1] = (*client)->stats();
      (*client)->Leave(kWait).IgnoreError();
    });
  }
  for (auto& t : threads) t.join();
  ExpectClean();
  for (const ClientStats& s : stats) {
    // Mostly deltas: far below fp32 even counting the first snapshot.
    EXPECT_LT(s.bytes_pulled * 4, s.fp32_bytes_pulled)
        << s.bytes_pulled << " of " << s.fp32_bytes_pulled;
  }
  for (const auto& shard : shards_) {
    auto st = testing::GetStats(shard->address(), "job", kWait);
    ASSERT_TRUE(st.ok()) << st.status();
    if (GetParam() == v1::BOUNDED) {
      EXPECT_LE(st->max_staleness(), kStaleness);
    }
    EXPECT_GT(st->fp32_bytes_out(), 4 * st->bytes_out());
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, PullCodecModeTest,
                         ::testing::Values(v1::SYNC, v1::BOUNDED, v1::ASYNC),
                         [](const ::testing::TestParamInfo<v1::ConsistencyMode>& info) {
                           return v1::ConsistencyMode_Name(info.param);
                         });

TEST_F(PullCodecTest, WorkersStillAgreeAfterShardAndWorkerRestarts) {
  Create(v1::BOUNDED);
  std::vector<std::thread> threads;
  std::atomic<int> at_half{0};
  absl::Notification restarted;
  for (uint64_t w = 1; w <= 3; ++w) {
    threads.emplace_back([&, w] {
      auto params = Buffers();
      {
        auto client = PsClient::Connect(map_, Options(w));
        if (!client.ok()) return ledger_.Error(client.status().ToString());
        if (w == 1 && !Init(**client, params)) return;
        Run(**client, w, 0, kClocks / 2, w == 3, params);
        at_half.fetch_add(1);
        // Worker 2 "crashes" here: its client goes without Leave and a new
        // incarnation with no copies takes over its clocks.
        if (w != 2) {
          restarted.WaitForNotificationWithTimeout(kWait);
          Run(**client, w, kClocks / 2, kClocks, w == 3, params);
          (*client)->Leave(kWait).IgnoreError();
          return;
        }
      }
      restarted.WaitForNotificationWithTimeout(kWait);
      auto again = PsClient::Connect(map_, Options(w, /*incarnation=*/2));
      if (!again.ok()) return ledger_.Error(again.status().ToString());
      Run(**again, w, kClocks / 2, kClocks, false, params);
      (*again)->Leave(kWait).IgnoreError();
    });
  }
  // Everyone at half way: kill -9 shard 0 and bring it back from its
  // checkpoint, as the coordinator would.
  const absl::Time end = absl::Now() + kWait;
  while (at_half.load() < 3 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ(at_half.load(), 3);
  shards_[0]->Kill();
  ASSERT_TRUE(shards_[0]->Restart().ok());
  auto created = testing::CreateJobOn(map_, 0, setup_, kWait);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(created->restored());
  restarted.Notify();
  for (auto& t : threads) t.join();
  ExpectClean();
}

}  // namespace
}  // namespace gradstream::client
