// 2 real shards x 3 workers in sync (BSP) mode: after K clocks the shards'
// parameters equal a single-process reference computed here, for SGD and
// AdaGrad, with codec none (fp32) and with twobit / ternary (the reference
// encodes with the codec library and sums with DecodeAdd).
#include <cmath>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/codec/codec.h"
#include "common/codec/registry.h"
#include "common/codec/wire.h"
#include "gtest/gtest.h"
#include "tests/shard/shard_testing.h"

namespace gradstream::testing {
namespace {

constexpr int kWorkers = 3;
constexpr int kSteps = 5;

struct ChunkDef {
  uint64_t id;
  uint32_t offset;
  uint32_t num_elems;
  int shard;
};
// Chunks 0 and 2 live on shard 0, chunk 1 on shard 1.
const std::vector<ChunkDef> kChunks = {{0, 0, 1024, 0}, {1, 1024, 1024, 1}, {2, 2048, 452, 0}};
constexpr uint32_t kDim = 2500;

std::vector<float> InitialParams() {
  std::vector<float> p(kDim);
  for (uint32_t i = 0; i < kDim; ++i) p[i] = std::cos(0.003f * static_cast<float>(i));
  return p;
}

// Gradient of 0.5 * |p - target_w|^2 plus a worker-specific wiggle.
std::vector<float> Grad(int w, const std::vector<float>& p) {
  std::vector<float> g(kDim);
  for (uint32_t i = 0; i < kDim; ++i) {
    const float fi = static_cast<float>(i);
    const float target = std::sin(0.013f * fi * static_cast<float>(w + 1)) + 0.1f * w;
    g[i] = p[i] - target + 0.05f * std::cos(0.7f * fi + static_cast<float>(w));
  }
  return g;
}

struct Config {
  std::string codec;      // none | twobit | ternary
  std::string optimizer;  // sgd | adagrad
  float lr;
};

void PrintTo(const Config& c, std::ostream* os) { *os << c.codec << "/" << c.optimizer; }

std::string Name(const ::testing::TestParamInfo<Config>& info) {
  return info.param.codec + "_" + info.param.optimizer;
}

// One encoder per (worker, chunk): twobit with error feedback (as workers
// run it), ternary without, none raw.
class Encoders {
 public:
  explicit Encoders(const std::string& codec) : codec_(codec) {
    for (int w = 0; w < kWorkers; ++w) {
      for (const ChunkDef& c : kChunks) {
        if (codec == "none") continue;
        auto enc = MakeChunkEncoder(codec, CodecOptions{}, codec == "twobit", c.num_elems);
        EXPECT_TRUE(enc.ok()) << enc.status();
        enc_[{w, c.id}] = std::move(*enc);
      }
    }
  }

  pb::EncodedChunk Encode(int w, const ChunkDef& c, uint64_t clock, const std::vector<float>& g) {
    std::vector<float> part(g.begin() + c.offset, g.begin() + c.offset + c.num_elems);
    if (codec_ == "none") return RawChunk(part);
    EncodeKey key;
    key.seed = 1;
    key.worker = static_cast<uint32_t>(w);
    key.clock = static_cast<uint32_t>(clock);
    key.tensor = 0;
    key.chunk = static_cast<uint32_t>(c.id);
    ChunkHeader h;
    std::string payload;
    absl::Status s = enc_[{w, c.id}]->Encode(part, key, &h, &payload);
    EXPECT_TRUE(s.ok()) << s;
    pb::EncodedChunk out;
    ChunkToWire(h, std::move(payload), &out);
    return out;
  }

