// Loopback tests of the client against the real shard binary (gs_shard),
// started as child processes on port 0. Synchronization is by the protocol
// (acks, pull answers) or by polling a condition with a deadline, never by
// sleeping.
#include "worker/client/ps_client.h"

#include <sched.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "common/env/testing/fake_clock_env.h"
#include "common/job/row_partition.h"
#include "gtest/gtest.h"
#include "worker/client/internal/tensor_encoder.h"
#include "worker/client/step_loop.h"
#include "worker/client/testing/shard_process.h"
#include "worker/client/testing/tcp_proxy.h"

#ifndef GS_SHARD_BINARY
#error "GS_SHARD_BINARY must name the gs_shard binary"
#endif

namespace gradstream::client {
namespace {

using testing::ShardProcess;

constexpr absl::Duration kWait = absl::Seconds(20);

std::vector<float> Random(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

class PsClientTest : public ::testing::Test {
 protected:
  // Starts `n` shards; extra args go to every one.
  void StartShards(int n, std::vector<std::string> args = {}) {
    for (int i = 0; i < n; ++i) {
      args.push_back("--executor_threads=2");
      auto p = ShardProcess::Start(GS_SHARD_BINARY, args);
      ASSERT_TRUE(p.ok()) << p.status();
      shards_.push_back(*std::move(p));
    }
  }
  std::vector<std::string> Addresses() const {
    std::vector<std::string> a;
    for (auto& s : shards_) a.push_back(s->address());
    return a;
  }
  // A job of workers 1 and 2 on `map` with `setup`'s optimizer and mode,
  // both connected (c1_, c2_) and the parameters initialized by worker 1 to
  // *init.
  void StartTwoWorkers(const ShardMap& map, testing::JobSetup setup,
                       std::vector<std::vector<float>>* init) {
    setup.workers = {1, 2};
    ASSERT_TRUE(testing::CreateJob(map, setup, kWait).ok());
    auto c1 = PsClient::Connect(map, Options(1));
    auto c2 = PsClient::Connect(map, Options(2));
    ASSERT_TRUE(c1.ok() && c2.ok());
    c1_ = *std::move(c1);
    c2_ = *std::move(c2);
    *init = InitValues(map);
    ASSERT_TRUE(c1_->InitParams(Spans(*init), kWait).ok());
  }
  // `shards` shards and one worker in a sync SGD job on Map(codec), the
  // parameters initialized to *init.
  std::unique_ptr<PsClient> OneWorker(float lr, std::vector<std::vector<float>>* init,
                                      const std::string& codec = "none", int shards = 1) {
    StartShards(shards);
    const ShardMap map = Map(codec);
    EXPECT_TRUE(testing::CreateJob(map, Sgd(lr), kWait).ok());
    auto client = PsClient::Connect(map, Options());
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return nullptr;
    *init = InitValues(map);
    EXPECT_TRUE((*client)->InitParams(Spans(*init), kWait).ok());
    return *std::move(client);
  }
  ShardMap Map(const std::string& codec, std::vector<std::string> addresses = {}) {
    if (addresses.empty()) addresses = Addresses();
    CodecPolicy policy;
    policy.default_codec = codec;
    auto map = SplitModel({{"w", 100000}, {"b", 10}}, addresses, 16384, policy);
    EXPECT_TRUE(map.ok()) << map.status();
    return *map;
  }
  testing::JobSetup Sgd(float lr) {
    testing::JobSetup setup;
    setup.optimizer.set_type("sgd");
    setup.optimizer.set_learning_rate(lr);
    setup.consistency.set_mode(v1::SYNC);
    setup.workers = {1};
    setup.epoch = 1;
    return setup;
  }
  ClientOptions Options(uint64_t worker = 1) {
    ClientOptions o;
    o.job_id = "job";
    o.worker_id = worker;
    o.incarnation = 1;
    o.epoch = 1;
    o.seed = 42;
    o.rpc_deadline = absl::Seconds(5);
    o.connect_deadline = absl::Seconds(10);
    o.reconnect.initial_backoff = absl::Milliseconds(10);
    o.reconnect.max_backoff = absl::Milliseconds(200);
    return o;
  }
  // Init values of every tensor of `map`.
  std::vector<std::vector<float>> InitValues(const ShardMap& map) {
    std::vector<std::vector<float>> v;
    for (const TensorInfo& t : map.tensors) v.push_back(Random(t.num_elems, 100 + t.index));
    return v;
  }
  static std::vector<absl::Span<const float>> Spans(const std::vector<std::vector<float>>& v) {
    return {v.begin(), v.end()};
  }
  static std::vector<absl::Span<float>> MutableSpans(std::vector<std::vector<float>>& v) {
    std::vector<absl::Span<float>> s;
    for (auto& x : v) s.push_back(absl::MakeSpan(x));
    return s;
  }
  // What the shard should hold after one sgd step on `grads` pushed at
  // `clock` by `worker`: init - lr * decoded, decoded by the codec library.
  std::vector<std::vector<float>> Expected(const ShardMap& map, const ClientOptions& o,
                                           const std::vector<std::vector<float>>& init,
                                           const std::vector<std::vector<float>>& grads,
                                           uint64_t clock, float lr) {
    std::vector<std::vector<float>> out = init;
    for (const TensorInfo& t : map.tensors) {
      auto enc = internal::TensorEncoder::Create(map, t.index, t.codec, o.codec);
      EXPECT_TRUE(enc.ok());
      std::vector<float> decoded(t.num_elems, 0.0f);
      for (size_t i = 0; i < (*enc)->num_chunks(); ++i) {
        const ChunkInfo& c = (*enc)->chunk(i);
        ChunkHeader h;
        std::string payload;
        EXPECT_TRUE(
            (*enc)->EncodeChunk(i, grads[t.index], o.seed, o.worker_id, clock, &h, &payload).ok());
        EXPECT_TRUE(
            DecodeAdd(h, payload, absl::MakeSpan(decoded.data() + c.offset, c.num_elems), 1.0f)
                .ok());
      }
      for (size_t i = 0; i < t.num_elems; ++i) out[t.index][i] -= lr * decoded[i];
    }
    return out;
  }
  static void ExpectNear(const std::vector<std::vector<float>>& got,
                         const std::vector<std::vector<float>>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t t = 0; t < got.size(); ++t) {
      ASSERT_EQ(got[t].size(), want[t].size());
      size_t bad = 0;
      for (size_t i = 0; i < got[t].size(); ++i) {
        if (std::fabs(got[t][i] - want[t][i]) > 1e-5f * std::max(1.0f, std::fabs(want[t][i]))) {
          if (++bad < 5) ADD_FAILURE() << "tensor " << t << "[" << i << "] = " << got[t][i]
                                       << ", want " << want[t][i];
        }
      }
      EXPECT_EQ(bad, 0u) << "tensor " << t;
    }
  }

  // One sync step: init, push every tensor at clock 0, advance, pull at 1.
  void RoundTrip(const std::string& codec, int num_shards, int encode_threads = 0) {
    StartShards(num_shards);
    ShardMap map = Map(codec);
    ASSERT_TRUE(testing::CreateJob(map, Sgd(0.5f), kWait).ok());
    ClientOptions o = Options();
    o.encode_threads = encode_threads;
    auto client = PsClient::Connect(map, o);
    ASSERT_TRUE(client.ok()) << client.status();
    auto init = InitValues(map);
    ASSERT_TRUE((*client)->InitParams(Spans(init), kWait).ok());
    std::vector<std::vector<float>> grads;
    std::vector<PushHandle> pushes;
    for (const TensorInfo& t : map.tensors) {
      grads.push_back(Random(t.num_elems, 7 + t.index, 0.7f));
      pushes.push_back((*client)->Push(t.index, grads.back(), 0));
    }
    for (auto& h : pushes) ASSERT_TRUE(PsClient::Wait(h, kWait).ok());
    ASSERT_TRUE((*client)->AdvanceClock(1).ok());
    std::vector<std::vector<float>> got = {std::vector<float>(100000), std::vector<float>(10)};
    ASSERT_TRUE(PsClient::Wait((*client)->Pull(1, MutableSpans(got)), kWait).ok());
    ExpectNear(got, Expected(map, o, init, grads, 0, 0.5f));

    ClientStats st = (*client)->stats();
    EXPECT_EQ(st.fp32_bytes_pushed, 100010u * 4);
    if (codec == "none") {
      EXPECT_EQ(st.bytes_pushed, st.fp32_bytes_pushed);
    }
    if (codec == "twobit" || codec == "ternary") {
      EXPECT_EQ(st.bytes_pushed, (100000 / 16384) * 4096 + (100000 % 16384 + 3) / 4 + 3u);
    }
    if (codec == "ternary512") {  // + a 4-byte scale per 512 elements of each chunk
      EXPECT_EQ(st.bytes_pushed, (100000 / 16384) * (4096 + 4 * 32) + (100000 % 16384 + 3) / 4 +
                                     4 * ((100000 % 16384 + 511) / 512) + 4 + 3u);
    }
    EXPECT_EQ(st.chunks_acked, st.chunks_pushed + map.chunks.size());  // + the inits
    EXPECT_EQ(st.bytes_pulled, 100010u * 4);
    if (codec == "twobit") {
      EXPECT_GT((*client)->ResidualNorm(), 0.0);
    }
    EXPECT_TRUE((*client)->Leave(kWait).ok());
  }

  std::vector<std::unique_ptr<ShardProcess>> shards_;
  // Clients of StartTwoWorkers; destroyed before the shards.
  std::unique_ptr<PsClient> c1_, c2_;
};

TEST_F(PsClientTest, RoundTripNoneTwoShards) { RoundTrip("none", 2); }
TEST_F(PsClientTest, RoundTripTwoBitTwoShards) { RoundTrip("twobit", 2); }
TEST_F(PsClientTest, RoundTripTernaryOneShard) { RoundTrip("ternary", 1); }
TEST_F(PsClientTest, RoundTripTernary512TwoShards) { RoundTrip("ternary512", 2); }
TEST_F(PsClientTest, RoundTripTwoBitWithEncodePool) {
  RoundTrip("twobit", 2, /*encode_threads=*/3);
}

// A caller that encodes itself (the GPU worker) with the tensor's codec, key
// and residuals gets exactly what Push would have applied.
TEST_F(PsClientTest, PushEncodedAppliesWhatPushWould) {
  std::vector<std::vector<float>> init;
  auto client = OneWorker(0.5f, &init, "twobit", /*shards=*/2);
  ASSERT_NE(client, nullptr);
  const ShardMap& map = client->shard_map();
  const ClientOptions o = Options();
  std::vector<std::vector<float>> grads;
  std::vector<PushHandle> pushes;
  for (const TensorInfo& t : map.tensors) {
    grads.push_back(Random(t.num_elems, 7 + t.index, 0.7f));
    auto enc = internal::TensorEncoder::Create(map, t.index, t.codec, o.codec);
    ASSERT_TRUE(enc.ok());
    std::vector<ChunkHeader> headers((*enc)->num_chunks());
    std::vector<std::string> payloads((*enc)->num_chunks());
    std::vector<EncodedChunkView> views;
    for (size_t i = 0; i < (*enc)->num_chunks(); ++i) {
      ASSERT_TRUE((*enc)->EncodeChunk(i, grads.back(), o.seed, o.worker_id, 0, &headers[i],
                                      &payloads[i]).ok());
      views.push_back({headers[i], payloads[i]});
    }
    pushes.push_back(client->PushEncoded(t.index, views, 0));
  }
  for (auto& h : pushes) ASSERT_TRUE(PsClient::Wait(h, kWait).ok());
  ASSERT_TRUE(client->AdvanceClock(1).ok());
  std::vector<std::vector<float>> got = {std::vector<float>(100000), std::vector<float>(10)};
  ASSERT_TRUE(PsClient::Wait(client->Pull(1, MutableSpans(got)), kWait).ok());
  ExpectNear(got, Expected(map, o, init, grads, 0, 0.5f));
  EXPECT_EQ(client->stats().fp32_bytes_pushed, 100010u * 4);

  // Malformed calls fail in the handle and send nothing.
  const std::string short_payload(2, '\0');  // 10 twobit elements need 3
  const EncodedChunkView bad{{CodecType::kTwoBit, 10, 0.5f, 0.0f}, short_payload};
  const uint64_t before = client->stats().chunks_pushed;
  EXPECT_EQ(PsClient::Wait(client->PushEncoded(1, {bad}, 1), kWait).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PsClient::Wait(client->PushEncoded(0, {bad}, 1), kWait).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PsClient::Wait(client->PushEncoded(9, {}, 1), kWait).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->stats().chunks_pushed, before);
  EXPECT_TRUE(client->Leave(kWait).ok());
}

// A GPU worker's ternary encoder has one scale per chunk: where the map says
// ternary512 it pushes ternary, which PushEncoded takes, and nothing else.
TEST_F(PsClientTest, PushEncodedTakesTernaryWhereTheMapSaysTernary512) {
  std::vector<std::vector<float>> init;
  auto client = OneWorker(0.5f, &init, "ternary512");
  ASSERT_NE(client, nullptr);
  const ShardMap& map = client->shard_map();
  const ClientOptions o = Options();
  auto encoded = [&](const TensorInfo& t, const std::string& codec,
                     std::vector<ChunkHeader>* headers, std::vector<std::string>* payloads) {
    auto enc = internal::TensorEncoder::Create(map, t.index, codec, o.codec);
    EXPECT_TRUE(enc.ok()) << enc.status();
    const std::vector<float> g = Random(t.num_elems, 7 + t.index, 0.7f);
    headers->resize((*enc)->num_chunks());
    payloads->resize((*enc)->num_chunks());
    std::vector<EncodedChunkView> views;
    for (size_t i = 0; i < (*enc)->num_chunks(); ++i) {
      EXPECT_TRUE(
          (*enc)->EncodeChunk(i, g, o.seed, o.worker_id, 0, &(*headers)[i], &(*payloads)[i]).ok());
      views.push_back({(*headers)[i], (*payloads)[i]});
    }
    return views;
  };
  std::vector<ChunkHeader> h0, h1;
  std::vector<std::string> p0, p1;
  const auto twobit = encoded(map.tensors[0], "twobit", &h0, &p0);
  EXPECT_EQ(PsClient::Wait(client->PushEncoded(0, twobit, 0), kWait).code(),
            absl::StatusCode::kInvalidArgument);
  for (const TensorInfo& t : map.tensors) {
    const auto ternary = encoded(t, "ternary", &h1, &p1);
    EXPECT_EQ(ternary[0].header.codec, CodecType::kTernary);
    EXPECT_TRUE(PsClient::Wait(client->PushEncoded(t.index, ternary, 0), kWait).ok());
  }
  EXPECT_TRUE(client->Leave(kWait).ok());
}

// [link choice]: with link_choice on, the probe (default LinkChoicePolicy:
// from clock 20, windows of 6 clocks, codecs first) pushes compressed until
// clock 25 and exact at 26 and 27 (the exact window's switch and first
// measured clock; the window may end there if exact is far slower); after
// clock 43 the probe is over and its winner holds.
TEST_F(PsClientTest, TheLinkChoiceProbesWithExactPushes) {
  StartShards(1);
  ShardMap map = Map("twobit");
  ASSERT_TRUE(testing::CreateJob(map, Sgd(0.01f), kWait).ok());
  ClientOptions o = Options();
  o.codec.link_choice = true;
  o.codec.precision_bound = -1;  // no guard flushes: every exact push is the link's
  auto client = PsClient::Connect(map, o);
  ASSERT_TRUE(client.ok()) << client.status();
  auto init = InitValues(map);
  ASSERT_TRUE((*client)->InitParams(Spans(init), kWait).ok());
  std::vector<std::vector<float>> got = {std::vector<float>(100000), std::vector<float>(10)};
  int held = -1;  // after the probe: 1 exact, 0 compressed
  uint64_t exact_clocks = 0;
  for (uint64_t clock = 0; clock < 50; ++clock) {
    const ClientStats before = (*client)->stats();
    // The probe decides as clock 43 ends, or as 27 or 39 ends when an exact
    // window aborts it (a loaded host): nothing to report before.
    if (clock <= 27) {
      EXPECT_FALSE(before.push_link.has_value()) << "clock " << clock;
    }
    if (clock > 43) {
      EXPECT_TRUE(before.push_link.has_value()) << "clock " << clock;
    }
    std::vector<PushHandle> pushes;
    for (const TensorInfo& t : map.tensors) {
      pushes.push_back((*client)->Push(t.index, Random(t.num_elems, clock + t.index, 0.7f), clock));
    }
    for (auto& h : pushes) ASSERT_TRUE(PsClient::Wait(h, kWait).ok());
    const ClientStats after = (*client)->stats();
    const bool exact = after.bytes_pushed - before.bytes_pushed ==
                       after.fp32_bytes_pushed - before.fp32_bytes_pushed;
    exact_clocks += exact;
    if (clock < 26) {
      EXPECT_FALSE(exact) << "clock " << clock;
    } else if (clock < 28) {
      EXPECT_TRUE(exact) << "clock " << clock;
    } else if (clock >= 44) {
      if (held < 0) held = exact;
      EXPECT_EQ(exact, held == 1) << "clock " << clock;
    }
    ASSERT_TRUE((*client)->AdvanceClock(clock + 1).ok());
    ASSERT_TRUE(PsClient::Wait((*client)->Pull(clock + 1, MutableSpans(got)), kWait).ok());
  }
  const ClientStats stats = (*client)->stats();
  EXPECT_EQ(stats.link_exact_pushes, exact_clocks * 2);
  // What the heartbeat reports (gradstream status): the held winner.
  ASSERT_TRUE(stats.push_link.has_value());
  const uint64_t decided = stats.push_link->clock;
  EXPECT_TRUE(decided == 43 || ((decided == 27 || decided == 39) && held == 0)) << decided;
  EXPECT_EQ(stats.push_link->exact, held == 1);
  EXPECT_GT(stats.push_link->codec_seconds, 0);
  EXPECT_TRUE((*client)->Leave(kWait).ok());
}

TEST_F(PsClientTest, UnknownJobSurfacesTheShardsNotFound) {
  StartShards(1);
  ClientOptions o = Options();
  o.job_id = "no-such-job";
  const absl::Time start = absl::Now();
  auto client = PsClient::Connect(Map("none"), o);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kNotFound) << client.status();
  EXPECT_NE(client.status().message().find("unknown job"), absl::string_view::npos);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // refused, not timed out
}

TEST_F(PsClientTest, StaleIncarnationIsRefused) {
  StartShards(1);
  ShardMap map = Map("none");
  ASSERT_TRUE(testing::CreateJob(map, Sgd(0.1f), kWait).ok());
  ClientOptions newer = Options();
  newer.incarnation = 2;
  auto a = PsClient::Connect(map, newer);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = PsClient::Connect(map, Options());  // incarnation 1
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition) << b.status();
  EXPECT_NE(b.status().message().find("incarnation"), absl::string_view::npos);
}