 private:
  std::string codec_;
  std::map<std::pair<int, uint64_t>, std::unique_ptr<Codec>> enc_;
};

// The single-process reference: the same encodes, decoded with DecodeAdd,
// averaged, and the optimizer written out by hand.
std::vector<float> Reference(const Config& cfg) {
  Encoders enc(cfg.codec);
  std::vector<float> p = InitialParams();
  std::vector<float> accum(kDim, 0.1f);  // AdaGrad initial accumulator
  const float eps = 1e-7f;
  for (int clock = 0; clock < kSteps; ++clock) {
    std::vector<float> sum(kDim, 0.0f);
    for (int w = 0; w < kWorkers; ++w) {
      const std::vector<float> g = Grad(w, p);
      for (const ChunkDef& c : kChunks) {
        pb::EncodedChunk e = enc.Encode(w, c, clock, g);
        absl::StatusOr<ChunkHeader> h = ChunkHeaderFromWire(e);
        EXPECT_TRUE(h.ok()) << h.status();
        EXPECT_TRUE(
            DecodeAdd(*h, e.payload(), absl::MakeSpan(sum.data() + c.offset, c.num_elems), 1.0f)
                .ok());
      }
    }
    for (uint32_t i = 0; i < kDim; ++i) {
      const float g = (1.0f / kWorkers) * sum[i];
      if (cfg.optimizer == "sgd") {
        p[i] -= cfg.lr * g;
      } else {
        accum[i] += g * g;
        p[i] -= cfg.lr * g / (std::sqrt(accum[i]) + eps);
      }
    }
  }
  return p;
}

class ShardSyncTest : public ::testing::TestWithParam<Config> {
 protected:
  static void SetUpTestSuite() {
    for (int s = 0; s < 2; ++s) {
      auto proc = ShardProcess::Start({absl::StrCat("--shard_index=", s)});
      ASSERT_TRUE(proc.ok()) << proc.status();
      shards_[s] = std::move(*proc);
    }
  }
  static void TearDownTestSuite() {
    for (auto& s : shards_) s.reset();
  }