TEST_F(PsClientTest, MapThatDisagreesWithTheShardIsRefused) {
  StartShards(1);
  ShardMap map = Map("none");
  ASSERT_TRUE(testing::CreateJob(map, Sgd(0.1f), kWait).ok());
  auto other = SplitModel({{"w", 100000}, {"b", 10}}, Addresses(), 8192);
  ASSERT_TRUE(other.ok());
  auto client = PsClient::Connect(*other, Options());
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kFailedPrecondition) << client.status();
}

TEST_F(PsClientTest, PushRejectedByTheShardCarriesItsStatus) {
  StartShards(1);
  ShardMap map = Map("none");
  ASSERT_TRUE(testing::CreateJob(map, Sgd(0.1f), kWait).ok());
  auto client = PsClient::Connect(map, Options());
  ASSERT_TRUE(client.ok());
  // A NaN gradient is refused before it leaves (codec), a wrong size at once.
  std::vector<float> nan(10, std::nanf(""));
  EXPECT_EQ(PsClient::Wait((*client)->Push(1, nan, 0), kWait).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> wrong(11);
  EXPECT_EQ(PsClient::Wait((*client)->Push(1, wrong, 0), kWait).code(),
            absl::StatusCode::kInvalidArgument);
}

// A wait on a pull has a deadline, and a wait that runs out leaves the pull
// going: it is answered once, into its buffers, when the shard may answer
// it (see [step loop]). A pull whose handle is dropped writes nothing, and
// the answers the shard still sends it count as discarded bytes.
TEST_F(PsClientTest, AWaitThatTimesOutLeavesThePullGoing) {
  std::vector<std::vector<float>> init;
  std::unique_ptr<PsClient> client = OneWorker(0.1f, &init);
  ASSERT_NE(client, nullptr);
  PsClient& c = *client;
  const ShardMap& map = c.shard_map();
  // Sync mode, one worker: version 3 comes once clocks 0..2 are pushed.
  std::vector<std::vector<float>> got = {std::vector<float>(100000, -1.0f),
                                         std::vector<float>(10, -1.0f)};
  std::vector<std::vector<float>> dropped = got;
  PullHandle pull = c.Pull(3, MutableSpans(got));
  {
    // Given up after it went out (one that is still queued is not sent).
    PullHandle gone = c.Pull(3, MutableSpans(dropped));
    EXPECT_EQ(PsClient::Wait(gone, absl::Milliseconds(300)).code(),
              absl::StatusCode::kDeadlineExceeded);
  }
  const absl::Time start = absl::Now();
  EXPECT_EQ(PsClient::Wait(pull, absl::Milliseconds(300)).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(got[1][0], -1.0f);
  EXPECT_FALSE(PsClient::Progress(pull).settled);
  for (uint64_t clock = 0; clock < 3; ++clock) {
    for (const TensorInfo& t : map.tensors) {
      ASSERT_TRUE(PsClient::Wait(c.Push(t.index, std::vector<float>(t.num_elems, 1.0f), clock),
                                 kWait).ok());
    }
    ASSERT_TRUE(c.AdvanceClock(clock + 1).ok());
  }
  ASSERT_TRUE(PsClient::Wait(pull, kWait).ok());
  EXPECT_FLOAT_EQ(got[1][0], init[1][0] - 3 * 0.1f);
  // Asked once, answered once: every chunk of the model once into `got`, and
  // once more for the dropped pull, whose buffers stay untouched.
  const uint64_t model_bytes = (100000 + 10) * sizeof(float);
  const absl::Time give_up = absl::Now() + kWait;
  while (c.stats().bytes_pulled < 2 * model_bytes && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(c.stats().bytes_pulled, 2 * model_bytes);
  EXPECT_EQ(c.stats().bytes_pulled_discarded, model_bytes);
  EXPECT_EQ(dropped[1][0], -1.0f);
  EXPECT_EQ(dropped[0][99999], -1.0f);
}

TEST_F(PsClientTest, WaitOnADeadShardTimesOut) {
  StartShards(1);
  ShardMap map = Map("none");
  ASSERT_TRUE(testing::CreateJob(map, Sgd(0.1f), kWait).ok());
  auto client = PsClient::Connect(map, Options());
  ASSERT_TRUE(client.ok());
  shards_[0]->Kill();
  std::vector<float> g(10, 1.0f);
  const absl::Time start = absl::Now();
  EXPECT_EQ(PsClient::Wait((*client)->Push(1, g, 0), absl::Milliseconds(300)).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_FALSE((*client)->Leave(absl::Milliseconds(300)).ok());
}

// The shard is killed after a checkpoint; a push made while it is down waits
// in the journal, is replayed when the restarted shard has the job again, and
// is applied exactly once.
TEST_F(PsClientTest, ReconnectsAfterShardRestartAndReplays) {
  const std::string dir = ::testing::TempDir() + "/gs_client_ckpt_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  StartShards(1, {"--checkpoint_dir=" + dir});
  ShardMap map = Map("none");
  ASSERT_TRUE(testing::CreateJob(map, Sgd(0.5f), kWait).ok());
  ClientOptions o = Options();
  auto client = PsClient::Connect(map, o);
  ASSERT_TRUE(client.ok()) << client.status();
  auto init = InitValues(map);
  ASSERT_TRUE((*client)->InitParams(Spans(init), kWait).ok());
  ASSERT_TRUE(testing::Checkpoint(map.shards[0], "job", kWait).ok());

  shards_[0]->Kill();
  std::vector<std::vector<float>> grads = {Random(100000, 3), Random(10, 4)};
  PushHandle w = (*client)->Push(0, grads[0], 0);
  PushHandle b = (*client)->Push(1, grads[1], 0);
  EXPECT_EQ(PsClient::Wait(w, absl::Milliseconds(100)).code(), absl::StatusCode::kDeadlineExceeded);

  ASSERT_TRUE(shards_[0]->Restart().ok());
  auto created = testing::CreateJob(map, Sgd(0.5f), kWait);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE((*created)[0].restored());
  ASSERT_TRUE(PsClient::Wait(w, kWait).ok());
  ASSERT_TRUE(PsClient::Wait(b, kWait).ok());
  ASSERT_TRUE((*client)->AdvanceClock(1).ok());
  std::vector<std::vector<float>> got = {std::vector<float>(100000), std::vector<float>(10)};
  ASSERT_TRUE(PsClient::Wait((*client)->Pull(1, MutableSpans(got)), kWait).ok());
  ExpectNear(got, Expected(map, o, init, grads, 0, 0.5f));
  ClientStats st = (*client)->stats();
  EXPECT_GE(st.reconnects, 1u);
  EXPECT_GE(st.replayed, 2u);
  auto stats = testing::GetStats(map.shards[0], "job", kWait);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->pushes_applied(), map.chunks.size());
  std::filesystem::remove_all(dir);
}

// The shard applies a push but its ack is lost and the connection breaks: the
// client replays, the shard reports a duplicate, and the push counts once.
TEST_F(PsClientTest, LostAckIsReplayedAndAppliedOnce) {
  StartShards(1);
  auto proxy = testing::TcpProxy::Start(shards_[0]->port());
  ASSERT_TRUE(proxy.ok());
  ShardMap map = Map("twobit", {(*proxy)->address()});
  ASSERT_TRUE(testing::CreateJob(map, Sgd(0.5f), kWait).ok());
  ClientOptions o = Options();
  auto client = PsClient::Connect(map, o);
  ASSERT_TRUE(client.ok()) << client.status();
  auto init = InitValues(map);
  ASSERT_TRUE((*client)->InitParams(Spans(init), kWait).ok());

  (*proxy)->set_drop_downstream(true);
  std::vector<std::vector<float>> grads = {Random(100000, 5), Random(10, 6)};
  PushHandle w = (*client)->Push(0, grads[0], 0);
  PushHandle b = (*client)->Push(1, grads[1], 0);
  // Poll the shard directly until it applied everything.
  const absl::Time end = absl::Now() + kWait;
  uint64_t applied = 0;
  while (absl::Now() < end) {
    auto stats = testing::GetStats(shards_[0]->address(), "job", kWait);
    ASSERT_TRUE(stats.ok());
    applied = stats->pushes_applied();
    if (applied == map.chunks.size()) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(applied, map.chunks.size());
  EXPECT_FALSE(PsClient::Wait(w, absl::ZeroDuration()).ok());  // acks were lost

  (*proxy)->set_drop_downstream(false);
  (*proxy)->SeverAll();
  ASSERT_TRUE(PsClient::Wait(w, kWait).ok());
  ASSERT_TRUE(PsClient::Wait(b, kWait).ok());
  ClientStats st = (*client)->stats();
  EXPECT_EQ(st.duplicate_acks, map.chunks.size());
  EXPECT_GE((*proxy)->connections_accepted(), 2);

  ASSERT_TRUE((*client)->AdvanceClock(1).ok());
  std::vector<std::vector<float>> got = {std::vector<float>(100000), std::vector<float>(10)};
  ASSERT_TRUE(PsClient::Wait((*client)->Pull(1, MutableSpans(got)), kWait).ok());
  ExpectNear(got, Expected(map, o, init, grads, 0, 0.5f));
  auto stats = testing::GetStats(shards_[0]->address(), "job", kWait);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->pushes_applied(), map.chunks.size());
  EXPECT_EQ(stats->pushes_duplicate(), map.chunks.size());
}

TEST_F(PsClientTest, TwoWorkersSyncAverage) {
  StartShards(2);
  ShardMap map = Map("none");
  std::vector<std::vector<float>> init;
  ASSERT_NO_FATAL_FAILURE(StartTwoWorkers(map, Sgd(1.0f), &init));
  std::vector<std::vector<float>> g1 = {Random(100000, 11), Random(10, 12)};
  std::vector<std::vector<float>> g2 = {Random(100000, 13), Random(10, 14)};
  for (uint32_t t = 0; t < 2; ++t) {
    ASSERT_TRUE(PsClient::Wait(c1_->Push(t, g1[t], 0), kWait).ok());
    ASSERT_TRUE(PsClient::Wait(c2_->Push(t, g2[t], 0), kWait).ok());
  }
  ASSERT_TRUE(c1_->AdvanceClock(1).ok());
  ASSERT_TRUE(c2_->AdvanceClock(1).ok());
  std::vector<std::vector<float>> got = {std::vector<float>(100000), std::vector<float>(10)};
  ASSERT_TRUE(PsClient::Wait(c2_->Pull(1, MutableSpans(got)), kWait).ok());
  auto want = init;
  for (size_t t = 0; t < 2; ++t) {
    for (size_t i = 0; i < want[t].size(); ++i) want[t][i] -= (g1[t][i] + g2[t][i]) / 2.0f;
  }
  ExpectNear(got, want);
}

// See [overlapped pull]: the next clock's pull asked for before the pushes
// are acknowledged waits, chunk by chunk, for every member's round.
TEST_F(PsClientTest, OverlappedPullWaitsForEveryMembersRound) {
  StartShards(2);
  ShardMap map = Map("none");
  std::vector<std::vector<float>> init;
  ASSERT_NO_FATAL_FAILURE(StartTwoWorkers(map, Sgd(1.0f), &init));
  std::vector<std::vector<float>> g1 = {Random(100000, 11), Random(10, 12)};
  std::vector<std::vector<float>> g2 = {Random(100000, 13), Random(10, 14)};
  std::vector<std::vector<float>> got1 = {std::vector<float>(100000), std::vector<float>(10)};
  std::vector<std::vector<float>> got2 = got1;
  std::vector<PushHandle> pushes;
  for (uint32_t t = 0; t < 2; ++t) pushes.push_back(c1_->Push(t, g1[t], 0));
  PullHandle pull1 = c1_->Pull(1, MutableSpans(got1));
  ASSERT_TRUE(c1_->AdvanceClock(1).ok());
  // Worker 2 has not pushed: no round closed, the pull waits (and goes on).
  EXPECT_EQ(PsClient::Wait(pull1, absl::Milliseconds(300)).code(),
            absl::StatusCode::kDeadlineExceeded);
  for (uint32_t t = 0; t < 2; ++t) pushes.push_back(c2_->Push(t, g2[t], 0));
  PullHandle pull2 = c2_->Pull(1, MutableSpans(got2));
  ASSERT_TRUE(c2_->AdvanceClock(1).ok());
  for (auto& h : pushes) ASSERT_TRUE(PsClient::Wait(h, kWait).ok());
  ASSERT_TRUE(PsClient::Wait(pull1, kWait).ok());
  ASSERT_TRUE(PsClient::Wait(pull2, kWait).ok());
  auto want = init;
  for (size_t t = 0; t < 2; ++t) {
    for (size_t i = 0; i < want[t].size(); ++i) want[t][i] -= (g1[t][i] + g2[t][i]) / 2.0f;
  }
  ExpectNear(got1, want);
  ExpectNear(got2, want);
}

// Sync mode: a pull asked for before the pushes of its clock (its requests,
// split in two for the shard's 8 chunks, reach the shard first) waits there
// for the rounds and answers with every member's pushes in, clock after
// clock (see [overlapped pull]).
TEST_F(PsClientTest, SyncPullAskedBeforeThePushesReadsThem) {
  StartShards(1);
  ShardMap map = Map("none");
  std::vector<std::vector<float>> want;
  ASSERT_NO_FATAL_FAILURE(StartTwoWorkers(map, Sgd(0.5f), &want));
  for (uint64_t clock = 0; clock < 3; ++clock) {
    std::vector<std::vector<float>> got1 = {std::vector<float>(100000), std::vector<float>(10)};
    std::vector<std::vector<float>> got2 = got1;
    PullHandle pull1 = c1_->Pull(clock + 1, MutableSpans(got1));
    PullHandle pull2 = c2_->Pull(clock + 1, MutableSpans(got2));
    std::vector<PushHandle> pushes;
    for (const TensorInfo& t : map.tensors) {
      const auto g1 = Random(t.num_elems, 31 + t.index + 10 * clock);
      const auto g2 = Random(t.num_elems, 41 + t.index + 10 * clock);
      pushes.push_back(c1_->Push(t.index, g1, clock));
      if (t.index == 0) {
        // Only worker 1 has pushed the big tensor: none of its rounds closed.
        EXPECT_EQ(PsClient::Wait(pull1, absl::Milliseconds(200)).code(),
                  absl::StatusCode::kDeadlineExceeded);
      }
      pushes.push_back(c2_->Push(t.index, g2, clock));
      for (size_t i = 0; i < g1.size(); ++i) want[t.index][i] -= 0.5f * (g1[i] + g2[i]) / 2.0f;
    }
    ASSERT_TRUE(c1_->AdvanceClock(clock + 1).ok());
    ASSERT_TRUE(c2_->AdvanceClock(clock + 1).ok());
    for (auto& h : pushes) ASSERT_TRUE(PsClient::Wait(h, kWait).ok());
    ASSERT_TRUE(PsClient::Wait(pull1, kWait).ok());
    ASSERT_TRUE(PsClient::Wait(pull2, kWait).ok());
    ExpectNear(got1, want);
    ExpectNear(got2, want);
  }
}

// Async answers a pull at once; the overlapped pull still follows the
// worker's own pushes of its chunks on the stream, so it reads its writes.
TEST_F(PsClientTest, OverlappedAsyncPullReadsItsOwnPushes) {
  StartShards(2);
  ShardMap map = Map("none");
  testing::JobSetup setup = Sgd(0.5f);
  setup.consistency.set_mode(v1::ASYNC);
  ASSERT_TRUE(testing::CreateJob(map, setup, kWait).ok());
  ClientOptions o = Options();
  auto client = PsClient::Connect(map, o);
  ASSERT_TRUE(client.ok()) << client.status();
  auto want = InitValues(map);
  ASSERT_TRUE((*client)->InitParams(Spans(want), kWait).ok());
  for (uint64_t clock = 0; clock < 3; ++clock) {
    std::vector<std::vector<float>> grads;
    std::vector<PushHandle> pushes;
    for (const TensorInfo& t : map.tensors) {
      grads.push_back(Random(t.num_elems, 7 + t.index + 10 * clock, 0.7f));
      pushes.push_back((*client)->Push(t.index, grads.back(), clock));
    }
    std::vector<std::vector<float>> got = {std::vector<float>(100000), std::vector<float>(10)};
    PullHandle pull = (*client)->Pull(clock + 1, MutableSpans(got));
    ASSERT_TRUE((*client)->AdvanceClock(clock + 1).ok());
    for (auto& h : pushes) ASSERT_TRUE(PsClient::Wait(h, kWait).ok());
    ASSERT_TRUE(PsClient::Wait(pull, kWait).ok());
    want = Expected(map, o, want, grads, clock, 0.5f);
    ExpectNear(got, want);
  }
  EXPECT_TRUE((*client)->Leave(kWait).ok());
}

TEST_F(PsClientTest, LeaveClosesTheClient) {
  StartShards(2);
  ShardMap map = Map("none");
  ASSERT_TRUE(testing::CreateJob(map, Sgd(0.1f), kWait).ok());
  auto client = PsClient::Connect(map, Options());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->Leave(kWait).ok());
  // Unusable afterwards, and says so: every call fails at once with the
  // stopped client's status, nothing is sent.
  std::vector<float> g(10, 1.0f);
  const absl::Status push = PsClient::Wait((*client)->Push(1, g, 0), absl::ZeroDuration());
  EXPECT_EQ(push.code(), absl::StatusCode::kCancelled) << push;
  EXPECT_TRUE(absl::StrContains(push.message(), "client stopped")) << push;
  const absl::Status clock = (*client)->AdvanceClock(2);
  EXPECT_EQ(clock.code(), absl::StatusCode::kCancelled) << clock;
  std::vector<std::vector<float>> got = {std::vector<float>(100000), std::vector<float>(10)};
  EXPECT_EQ(PsClient::Wait((*client)->Pull(1, MutableSpans(got)), absl::ZeroDuration()).code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ((*client)->stats().chunks_pushed, 1u);  // encoded, never queued on a stream
  EXPECT_EQ((*client)->stats().chunks_acked, 0u);
}

// [step loop]: a pull held by a straggler for longer than many wait slices
// is asked once. The loop it replaces asked again every 2 s (the C ABI)
// without cancelling the parked one; with 25 chunks on the shard each ask
// parks 6 requests, and the third ask passed the shard's cap of 16 parked
// pulls per stream: RESOURCE_EXHAUSTED for the healthy worker. The slices
// are on a fake clock ([env time]): each of the 100 runs out when the test
// advances it, so the test takes no real seconds and a loaded machine cannot
// make it see fewer slices.
TEST_F(PsClientTest, StepLoopAsksOnceForAPullHeldByAStraggler) {
  StartShards(1);
  CodecPolicy fp32;
  fp32.default_codec = "none";
  auto map = SplitModel({{"w", 100000}}, Addresses(), 4096, fp32);
  ASSERT_TRUE(map.ok());
  ASSERT_GE(map->chunks.size(), 24u);
  std::vector<std::vector<float>> init;
  ASSERT_NO_FATAL_FAILURE(StartTwoWorkers(*map, Sgd(1.0f), &init));
  gradstream::testing::FakeClockEnv clock;
  StepLoopOptions lo;
  lo.wait_slice = absl::Milliseconds(100);
  lo.env = &clock;
  std::atomic<int> slices{0};  // the loop looks at `check` once per slice that ran out
  StepLoopHooks hooks;
  hooks.check = [&slices] {
    slices.fetch_add(1);
    return absl::OkStatus();
  };
  StepLoop loop(c1_.get(), lo, hooks);
  std::vector<float> params(100000), grad(100000, 1.0f);
  ASSERT_TRUE(loop.Push(0, grad, 0).ok());
  ASSERT_TRUE(loop.EndClock(0, std::vector<absl::Span<float>>{absl::MakeSpan(params)}).ok());
  std::thread straggler([&] {
    // Once the loop waits, one slice's worth of time; until 100 ran out.
    while (slices.load() < 100 && clock.AwaitWaiters(1, kWait)) clock.Advance(lo.wait_slice);
    ASSERT_TRUE(PsClient::Wait(c2_->Push(0, grad, 0), kWait).ok());
    ASSERT_TRUE(c2_->AdvanceClock(1).ok());
  });
  const absl::Status waited = loop.WaitTensors({});
  straggler.join();
  ASSERT_TRUE(waited.ok()) << waited;
  EXPECT_GE(slices.load(), 100);
  EXPECT_EQ(c1_->stats().pull_calls, 1u);
  EXPECT_FLOAT_EQ(params[0], init[0][0] - 1.0f);
  // The 10 s the straggler took were all waited for: the wait share says
  // so; time outside the loop's waits (the model's) is not counted.
  EXPECT_GE(loop.wait_seconds(), 100 * 0.1);
  EXPECT_GT(loop.wait_share(), 0.99);
  clock.Advance(absl::Seconds(loop.wait_seconds()));
  EXPECT_NEAR(loop.wait_share(), 0.5, 0.01);
}

// [early pull]: in sync mode the loop asks clock c+1's pull when the encode
// thread takes clock c's first gradient. The shard answers it once the
// rounds close, but nothing lands in the parameters (fp32 answers, or
// published deltas to the worker's copies) before EndClock, which releases
// it instead of asking again; an EndClock with other targets asks anew, and
// after an EndClock without a next pull the caller's StartPull takes it up.
TEST_F(PsClientTest, StepLoopEarlyPullLandsAtEndClock) {
  for (const char* pull_codec : {"none", "ternary"}) {
    SCOPED_TRACE(pull_codec);
    StartShards(1);
    CodecPolicy policy;
    policy.default_codec = "none";
    policy.pull_codec = pull_codec;
    auto map = SplitModel({{"w", 100000}}, Addresses(), 16384, policy);
    ASSERT_TRUE(map.ok()) << map.status();
    ASSERT_EQ(map->tensors[0].pull_codec, pull_codec);
    const uint64_t chunks = map->chunks.size();
    std::vector<std::vector<float>> init;
    ASSERT_NO_FATAL_FAILURE(StartTwoWorkers(*map, Sgd(1.0f), &init));
    StepLoopOptions lo;
    lo.early_pull = true;
    auto loop = std::make_unique<StepLoop>(c1_.get(), lo, StepLoopHooks());
    std::vector<float> params(100000), other(100000);
    loop->StartPull(0, {absl::MakeSpan(params)});
    ASSERT_TRUE(loop->WaitTensors({}).ok());
    ASSERT_EQ(params, init[0]);
    const std::vector<float> g1 = Random(100000, 51), g2 = Random(100000, 52);
    ASSERT_TRUE(PsClient::Wait(c2_->Push(0, g2, 0), kWait).ok());
    ASSERT_TRUE(c2_->AdvanceClock(1).ok());
    ASSERT_TRUE(loop->Push(0, g1, 0).ok());
    ASSERT_TRUE(loop->WaitPushes(kWait).ok());  // every round of clock 0 closed
    loop->StartPull(0, {absl::MakeSpan(params)});  // the clock's own pull: keeps the early one
    const absl::Time deadline = absl::Now() + kWait;
    while (c1_->stats().chunks_pulled < 2 * chunks && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    EXPECT_EQ(c1_->stats().chunks_pulled, 2 * chunks);  // the answers are in ...
    EXPECT_EQ(c1_->stats().pull_calls, 2u);
    EXPECT_EQ(params, init[0]);  // ... and wait for EndClock
    ASSERT_TRUE(loop->EndClock(0, std::vector<absl::Span<float>>{absl::MakeSpan(params)}).ok());
    ASSERT_TRUE(loop->WaitTensors({}).ok());
    EXPECT_EQ(c1_->stats().pull_calls, 2u);  // released, not asked again
    ASSERT_TRUE(PsClient::Wait(c2_->Pull(1, {absl::MakeSpan(other)}), kWait).ok());
    EXPECT_EQ(params, other);  // the same copy as a pull asked after the round
    for (size_t i = 0; i < params.size(); i += 997) {
      EXPECT_NEAR(params[i], init[0][i] - (g1[i] + g2[i]) / 2.0f,
                  std::string(pull_codec) == "none" ? 1e-6f : 1.0f);
    }
    // Clock 1 ends with other targets: the early pull is dropped, a new one asked.
    ASSERT_TRUE(PsClient::Wait(c2_->Push(0, g2, 1), kWait).ok());
    ASSERT_TRUE(c2_->AdvanceClock(2).ok());
    ASSERT_TRUE(loop->Push(0, g1, 1).ok());
    ASSERT_TRUE(loop->EndClock(1, std::vector<absl::Span<float>>{absl::MakeSpan(other)}).ok());
    ASSERT_TRUE(loop->WaitTensors({}).ok());
    EXPECT_EQ(c1_->stats().pull_calls, 4u);
    std::vector<float> again(100000);
    ASSERT_TRUE(PsClient::Wait(c2_->Pull(2, {absl::MakeSpan(again)}), kWait).ok());
    EXPECT_EQ(other, again);
    // Clock 2 ends without a next pull (a trainer's last step): the caller's
    // own StartPull of clock 3 takes the early pull up, nothing is discarded.
    const uint64_t discarded = c1_->stats().bytes_pulled_discarded;  // clock 1's dropped pull
    ASSERT_TRUE(PsClient::Wait(c2_->Push(0, g2, 2), kWait).ok());
    ASSERT_TRUE(c2_->AdvanceClock(3).ok());
    ASSERT_TRUE(loop->Push(0, g1, 2).ok());
    ASSERT_TRUE(loop->EndClock(2, std::nullopt).ok());
    EXPECT_EQ(other, again);
    loop->StartPull(3, {absl::MakeSpan(other)});
    ASSERT_TRUE(loop->WaitTensors({}).ok());
    EXPECT_EQ(c1_->stats().pull_calls, 5u);
    EXPECT_EQ(c1_->stats().bytes_pulled_discarded, discarded);
    ASSERT_TRUE(PsClient::Wait(c2_->Pull(3, {absl::MakeSpan(again)}), kWait).ok());
    EXPECT_EQ(other, again);
    loop.reset();
    c1_.reset();
    c2_.reset();
    shards_.clear();
  }
}

// [early pull]: no early pull for a clock the caller will not pull (a leave,
// the last step), so none is answered for nobody; the caller is asked once
// per clock, not per gradient.
TEST_F(PsClientTest, StepLoopAsksNoEarlyPullForAClockItWillNotPull) {
  StartShards(1);
  CodecPolicy fp32;
  fp32.default_codec = "none";
  auto map = SplitModel({{"a", 50000}, {"b", 50000}}, Addresses(), 16384, fp32);
  ASSERT_TRUE(map.ok()) << map.status();
  std::vector<std::vector<float>> init;
  ASSERT_NO_FATAL_FAILURE(StartTwoWorkers(*map, Sgd(1.0f), &init));
  StepLoopOptions lo;
  lo.early_pull = true;
  StepLoopHooks hooks;
  std::atomic<int> asked{0};
  hooks.will_pull = [&asked](uint64_t clock) {  // leaves at clock 2
    ++asked;
    return clock < 2;
  };
  auto loop = std::make_unique<StepLoop>(c1_.get(), lo, hooks);
  std::vector<float> a(50000), b(50000);
  loop->StartPull(0, {absl::MakeSpan(a), absl::MakeSpan(b)});
  ASSERT_TRUE(loop->WaitTensors({}).ok());
  const std::vector<float> g = Random(50000, 61);
  for (uint64_t clock : {0, 1}) {
    ASSERT_TRUE(PsClient::Wait(c2_->Push(0, g, clock), kWait).ok());
    ASSERT_TRUE(PsClient::Wait(c2_->Push(1, g, clock), kWait).ok());
    ASSERT_TRUE(c2_->AdvanceClock(clock + 1).ok());
    ASSERT_TRUE(loop->Push(1, g, clock).ok());
    ASSERT_TRUE(loop->Push(0, g, clock).ok());
    std::optional<std::vector<absl::Span<float>>> next;
    if (clock == 0) next = std::vector<absl::Span<float>>{absl::MakeSpan(a), absl::MakeSpan(b)};
    ASSERT_TRUE(loop->EndClock(clock, std::move(next)).ok());
    if (clock == 0) {
      ASSERT_TRUE(loop->WaitTensors({}).ok());
    }
  }
  EXPECT_EQ(c1_->stats().pull_calls, 2u);  // clock 0's, and clock 1's asked early
  EXPECT_EQ(asked.load(), 2);               // for clocks 1 and 2
  loop.reset();
  EXPECT_EQ(c1_->stats().bytes_pulled_discarded, 0u);
}

// [step loop]: WaitTensors waits for the tensors asked for only -- here
// while the shard that holds the other tensor does not answer at all.
TEST_F(PsClientTest, StepLoopWaitsOnlyForTheTensorsAskedFor) {
  StartShards(2);
  CodecPolicy fp32;
  fp32.default_codec = "none";
  auto map = SplitModel({{"first", 50000}, {"second", 50000}}, Addresses(), 16384, fp32);
  ASSERT_TRUE(map.ok());
  for (ChunkInfo& c : map->chunks) c.shard = c.tensor;  // one tensor per shard
  const uint32_t second_shard = 1;
  ASSERT_TRUE(testing::CreateJob(*map, Sgd(1.0f), kWait).ok());
  auto client = PsClient::Connect(*map, Options());
  ASSERT_TRUE(client.ok());
  auto init = InitValues(*map);
  ASSERT_TRUE((*client)->InitParams(Spans(init), kWait).ok());
  StepLoop loop(client->get(), StepLoopOptions(), {});
  std::vector<std::vector<float>> params = {std::vector<float>(50000), std::vector<float>(50000)};
  const std::vector<float> grad(50000, 1.0f);  // read by the encode thread until EndClock
  ASSERT_TRUE(loop.Push(0, grad, 0).ok());
  ASSERT_TRUE(loop.Push(1, grad, 0).ok());
  ASSERT_TRUE(loop.WaitPushes(kWait).ok());
  ASSERT_TRUE(shards_[second_shard]->Pause().ok());
  ASSERT_TRUE(loop.EndClock(0, MutableSpans(params)).ok());
  const uint32_t first = 0, second = 1;
  ASSERT_TRUE(loop.WaitTensors({&first, 1}).ok());
  EXPECT_FLOAT_EQ(params[0][0], init[0][0] - 1.0f);
  EXPECT_FALSE(loop.TensorsReady({&second, 1}));
  ASSERT_TRUE(shards_[second_shard]->Resume().ok());
  ASSERT_TRUE(loop.WaitTensors({&second, 1}).ok());
  EXPECT_FLOAT_EQ(params[1][0], init[1][0] - 1.0f);
}

// [step loop]: a shard restarted without a checkpoint answers the pull with
// DATA_LOSS; the loop sends the parameters it holds (reinit) and asks again.
TEST_F(PsClientTest, StepLoopReinitializesAShardThatLostItsParameters) {
  std::vector<std::vector<float>> init;
  std::unique_ptr<PsClient> client = OneWorker(1.0f, &init);
  ASSERT_NE(client, nullptr);
  const ShardMap map = client->shard_map();
  int reinits = 0;
  StepLoopHooks hooks;
  hooks.reinit = [&](absl::Span<const absl::Span<float>> held) {
    ++reinits;
    return client->InitParams(std::vector<absl::Span<const float>>(held.begin(), held.end()),
                              kWait);
  };
  StepLoop loop(client.get(), StepLoopOptions(), std::move(hooks));
  std::vector<std::vector<float>> params = {std::vector<float>(100000), std::vector<float>(10)};
  loop.StartPull(0, MutableSpans(params));
  ASSERT_TRUE(loop.WaitTensors({}).ok());
  shards_[0]->Kill();
  ASSERT_TRUE(shards_[0]->Restart().ok());
  testing::JobSetup resumed = Sgd(1.0f);  // as the coordinator re-creates it
  resumed.resume = true;
  ASSERT_TRUE(testing::CreateJob(map, resumed, kWait).ok());
  loop.AbandonPull();
  loop.StartPull(0, MutableSpans(params));
  const absl::Status s = loop.WaitTensors({});
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(reinits, 1);
  EXPECT_EQ(params[0][7], init[0][7]);
}

// Polls `done` every millisecond until it holds or `deadline` passes.
bool PollUntil(const std::function<bool()>& done, absl::Duration deadline = kWait) {
  const absl::Time give_up = absl::Now() + deadline;
  while (!done()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

// [fused messages]: the small tensors of a step travel in buckets, in push
// order -- the first bucket alone (it fills at one tensor here), the rest
// together, one Push per shard they hold chunks of -- and the pull comes back
// in one PullAnswer per bucket a shard got. Without buckets every chunk is a
// message of its own. Counted per step, on the client and on the shards;
// the clock advances ride in those messages, none alone ([advance rides]).
TEST_F(PsClientTest, StepLoopSendsSmallTensorsInBuckets) {
  StartShards(2);
  std::vector<TensorSpec> specs;
  for (int t = 0; t < 10; ++t) specs.push_back({absl::StrCat("t", t), 100});
  CodecPolicy fp32;
  fp32.default_codec = "none";
  auto map = SplitModel(specs, Addresses(), kMaxChunkElems, fp32);
  ASSERT_TRUE(map.ok());
  ASSERT_EQ(map->chunks.size(), 10u);
  ASSERT_TRUE(testing::CreateJob(*map, Sgd(0.5f), kWait).ok());
  for (const bool buckets : {true, false}) {
    SCOPED_TRACE(buckets ? "buckets" : "no buckets");
    ClientOptions o = Options();
    o.advance_hold = absl::Seconds(30);  // every advance rides, however slow the host
    if (buckets) {
      o.first_bucket_bytes = 400;  // one tensor's fp32 bytes
      o.bucket_bytes = 1 << 20;
    }
    auto client = PsClient::Connect(*map, o);
    ASSERT_TRUE(client.ok()) << client.status();
    auto init = InitValues(*map);
    ASSERT_TRUE((*client)->InitParams(Spans(init), kWait).ok());
    StepLoop loop(client->get(), StepLoopOptions(), {});
    std::vector<std::vector<float>> grads, params;
    for (int t = 0; t < 10; ++t) {
      grads.emplace_back(100, static_cast<float>(t + 1));
      params.emplace_back(100, 0.0f);
    }
    const uint64_t first = buckets ? 0 : 2;  // clocks: the first job ran two
    loop.StartPull(first, MutableSpans(params));
    ASSERT_TRUE(loop.WaitTensors({}).ok());
    for (uint64_t clock = first; clock < first + 2; ++clock) {
      const ClientStats before = (*client)->stats();
      uint64_t shard_messages = 0, clock_messages = 0;
      for (const auto& shard : shards_) {
        auto st = testing::GetStats(shard->address(), "job", kWait);
        ASSERT_TRUE(st.ok()) << st.status();
        shard_messages += st->push_messages();
        clock_messages += st->clock_messages();
      }
      for (int t = 9; t >= 0; --t) {
        ASSERT_TRUE(loop.Push(t, grads[t], clock).ok());  // backward order
      }
      ASSERT_TRUE(loop.EndClock(clock, MutableSpans(params)).ok());
      ASSERT_TRUE(loop.WaitTensors({}).ok());
      const ClientStats after = (*client)->stats();
      uint64_t shard_messages_after = 0, clock_messages_after = 0;
      for (const auto& shard : shards_) {
        auto st = testing::GetStats(shard->address(), "job", kWait);
        ASSERT_TRUE(st.ok()) << st.status();
        shard_messages_after += st->push_messages();
        clock_messages_after += st->clock_messages();
        // The previous clock's advance came with this clock's messages
        // ([advance rides]). This clock's is held for the next clock's, or
        // rode in this clock's last pull request when the last ack let that
        // out and the advance found it still queued (a loaded host).
        if (clock > first) {
          EXPECT_GE(st->max_clock(), clock);
          EXPECT_LE(st->max_clock(), clock + 1);
        }
      }
      EXPECT_EQ(clock_messages_after, clock_messages);
      EXPECT_EQ(after.chunks_pushed - before.chunks_pushed, 10u);
      EXPECT_EQ(after.push_messages - before.push_messages, buckets ? 3u : 10u);
      EXPECT_EQ(shard_messages_after - shard_messages, buckets ? 3u : 10u);
      if (buckets) {
        // One request per push message still unacknowledged when the pull
        // is asked ([overlapped pull]), plus one for the chunks whose push
        // was acknowledged already: 3 answers, or 2 when the shards were
        // quick enough to acknowledge a bucket first (a loaded host).
        const uint64_t answers = after.pull_messages - before.pull_messages;
        EXPECT_GE(answers, 2u);
        EXPECT_LE(answers, 3u);
      }
    }
    // Every chunk applied once per clock, whatever the message it came in.
    for (int t = 0; t < 10; ++t) {
      const float applied = 0.5f * static_cast<float>(t + 1) * static_cast<float>(first + 2);
      EXPECT_FLOAT_EQ(params[t][0], init[t][0] - applied) << "tensor " << t;
    }
  }
}

// [advance rides]: a clock advance waits for the next message and rides in
// it, a push, a pull request or Leave (no ClockAdvance message reaches the
// shard, which still learns the clock); one that nothing follows goes alone
// once advance_hold passed.
TEST_F(PsClientTest, AClockAdvanceRidesInTheNextMessage) {
  StartShards(1);
  const ShardMap map = Map("none");
  ASSERT_TRUE(testing::CreateJob(map, Sgd(0.5f), kWait).ok());
  auto stats = [&]() {
    auto st = testing::GetStats(shards_[0]->address(), "job", kWait);
    EXPECT_TRUE(st.ok()) << st.status();
    return st.ok() ? *st : v1::StatsResponse();
  };
  for (const absl::Duration hold : {absl::Seconds(30), absl::Milliseconds(50)}) {
    SCOPED_TRACE(absl::StrCat("hold ", absl::FormatDuration(hold)));
    const uint64_t c0 = hold == absl::Seconds(30) ? 0 : 3;  // the first client ran 3 clocks
    ClientOptions o = Options();
    o.advance_hold = hold;
    auto client = PsClient::Connect(map, o);
    ASSERT_TRUE(client.ok()) << client.status();
    if (c0 == 0) {
      ASSERT_TRUE((*client)->InitParams(Spans(InitValues(map)), kWait).ok());
    }
    const std::vector<std::vector<float>> grads = {std::vector<float>(100000, 1.0f),
                                                   std::vector<float>(10, 1.0f)};
    auto push_all = [&](uint64_t clock) {
      std::vector<PushHandle> pushes;
      for (const TensorInfo& t : map.tensors) {
        pushes.push_back((*client)->Push(t.index, grads[t.index], clock));
      }
      for (auto& p : pushes) ASSERT_TRUE(PsClient::Wait(p, kWait).ok());
    };
    const uint64_t messages = stats().clock_messages();
    push_all(c0);
    ASSERT_TRUE((*client)->AdvanceClock(c0 + 1).ok());
    if (c0 == 0) {
      absl::SleepFor(absl::Milliseconds(300));
      EXPECT_EQ(stats().max_clock(), c0);  // held
      push_all(c0 + 1);
      EXPECT_EQ(stats().max_clock(), c0 + 1);
      EXPECT_EQ(stats().clock_messages(), messages);  // it rode in the push
      // In a pull request, which sees the new clock.
      ASSERT_TRUE((*client)->AdvanceClock(c0 + 2).ok());
      std::vector<std::vector<float>> got = {std::vector<float>(100000), std::vector<float>(10)};
      ASSERT_TRUE(PsClient::Wait((*client)->Pull(c0 + 2, MutableSpans(got)), kWait).ok());
      EXPECT_EQ(stats().max_clock(), c0 + 2);
      // In Leave.
      push_all(c0 + 2);
      ASSERT_TRUE((*client)->AdvanceClock(c0 + 3).ok());
      EXPECT_TRUE((*client)->Leave(kWait).ok());
      EXPECT_EQ(stats().max_clock(), c0 + 3);
      EXPECT_EQ(stats().clock_messages(), messages);
    } else {
      // No push within the hold: alone, after it.
      const absl::Time deadline = absl::Now() + kWait;
      while (stats().max_clock() < c0 + 1 && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(10));
      }
      EXPECT_EQ(stats().max_clock(), c0 + 1);
      EXPECT_EQ(stats().clock_messages(), messages + 1);
      EXPECT_TRUE((*client)->Leave(kWait).ok());
    }
  }
}

// [encode thread]: StepLoop::Push returns before its gradient is encoded
// (as the package's gradient hook does). The encode thread is held,
// without a timer, inside the previous tensor's send: the shard is stopped
// (SIGSTOP), so tensor a's Push is never acknowledged and b's cannot get
// room in a send window of 1 byte. c's Push returns while c's encode has not
// even started; once the shard runs again the clock completes as usual.
TEST_F(PsClientTest, StepLoopPushReturnsBeforeTheGradientIsEncoded) {
  StartShards(1);
  CodecPolicy fp32;
  fp32.default_codec = "none";
  auto map = SplitModel({{"a", 1000}, {"b", 1000}, {"c", 1000}}, Addresses(), kMaxChunkElems, fp32);
  ASSERT_TRUE(map.ok());
  ASSERT_TRUE(testing::CreateJob(*map, Sgd(1.0f), kWait).ok());
  ClientOptions o = Options();
  o.max_inflight_bytes_per_shard = 1;  // one push at a time
  o.rpc_deadline = absl::Minutes(1);   // how long a push waits for room
  auto client = PsClient::Connect(*map, o);
  ASSERT_TRUE(client.ok()) << client.status();
  auto init = InitValues(*map);
  ASSERT_TRUE((*client)->InitParams(Spans(init), kWait).ok());
  StepLoopOptions lo;
  lo.encode_batch_elems = 1000;  // each gradient wakes the encode thread
  StepLoop loop(client->get(), lo, {});
  const std::vector<float> grad(1000, 1.0f);
  ASSERT_TRUE(shards_[0]->Pause().ok());
  ASSERT_TRUE(loop.Push(0, grad, 0).ok());
  ASSERT_TRUE(loop.Push(1, grad, 0).ok());
  // a is sent (and unacknowledged); b's push has begun and waits for room.
  ASSERT_TRUE(PollUntil([&] { return (*client)->stats().push_calls == 2; }));
  ASSERT_TRUE(loop.Push(2, grad, 0).ok());
  EXPECT_EQ((*client)->stats().push_calls, 2u);  // c's encode has not started
  EXPECT_EQ((*client)->stats().chunks_acked, map->chunks.size());  // the inits only
  ASSERT_TRUE(shards_[0]->Resume().ok());
  std::vector<std::vector<float>> params(3, std::vector<float>(1000));
  ASSERT_TRUE(loop.EndClock(0, MutableSpans(params)).ok());
  EXPECT_EQ((*client)->stats().push_calls, 3u);
  ASSERT_TRUE(loop.WaitTensors({}).ok());
  for (int t = 0; t < 3; ++t) EXPECT_FLOAT_EQ(params[t][7], init[t][7] - 1.0f) << "tensor " << t;
}

// The encode thread is woken per batch of gradients, not per gradient (see
// [encode thread]): forty small gradients wait for the clock's end and are
// encoded there by EndClock's caller, with no wake-up; one of
// kEncodeBatchElems wakes it at once.
TEST_F(PsClientTest, StepLoopWakesTheEncoderPerBatchNotPerGradient) {
  StartShards(1);
  std::vector<TensorSpec> specs;
  for (int t = 0; t < 40; ++t) specs.push_back({absl::StrCat("small", t), 100});
  specs.push_back({"big", kEncodeBatchElems});
  CodecPolicy fp32;
  fp32.default_codec = "none";
  auto map = SplitModel(specs, Addresses(), kMaxChunkElems, fp32);
  ASSERT_TRUE(map.ok());
  ASSERT_TRUE(testing::CreateJob(*map, Sgd(1.0f), kWait).ok());
  auto client = PsClient::Connect(*map, Options());
  ASSERT_TRUE(client.ok()) << client.status();
  auto init = InitValues(*map);
  ASSERT_TRUE((*client)->InitParams(Spans(init), kWait).ok());
  StepLoop loop(client->get(), StepLoopOptions(), {});
  std::vector<std::vector<float>> grads, params;
  for (const TensorSpec& t : specs) {
    grads.emplace_back(t.num_elems, 1.0f);
    params.emplace_back(t.num_elems, 0.0f);
  }
  const uint32_t big = 40;
  for (uint32_t t = 0; t < big; ++t) ASSERT_TRUE(loop.Push(t, grads[t], 0).ok());
  EXPECT_EQ(loop.encode_wakeups(), 0u);
  EXPECT_EQ((*client)->stats().push_calls, 0u);
  ASSERT_TRUE(loop.EndClock(0, MutableSpans(params)).ok());  // big: pushed as zeros
  EXPECT_EQ(loop.encode_wakeups(), 0u);
  EXPECT_EQ((*client)->stats().push_calls, 41u);
  ASSERT_TRUE(loop.WaitTensors({}).ok());
  for (uint32_t t = 0; t < big; ++t) EXPECT_FLOAT_EQ(params[t][7], init[t][7] - 1.0f) << t;
  EXPECT_FLOAT_EQ(params[big][7], init[big][7]);

  // Clock 1: the batch-sized gradient is encoded before the clock ends.
  ASSERT_TRUE(loop.Push(big, grads[big], 1).ok());
  ASSERT_TRUE(PollUntil([&] { return loop.encode_wakeups() == 1; }));
  ASSERT_TRUE(loop.EndClock(1, MutableSpans(params)).ok());
  ASSERT_TRUE(loop.WaitTensors({}).ok());
  EXPECT_FLOAT_EQ(params[big][7], init[big][7] - 1.0f);
}

// A bucket the encode thread leaves behind when its queue runs dry goes out
// then if it holds idle_flush_bytes (see [encode thread]), not at the clock's
// end: a 400 KB gradient leaves before the next gradient is pushed; under a
// higher bound it waits for the clock's end and shares the last bucket.
TEST_F(PsClientTest, StepLoopSendsABigBucketWhenTheEncoderRunsDry) {
  StartShards(1);
  const std::vector<TensorSpec> specs = {{"big", 100000}, {"small", 1000}};
  CodecPolicy fp32;
  fp32.default_codec = "none";
  auto map = SplitModel(specs, Addresses(), kMaxChunkElems, fp32);
  ASSERT_TRUE(map.ok());
  ASSERT_TRUE(testing::CreateJob(*map, Sgd(1.0f), kWait).ok());
  ClientOptions o = Options();
  o.first_bucket_bytes = o.bucket_bytes = kStepLoopBucketBytes;
  auto client = PsClient::Connect(*map, o);
  ASSERT_TRUE(client.ok()) << client.status();
  auto init = InitValues(*map);
  ASSERT_TRUE((*client)->InitParams(Spans(init), kWait).ok());
  std::vector<std::vector<float>> grads = {std::vector<float>(100000, 1.0f),
                                           std::vector<float>(1000, 1.0f)};
  std::vector<std::vector<float>> params = {std::vector<float>(100000),
                                            std::vector<float>(1000)};
  uint64_t clock = 0;
  for (const uint64_t idle_flush : {kStepLoopBucketBytes / 4, kStepLoopBucketBytes / 2}) {
    SCOPED_TRACE(idle_flush);
    StepLoopOptions lo;
    lo.encode_batch_elems = 100000;  // the big gradient wakes the encode thread
    lo.idle_flush_bytes = idle_flush;
    StepLoop loop(client->get(), lo, {});
    const ClientStats before = (*client)->stats();
    ASSERT_TRUE(loop.Push(0, grads[0], clock).ok());
    const bool flushed = idle_flush <= 400000;  // the big gradient's fp32 bytes
    if (flushed) {
      ASSERT_TRUE(
          PollUntil([&] { return (*client)->stats().push_messages > before.push_messages; }));
    } else {
      ASSERT_TRUE(PollUntil([&] { return (*client)->stats().push_calls > before.push_calls; }));
      absl::SleepFor(absl::Milliseconds(50));  // a flush would have gone out by now
    }
    const uint64_t early = (*client)->stats().push_messages - before.push_messages;
    EXPECT_EQ(early, flushed ? 1u : 0u);
    ASSERT_TRUE(loop.Push(1, grads[1], clock).ok());
    ASSERT_TRUE(loop.EndClock(clock, MutableSpans(params)).ok());
    ASSERT_TRUE(loop.WaitTensors({}).ok());
    EXPECT_EQ((*client)->stats().push_messages - before.push_messages, early + 1);
    ++clock;
    EXPECT_FLOAT_EQ(params[0][7], init[0][7] - static_cast<float>(clock));
    EXPECT_FLOAT_EQ(params[1][7], init[1][7] - static_cast<float>(clock));
  }
}

// A table lives on the shards (docs/design/sparse-tables.md): two workers
// read the same first-touch rows, push the rows their batches touched, and
// the sync round moves each touched row by the mean of its gradients, sent
// by PushRows or, for a worker that touched none, by the step loop's empty
// push; rows nobody touched keep their initial values.
TEST_F(PsClientTest, TableRowsInASyncJob) {
  StartShards(2);
  TensorSpec table{"emb", 1000 * 4, {1000, 4}, true, 1.0f};
  auto map = SplitModel({{"w", 8}, table}, Addresses(), 16384);
  ASSERT_TRUE(map.ok()) << map.status();
  testing::JobSetup setup = Sgd(0.5f);
  setup.workers = {1, 2};
  ASSERT_TRUE(testing::CreateJob(*map, setup, kWait).ok());
  auto c1 = PsClient::Connect(*map, Options(1));
  auto c2 = PsClient::Connect(*map, Options(2));
  ASSERT_TRUE(c1.ok() && c2.ok()) << c1.status() << c2.status();
  const std::vector<float> w0(8, 1.0f);
  ASSERT_TRUE((*c1)->InitParams({absl::MakeConstSpan(w0), {}}, kWait).ok());

  const std::vector<uint64_t> ids = {3, 500, 999, 3};
  std::vector<float> rows1(16), rows2(16);
  ASSERT_TRUE(PsClient::Wait((*c1)->PullRows(1, ids, 0, absl::MakeSpan(rows1)), kWait).ok());
  ASSERT_TRUE(PsClient::Wait((*c2)->PullRows(1, ids, 0, absl::MakeSpan(rows2)), kWait).ok());
  EXPECT_EQ(rows1, rows2);  // first touch is the same for every reader
  EXPECT_EQ(std::vector<float>(rows1.begin(), rows1.begin() + 4),
            std::vector<float>(rows1.begin() + 12, rows1.end()));  // a repeat reads the row again
  EXPECT_NE(rows1[0], rows1[4]);

  // Clock 0: worker 1 touches rows 3 and 500 through the client; worker 2
  // pushes only its dense gradient through the step loop, which sends the
  // table's empty push.
  const std::vector<float> zeros(8, 0.0f), g1 = {1, 2, 3, 4, 4, 4, 4, 4};
  ASSERT_TRUE(PsClient::Wait((*c1)->Push(0, zeros, 0), kWait).ok());
  ASSERT_TRUE(PsClient::Wait((*c1)->PushRows(1, {3, 500}, g1, 0), kWait).ok());
  ASSERT_TRUE((*c1)->AdvanceClock(1).ok());
  {
    StepLoop loop(c2->get(), StepLoopOptions{}, StepLoopHooks{});
    ASSERT_TRUE(loop.Push(0, zeros, 0).ok());
    ASSERT_TRUE(loop.EndClock(0, std::nullopt).ok());
  }
  std::vector<float> after(16);
  ASSERT_TRUE(PsClient::Wait((*c1)->PullRows(1, ids, 1, absl::MakeSpan(after)), kWait).ok());
  for (int j = 0; j < 4; ++j) {
    EXPECT_FLOAT_EQ(after[j], rows1[j] - 0.5f * g1[j] / 2) << j;       // row 3
    EXPECT_FLOAT_EQ(after[4 + j], rows1[4 + j] - 0.5f * 4 / 2) << j;   // row 500
    EXPECT_FLOAT_EQ(after[8 + j], rows1[8 + j]) << j;                  // row 999: untouched
  }

  // Bad calls fail before anything is sent.
  auto error = [](const PushHandle& h) { return PsClient::Wait(h, kWait).message(); };
  const std::vector<float> one_row = {1, 1, 1, 1}, two_rows(8, 1.0f);
  EXPECT_TRUE(absl::StrContains(error((*c1)->PushRows(1, {1000}, one_row, 1)), "out of range"));
  EXPECT_TRUE(absl::StrContains(error((*c1)->PushRows(1, {7, 7}, two_rows, 1)), "twice"));
  EXPECT_TRUE(absl::StrContains(error((*c1)->PushRows(1, {7}, two_rows, 1)), "want 4 floats"));
  EXPECT_TRUE(absl::StrContains(error((*c1)->PushRows(0, {}, {}, 1)), "is not a table"));
  EXPECT_TRUE(absl::StrContains(error((*c1)->Push(1, two_rows, 1)), "is a table"));
  std::vector<float> out(4);
  EXPECT_EQ(PsClient::Wait((*c1)->PullRows(1, {1000}, 1, absl::MakeSpan(out)), kWait).code(),
            absl::StatusCode::kInvalidArgument);
}

// [fp16 rows]: where the job's codecs are lossy a table's rows travel fp16
// each way (half the bytes), within fp16's rounding of the fp32 update; an
// override of the table's codec to "none" keeps it fp32 both ways.
TEST_F(PsClientTest, TableRowsTravelFp16WhereTheJobCompresses) {
  StartShards(2);
  TensorSpec table{"emb", 10000 * 4, {10000, 4}, true, 1.0f};  // past pull_min_elems
  CodecPolicy lossy;
  lossy.default_codec = "ternary";
  lossy.pull_codec = "ternary";
  auto map = SplitModel({{"w", 8}, table}, Addresses(), 16384, lossy);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->tensors[1].codec, "fp16");
  EXPECT_EQ(map->tensors[1].pull_codec, "fp16");
  CodecPolicy exact_push = lossy;
  exact_push.overrides["emb"] = "none";
  auto exact_map = SplitModel({{"w", 8}, table}, Addresses(), 16384, exact_push);
  ASSERT_TRUE(exact_map.ok()) << exact_map.status();
  EXPECT_EQ(exact_map->tensors[1].codec, "none");  // the table exact both ways
  EXPECT_EQ(exact_map->tensors[1].pull_codec, "none");

  ASSERT_TRUE(testing::CreateJob(*map, Sgd(0.5f), kWait).ok());
  auto client = PsClient::Connect(*map, Options(1));
  ASSERT_TRUE(client.ok()) << client.status();
  const std::vector<uint64_t> ids = {3, 500, 999, 7777};
  std::vector<float> before(16), g(16), after(16);
  for (size_t i = 0; i < g.size(); ++i) g[i] = (i % 2 ? 0.0123f : -0.0457f) * (i + 1);
  ASSERT_TRUE(PsClient::Wait((*client)->PullRows(1, ids, 0, absl::MakeSpan(before)), kWait).ok());
  ASSERT_TRUE(PsClient::Wait((*client)->PushRows(1, ids, g, 0), kWait).ok());
  ASSERT_TRUE((*client)->AdvanceClock(1).ok());
  ASSERT_TRUE(PsClient::Wait((*client)->PullRows(1, ids, 1, absl::MakeSpan(after)), kWait).ok());
  for (size_t i = 0; i < after.size(); ++i) {
    // Three roundings of 2^-11 each at most: the two pulls and the push.
    EXPECT_NEAR(after[i], before[i] - 0.5f * g[i],
                std::ldexp(std::fabs(before[i]) + std::fabs(g[i]), -10))
        << i;
  }
  const ClientStats st = (*client)->stats();
  EXPECT_EQ(st.bytes_pulled * 2, st.fp32_bytes_pulled);  // rows only: half the bytes
  EXPECT_EQ(st.bytes_pushed * 2, st.fp32_bytes_pushed);
  EXPECT_EQ(st.fp32_bytes_pushed, g.size() * sizeof(float));
  uint64_t shard_in = 0, shard_fp32_in = 0;
  for (int s = 0; s < 2; ++s) {
    auto stats = testing::GetStats(shards_[s]->address(), "job", kWait);
    ASSERT_TRUE(stats.ok());
    shard_in += stats->bytes_in();
    shard_fp32_in += stats->fp32_bytes_in();
  }
  EXPECT_EQ(shard_in * 2, shard_fp32_in);
}

// A shard answers at most 6 MiB of rows to one request: PullRows asks more
// in parts of kMaxRowAskBytes, each its own request, waited on as one. A
// push of a partition's rows past one message travels in pieces, applied
// as one push.
TEST_F(PsClientTest, ManyRowsArePulledAndPushedInParts) {
  StartShards(2);
  constexpr uint64_t kRows = 300000, kDim = 16;  // 18.3 MiB of rows
  TensorSpec table{"emb", kRows * kDim, {kRows, kDim}, true, 1.0f};
  CodecPolicy fp32;  // rows fp32 ([fp16 rows]): exact, and the pieces as counted below
  fp32.default_codec = "none";
  auto map = SplitModel({{"w", 8}, table}, Addresses(), 16384, fp32);
  ASSERT_TRUE(map.ok()) << map.status();
  ASSERT_TRUE(testing::CreateJob(*map, Sgd(0.5f), kWait).ok());
  auto client = PsClient::Connect(*map, Options(1));
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<uint64_t> ids(kRows);
  for (uint64_t i = 0; i < kRows; ++i) ids[i] = kRows - 1 - i;
  ids.push_back(ids[0]);  // a repeat in another part
  std::vector<float> all(ids.size() * kDim);
  const uint64_t answers = (*client)->stats().pull_messages;
  ASSERT_TRUE(PsClient::Wait((*client)->PullRows(1, ids, 0, absl::MakeSpan(all)), kWait).ok());
  const uint64_t per_part = kMaxRowAskBytes / (kDim * sizeof(float));
  const uint64_t parts = (ids.size() + per_part - 1) / per_part;
  ASSERT_EQ(parts, 5u);
  EXPECT_EQ((*client)->stats().pull_messages - answers, parts * 2);  // every part reaches both

  // The same rows asked a part at a time, each under the limit.
  std::vector<float> pieces(all.size());
  for (size_t lo = 0; lo < ids.size(); lo += 50000) {
    const size_t n = std::min<size_t>(50000, ids.size() - lo);
    ASSERT_TRUE(PsClient::Wait((*client)->PullRows(1, absl::MakeConstSpan(ids).subspan(lo, n), 0,
                                                   absl::MakeSpan(pieces).subspan(lo * kDim,
                                                                                  n * kDim)),
                               kWait)
                    .ok());
  }
  EXPECT_EQ(all, pieces);
  EXPECT_TRUE(std::equal(all.begin(), all.begin() + kDim, all.end() - kDim));  // the repeat
  EXPECT_NE(all[0], all[kDim]);

  // 150,000 rows per partition (10.8 MB with their ids) leave as two
  // pieces each, and the clock's update is that of one push.
  ids.pop_back();
  all.resize(ids.size() * kDim);
  std::vector<float> g(ids.size() * kDim);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i % 7) - 3.0f;
  const uint64_t messages = (*client)->stats().push_messages;
  ASSERT_TRUE(PsClient::Wait((*client)->PushRows(1, ids, g, 0), kWait).ok());
  const uint64_t per_piece = kMaxRowPushBytes / (kDim * sizeof(float) + 8);
  ASSERT_EQ(per_piece, 87381u);
  uint64_t pieces_sent = 0;
  for (uint32_t p = 0; p < 2; ++p) {
    uint64_t n = 0;
    for (uint64_t id : ids) n += RowPartition(1, id, 2) == p;
    ASSERT_GT(n, per_piece);
    pieces_sent += (n + per_piece - 1) / per_piece;
  }
  EXPECT_EQ((*client)->stats().push_messages - messages, pieces_sent);
  ASSERT_TRUE((*client)->AdvanceClock(1).ok());
  std::vector<float> after(all.size());
  ASSERT_TRUE(PsClient::Wait((*client)->PullRows(1, ids, 1, absl::MakeSpan(after)), kWait).ok());
  for (size_t i = 0; i < after.size(); ++i) {
    ASSERT_FLOAT_EQ(after[i], all[i] - 0.5f * g[i]) << i;  // SGD, lr 0.5, one member
  }
  for (int s = 0; s < 2; ++s) {
    auto stats = testing::GetStats(shards_[s]->address(), "job", kWait);
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->pushes_applied(), 1u);  // the partition's pieces, as one push
    EXPECT_EQ(stats->pushes_rejected(), 0u);
  }
}

// The connection breaks while a push of rows travels in pieces, nothing
// answered: the client replays every piece on the next stream, and the rows
// change once. (The shard's side, pieces held when a stream ends and a
// replay of applied pieces: ShardProtocolTest.RowsInPieces*.)
TEST_F(PsClientTest, RowPiecesOfABrokenStreamAreReplayedAndAppliedOnce) {
  StartShards(1);
  auto proxy = testing::TcpProxy::Start(shards_[0]->port());
  ASSERT_TRUE(proxy.ok());
  constexpr uint64_t kRows = 200000, kDim = 16;
  TensorSpec table{"emb", kRows * kDim, {kRows, kDim}, true, 1.0f};
  CodecPolicy fp32;  // rows fp32 ([fp16 rows]): exact, and the pieces as counted below
  fp32.default_codec = "none";
  auto map = SplitModel({{"w", 8}, table}, {(*proxy)->address()}, 16384, fp32);
  ASSERT_TRUE(map.ok()) << map.status();
  ASSERT_TRUE(testing::CreateJob(*map, Sgd(0.5f), kWait).ok());
  auto client = PsClient::Connect(*map, Options(1));
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<uint64_t> ids(kRows);
  for (uint64_t i = 0; i < kRows; ++i) ids[i] = i;
  std::vector<float> before(kRows * kDim), g(kRows * kDim);
  ASSERT_TRUE(PsClient::Wait((*client)->PullRows(1, ids, 0, absl::MakeSpan(before)), kWait).ok());
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i % 5) - 2.0f;

  (*proxy)->set_drop_downstream(true);  // no ack, no flow-control window: the push stalls
  PushHandle push = (*client)->PushRows(1, ids, g, 0);
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(PsClient::Wait(push, absl::ZeroDuration()).ok());
  (*proxy)->set_drop_downstream(false);
  (*proxy)->SeverAll();
  ASSERT_TRUE(PsClient::Wait(push, kWait).ok());
  const ClientStats st = (*client)->stats();
  EXPECT_EQ(st.push_messages, 3u);  // 200,000 rows in pieces of 87,381
  EXPECT_GE(st.replayed, 3u);
  EXPECT_GE((*proxy)->connections_accepted(), 2);

  ASSERT_TRUE((*client)->AdvanceClock(1).ok());
  std::vector<float> after(before.size());
  ASSERT_TRUE(PsClient::Wait((*client)->PullRows(1, ids, 1, absl::MakeSpan(after)), kWait).ok());
  for (size_t i = 0; i < after.size(); ++i) {
    ASSERT_FLOAT_EQ(after[i], before[i] - 0.5f * g[i]) << i;
  }
  auto stats = testing::GetStats(shards_[0]->address(), "job", kWait);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->pushes_applied(), 1u);
  EXPECT_EQ(stats->pushes_rejected(), 0u);
}

// Rows asked with the next clock's pull (a row prefetch) travel in its
// requests: one answer per shard for the dense chunks and the rows together,
// the rows those of the closed round. A bad ask fails the pull it rides
// with, so the C ABI asks only what passes these checks.
TEST_F(PsClientTest, TableRowsRideWithTheNextPull) {
  StartShards(2);
  TensorSpec table{"emb", 1000 * 4, {1000, 4}, true, 1.0f};
  auto map = SplitModel({{"w", 8}, table}, Addresses(), 16384);
  ASSERT_TRUE(map.ok()) << map.status();
  ASSERT_TRUE(testing::CreateJob(*map, Sgd(0.5f), kWait).ok());
  ClientOptions options = Options(1);
  // The package's buckets: the clock's pushes leave as one message per shard.
  options.first_bucket_bytes = options.bucket_bytes = 1 << 20;
  auto client = PsClient::Connect(*map, options);
  ASSERT_TRUE(client.ok()) << client.status();
  const std::vector<float> w0(8, 1.0f);
  ASSERT_TRUE((*client)->InitParams({absl::MakeConstSpan(w0), {}}, kWait).ok());
  const std::vector<uint64_t> ids = {3, 500, 999, 3};
  std::vector<float> before(16);
  ASSERT_TRUE(PsClient::Wait((*client)->PullRows(1, ids, 0, absl::MakeSpan(before)), kWait).ok());
  // The ids reach both of the table's partitions, one on each shard.
  std::set<uint32_t> shards;
  for (uint64_t id : ids) shards.insert(RowPartition(1, id, 2));
  ASSERT_EQ(shards.size(), 2u);

  StepLoop loop(client->get(), StepLoopOptions{}, StepLoopHooks{});
  const std::vector<float> zeros(8, 0.0f), g = {1, 2, 3, 4};
  ASSERT_TRUE(loop.Push(0, zeros, 0).ok());
  loop.AddPush(1, (*client)->PushRows(1, {3}, g, 0));
  const uint64_t answers = (*client)->stats().pull_messages;
  std::vector<float> w(8);
  auto rows = std::make_shared<std::vector<float>>(16);
  std::vector<PsClient::RowsAsk> asks;
  asks.push_back(PsClient::RowsAsk{1, ids, absl::MakeSpan(*rows), rows});
  PullHandle rows_pull;
  ASSERT_TRUE(loop.EndClock(0, std::vector<absl::Span<float>>{absl::MakeSpan(w), {}},
                            std::move(asks), &rows_pull)
                  .ok());
  ASSERT_TRUE(rows_pull.valid());
  const uint32_t emb = 1;
  ASSERT_TRUE(PsClient::WaitTensors(rows_pull, absl::MakeConstSpan(&emb, 1), kWait).ok());
  ASSERT_TRUE(loop.WaitTensors({}).ok());
  EXPECT_EQ((*client)->stats().pull_messages - answers, shards.size());  // not one more per table
  for (int j = 0; j < 4; ++j) {
    EXPECT_FLOAT_EQ((*rows)[j], before[j] - 0.5f * g[j]) << j;       // row 3, pushed at clock 0
    EXPECT_FLOAT_EQ((*rows)[12 + j], (*rows)[j]) << j;                // ... asked twice
    EXPECT_FLOAT_EQ((*rows)[4 + j], before[4 + j]) << j;              // row 500: untouched
  }
  EXPECT_FLOAT_EQ(w[0], 1.0f);

  // A bad ask fails its whole pull.
  auto bad = [&](std::vector<PsClient::RowsAsk> a) {
    std::vector<float> dense(8);
    return PsClient::Wait((*client)->PullWithRows(1, {absl::MakeSpan(dense), {}}, std::move(a)),
                          kWait)
        .message();
  };
  std::vector<float> out(8);
  EXPECT_TRUE(absl::StrContains(bad({{1, {1000}, absl::MakeSpan(out).first(4), nullptr}}),
                                "out of range"));
  EXPECT_TRUE(absl::StrContains(bad({{1, {7}, absl::MakeSpan(out).first(4), nullptr},
                                     {1, {8}, absl::MakeSpan(out).last(4), nullptr}}),
                                "asked twice"));
  EXPECT_TRUE(absl::StrContains(bad({{0, {7}, absl::MakeSpan(out).first(4), nullptr}}),
                                "is not a table"));
}