  static std::unique_ptr<ShardProcess> shards_[2];
};
std::unique_ptr<ShardProcess> ShardSyncTest::shards_[2];

TEST_P(ShardSyncTest, MatchesSingleProcessReference) {
  const Config cfg = GetParam();
  const std::string job = absl::StrCat("sync-", cfg.codec, "-", cfg.optimizer);
  for (int s = 0; s < 2; ++s) {
    pb::CreateJobRequest req;
    req.set_job_id(job);
    req.set_shard_index(s);
    req.mutable_optimizer()->set_type(cfg.optimizer);
    req.mutable_optimizer()->set_learning_rate(cfg.lr);
    req.mutable_consistency()->set_mode(pb::SYNC);
    for (const ChunkDef& c : kChunks) {
      if (c.shard != s) continue;
      pb::ChunkInfo* ci = req.add_chunks();
      ci->set_chunk_id(c.id);
      ci->set_offset(c.offset);
      ci->set_num_elems(c.num_elems);
      ci->set_shard(s);
    }
    req.mutable_membership()->set_epoch(1);
    for (int w = 0; w < kWorkers; ++w) req.mutable_membership()->add_worker_ids(w);
    pb::CreateJobResponse resp;
    auto stub = shards_[s]->Stub();
    ASSERT_TRUE(Call(stub.get(), &pb::ParameterServer::Stub::CreateJob, req, &resp).ok());
    EXPECT_FALSE(resp.restored());
  }

  absl::Mutex errors_mu;
  std::vector<std::string> errors;
  auto fail = [&](std::string e) {
    absl::MutexLock l(&errors_mu);
    errors.push_back(std::move(e));
  };
  // Each worker encodes with its own encoders, like a real worker process.
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      Encoders enc(cfg.codec);
      std::unique_ptr<SessionClient> sess[2];
      for (int s = 0; s < 2; ++s) {
        sess[s] = std::make_unique<SessionClient>(shards_[s]->Connect());
        auto ack = sess[s]->Hello(job, w);
        if (!ack.ok()) return fail(absl::StrCat("hello: ", ack.status().ToString()));
      }
      uint64_t seq = 0;
      if (w == 0) {  // rank 0 initializes every chunk
        const std::vector<float> p0 = InitialParams();
        for (const ChunkDef& c : kChunks) {
          std::vector<float> part(p0.begin() + c.offset, p0.begin() + c.offset + c.num_elems);
          auto ack = sess[c.shard]->Init(++seq, c.id, part);
          if (!ack.ok() || ack->code() != 0) return fail("init failed");
        }
      }
      for (int clock = 0; clock < kSteps; ++clock) {
        std::vector<float> p(kDim);
        for (int s = 0; s < 2; ++s) {
          auto chunks = sess[s]->Pull(clock + 1000 * s, clock);
          if (!chunks.ok()) return fail(chunks.status().ToString());
          for (const PulledChunkView& pc : *chunks) {
            if (pc.code() != 0) return fail(absl::StrCat("pull: ", pc.message()));
            if (pc.version() != static_cast<uint64_t>(clock)) return fail("wrong version");
            const ChunkDef& c = kChunks[pc.chunk_id()];
            const std::vector<float> v = BytesFloats(pc.values());
            std::copy(v.begin(), v.end(), p.begin() + c.offset);
          }
        }
        const std::vector<float> g = Grad(w, p);
        for (const ChunkDef& c : kChunks) {
          auto ack = sess[c.shard]->Push(++seq, c.id, clock, enc.Encode(w, c, clock, g));
          if (!ack.ok()) return fail(ack.status().ToString());
          if (ack->code() != 0 || ack->duplicate()) return fail("push: " + ack->message());
        }
        for (int s = 0; s < 2; ++s) sess[s]->Clock(clock + 1);
      }
      for (int s = 0; s < 2; ++s) {
        grpc::Status st = sess[s]->Finish();
        if (!st.ok()) fail("finish: " + st.error_message());
      }
    });
  }
  for (auto& t : workers) t.join();
  for (const auto& e : errors) ADD_FAILURE() << e;
  ASSERT_TRUE(errors.empty());

  const std::vector<float> ref = Reference(cfg);
  for (int s = 0; s < 2; ++s) {
    SessionClient reader(shards_[s]->Connect());
    ASSERT_TRUE(reader.Hello(job, 0).ok());
    auto chunks = reader.Pull(1, kSteps);
    ASSERT_TRUE(chunks.ok()) << chunks.status();
    for (const PulledChunkView& pc : *chunks) {
      ASSERT_EQ(pc.code(), 0) << pc.message();
      EXPECT_EQ(pc.version(), static_cast<uint64_t>(kSteps));
      const ChunkDef& c = kChunks[pc.chunk_id()];
      const std::vector<float> v = BytesFloats(pc.values());
      ASSERT_EQ(v.size(), c.num_elems);
      int bad = 0;
      for (uint32_t i = 0; i < c.num_elems; ++i) {
        const float want = ref[c.offset + i];
        if (std::abs(v[i] - want) > 1e-5f * std::abs(want) + 1e-6f && ++bad <= 5) {
          ADD_FAILURE() << "chunk " << c.id << " elem " << i << ": shard " << v[i] << " ref "
                        << want;
        }
      }
      EXPECT_EQ(bad, 0);
    }
    // Every round had exactly the three workers.
    pb::StatsRequest sreq;
    sreq.set_job_id(job);
    sreq.set_include_rounds(true);
    pb::StatsResponse stats;
    auto stub = shards_[s]->Stub();
    ASSERT_TRUE(Call(stub.get(), &pb::ParameterServer::Stub::GetStats, sreq, &stats).ok());
    const int chunks_here = s == 0 ? 2 : 1;
    EXPECT_EQ(stats.rounds_size(), kSteps * chunks_here);
    for (const auto& r : stats.rounds()) EXPECT_EQ(r.contributors_size(), kWorkers);
    EXPECT_EQ(stats.pushes_applied(), static_cast<uint64_t>(kSteps * kWorkers * chunks_here));
    if (cfg.codec != "none") {
      EXPECT_LT(stats.bytes_in() * 8, stats.fp32_bytes_in());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, ShardSyncTest,
    ::testing::Values(Config{"none", "sgd", 0.1f}, Config{"none", "adagrad", 0.05f},
                      Config{"twobit", "sgd", 0.1f}, Config{"twobit", "adagrad", 0.05f},
                      Config{"ternary", "sgd", 0.1f}, Config{"ternary", "adagrad", 0.05f},
                      Config{"ternary512", "sgd", 0.1f}),
    Name);

}  // namespace
}  // namespace gradstream::testing