// The policies (sched_getscheduler) of this process's threads named `name`.
std::multiset<int> PoliciesOf(const std::string& name) {
  std::multiset<int> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string got;
    std::getline(comm, got);
    if (got != name) continue;
    out.insert(::sched_getscheduler(std::stoi(task.path().filename().string())));
  }
  return out;
}

// [helper threads]: a shard stream's sender and receiver and the step loop's
// encode thread run as SCHED_BATCH, so they do not preempt the compute
// thread; GRADSTREAM_HELPER_SCHED=normal leaves them SCHED_OTHER.
TEST_F(PsClientTest, HelperThreadsDoNotPreemptTheComputeThread) {
  StartShards(1);
  const ShardMap map = Map("none");
  testing::JobSetup setup = Sgd(0.1f);
  setup.workers = {1, 2};
  ASSERT_TRUE(testing::CreateJob(map, setup, kWait).ok());
  ::setenv("GRADSTREAM_HELPER_SCHED", "normal", 1);
  auto normal = PsClient::Connect(map, Options(2));
  ::unsetenv("GRADSTREAM_HELPER_SCHED");
  auto batch = PsClient::Connect(map, Options(1));
  ASSERT_TRUE(normal.ok() && batch.ok());
  const std::multiset<int> both = {SCHED_OTHER, SCHED_BATCH};
  EXPECT_EQ(PoliciesOf("gs-send-0"), both);
  EXPECT_EQ(PoliciesOf("gs-recv-0"), both);
  EXPECT_TRUE(PoliciesOf("gs-encode").empty());
  const std::vector<std::vector<float>> init = InitValues(map);
  ASSERT_TRUE((*batch)->InitParams(Spans(init), kWait).ok());
  {
    StepLoop loop(batch->get(), StepLoopOptions(), StepLoopHooks());
    ASSERT_TRUE(loop.Push(1, init[1], 0).ok());
    ASSERT_TRUE(loop.WaitPushes(kWait).ok());  // the encode thread ran
    EXPECT_EQ(PoliciesOf("gs-encode"), std::multiset<int>{SCHED_BATCH});
  }
  // The compute thread (the caller's) is left alone.
  EXPECT_EQ(::sched_getscheduler(0), SCHED_OTHER);
}

}  // namespace
}  // namespace gradstream::client
