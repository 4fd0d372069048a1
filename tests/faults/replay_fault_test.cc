// Exactly-once pushes under a flaky network, end to end: two PsClients (the
// workers' client library) train a sync job on a real gs_shard through a TCP
// proxy that the test cuts again and again — with the shard's acks lost
// (every push applied, then replayed), in the middle of a push, and while a
// pull is parked. The shard must apply every (worker, clock, chunk) exactly
// once: its counters, its sync-round records and the parameters themselves
// must equal one application of each push, and the duplicates it reports
// prove that replays of applied pushes really reached it.
//
// worker/client/ps_client_test.cc (LostAckIsReplayedAndAppliedOnce) checks
// one lost ack on one clock; this runs many clocks, two workers and three
// kinds of cuts, and checks the parameters after every clock.
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "worker/client/ps_client.h"
#include "worker/client/testing/shard_process.h"
#include "worker/client/testing/tcp_proxy.h"

namespace gradstream::client {
namespace {

using testing::ShardProcess;
using testing::TcpProxy;

constexpr absl::Duration kWait = absl::Seconds(20);
constexpr int kClocks = 48;
constexpr float kLearningRate = 0.1f;
constexpr uint64_t kWorkers[] = {1, 2};

// Small enough that everything both workers push in one clock fits the
// HTTP/2 flow-control window: while the proxy drops what the shard sends,
// window updates are lost too, and a larger push would stall.
const std::vector<TensorSpec> kModel = {{"w", 6000}, {"b", 10}};
constexpr uint32_t kChunkElems = 1024;  // 6 + 1 chunks

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

using Params = std::vector<std::vector<float>>;

std::vector<absl::Span<float>> Spans(Params& p) {
  std::vector<absl::Span<float>> s;
  for (auto& t : p) s.emplace_back(t);
  return s;
}

// Elements of `got` further than fp32 rounding from `want`; a push applied
// twice, or lost, moves them by about kLearningRate / 2.
int Mismatches(const Params& got, const Params& want, std::string* first) {
  int bad = 0;
  for (size_t t = 0; t < want.size(); ++t) {
    for (size_t i = 0; i < want[t].size(); ++i) {
      if (std::fabs(got[t][i] - want[t][i]) > 1e-4f * std::max(1.0f, std::fabs(want[t][i]))) {
        if (bad++ == 0) {
          *first = "tensor " + std::to_string(t) + "[" + std::to_string(i) +
                   "] = " + std::to_string(got[t][i]) + ", want " + std::to_string(want[t][i]);
        }
      }
    }
  }
  return bad;
}

enum class Cut {
  kNone,        // a clean clock
  kLostAcks,    // every push is applied, its ack dropped, then the link cut
  kMidPush,     // cut between the tensors of a push
  kParkedPull,  // cut while one worker's pull waits for the other's push
};

TEST(Faults, ReplayedPushesAppliedExactlyOnceUnderReconnects) {
  auto shard = ShardProcess::Start(GS_SHARD_BINARY, {"--executor_threads=2"});
  ASSERT_TRUE(shard.ok()) << shard.status();
  auto proxy_or = TcpProxy::Start((*shard)->port());
  ASSERT_TRUE(proxy_or.ok()) << proxy_or.status();
  TcpProxy& proxy = **proxy_or;
  const std::string direct = (*shard)->address();  // for stats, past the proxy

  CodecPolicy policy;
  policy.default_codec = "none";
  auto map = SplitModel(kModel, {proxy.address()}, kChunkElems, policy);
  ASSERT_TRUE(map.ok()) << map.status();
  const uint64_t chunks = map->chunks.size();
  testing::JobSetup setup;
  setup.optimizer.set_type("sgd");
  setup.optimizer.set_learning_rate(kLearningRate);
  setup.consistency.set_mode(v1::SYNC);
  setup.workers = {kWorkers[0], kWorkers[1]};
  ASSERT_TRUE(testing::CreateJob(*map, setup, kWait).ok());

  std::vector<std::unique_ptr<PsClient>> clients;
  for (uint64_t w : kWorkers) {
    ClientOptions o;
    o.job_id = setup.job_id;
    o.worker_id = w;
    o.incarnation = 1;
    o.epoch = 1;
    o.rpc_deadline = absl::Seconds(5);
    o.connect_deadline = absl::Seconds(10);
    o.reconnect.initial_backoff = absl::Milliseconds(5);
    o.reconnect.max_backoff = absl::Milliseconds(100);
    auto c = PsClient::Connect(*map, o);
    ASSERT_TRUE(c.ok()) << c.status();
    clients.push_back(*std::move(c));
  }

  Params expected;
  for (const TensorSpec& t : kModel) {
    expected.push_back(Random(t.num_elems, 1000 + expected.size()));
  }
  {
    std::vector<absl::Span<const float>> init(expected.begin(), expected.end());
    ASSERT_TRUE(clients[0]->InitParams(init, kWait).ok());
  }

  int cuts = 0;
  auto applied = [&]() -> uint64_t {
    auto s = testing::GetStats(direct, setup.job_id, kWait);
    return s.ok() ? s->pushes_applied() : 0;
  };
  for (int clock = 0; clock < kClocks; ++clock) {
    const Cut cut = static_cast<Cut>(clock % 4);
    // grads[w][t]: worker w's gradient of tensor t at this clock.
    std::vector<Params> grads(2);
    for (int w = 0; w < 2; ++w) {
      for (size_t t = 0; t < kModel.size(); ++t) {
        grads[w].push_back(Random(kModel[t].num_elems, 7919 * clock + 97 * w + t));
      }
    }
    std::vector<PushHandle> pushes;
    auto push = [&](int w, size_t t) {
      pushes.push_back(clients[w]->Push(static_cast<uint32_t>(t), grads[w][t], clock));
    };
    std::vector<Params> pulled(2);
    std::vector<PullHandle> pulls(2);
    auto pull = [&](int w) {
      for (const TensorSpec& t : kModel) pulled[w].emplace_back(t.num_elems, -1.0f);
      pulls[w] = clients[w]->Pull(clock + 1, Spans(pulled[w]));
    };

    switch (cut) {
      case Cut::kNone:
        for (int w = 0; w < 2; ++w) {
          for (size_t t = 0; t < kModel.size(); ++t) push(w, t);
        }
        break;
      case Cut::kLostAcks: {
        const uint64_t before = applied();
        proxy.set_drop_downstream(true);
        for (int w = 0; w < 2; ++w) {
          for (size_t t = 0; t < kModel.size(); ++t) push(w, t);
        }
        // The shard applies every push (read past the proxy) ...
        const absl::Time end = absl::Now() + kWait;
        uint64_t now = before;
        while ((now = applied()) < before + 2 * chunks && absl::Now() < end) {
          absl::SleepFor(absl::Milliseconds(2));
        }
        ASSERT_EQ(now, before + 2 * chunks) << "clock " << clock;
        // ... but no ack got through, so the clients must replay them all.
        for (const PushHandle& h : pushes) {
          ASSERT_EQ(PsClient::Wait(h, absl::ZeroDuration()).code(),
                    absl::StatusCode::kDeadlineExceeded);
        }
        proxy.set_drop_downstream(false);
        proxy.SeverAll();
        ++cuts;
        break;
      }
      case Cut::kMidPush:
        push(0, 0);
        proxy.SeverAll();
        push(1, 0);
        push(0, 1);
        proxy.SeverAll();
        push(1, 1);
        cuts += 2;
        break;
      case Cut::kParkedPull:
        for (size_t t = 0; t < kModel.size(); ++t) push(0, t);
        for (const PushHandle& h : pushes) ASSERT_TRUE(PsClient::Wait(h, kWait).ok());
        ASSERT_TRUE(clients[0]->AdvanceClock(clock + 1).ok());
        pull(0);  // waits on the shard for worker 2's pushes
        proxy.SeverAll();
        ++cuts;
        for (size_t t = 0; t < kModel.size(); ++t) push(1, t);
        break;
    }
    for (const PushHandle& h : pushes) {
      const absl::Status s = PsClient::Wait(h, kWait);
      ASSERT_TRUE(s.ok()) << "clock " << clock << ": " << s;
    }
    for (int w = 0; w < 2; ++w) {
      if (pulls[w].valid()) continue;
      ASSERT_TRUE(clients[w]->AdvanceClock(clock + 1).ok());
      pull(w);
    }
    // One application of the average of the two workers' gradients.
    for (size_t t = 0; t < kModel.size(); ++t) {
      for (size_t i = 0; i < expected[t].size(); ++i) {
        expected[t][i] -= kLearningRate * ((grads[0][t][i] + grads[1][t][i]) * 0.5f);
      }
    }
    for (int w = 0; w < 2; ++w) {
      const absl::Status s = PsClient::Wait(pulls[w], kWait);
      ASSERT_TRUE(s.ok()) << "clock " << clock << " worker " << kWorkers[w] << ": " << s;
      std::string first;
      ASSERT_EQ(Mismatches(pulled[w], expected, &first), 0)
          << "after clock " << clock << " (worker " << kWorkers[w] << " pulled): " << first;
    }
  }

  auto stats = testing::GetStats(direct, setup.job_id, kWait, /*include_rounds=*/true);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ClientStats cs[2] = {clients[0]->stats(), clients[1]->stats()};
  const uint64_t reconnects = cs[0].reconnects + cs[1].reconnects;
  const uint64_t replayed = cs[0].replayed + cs[1].replayed;
  const uint64_t duplicate_acks = cs[0].duplicate_acks + cs[1].duplicate_acks;
  std::printf("replay: %d clocks x 2 workers x %llu chunks, %d cuts (%d connections accepted):"
              " %llu reconnects, %llu messages replayed, %llu duplicate pushes ignored;"
              " %llu pushes applied\n",
              kClocks, static_cast<unsigned long long>(chunks), cuts, proxy.connections_accepted(),
              static_cast<unsigned long long>(reconnects),
              static_cast<unsigned long long>(replayed),
              static_cast<unsigned long long>(stats->pushes_duplicate()),
              static_cast<unsigned long long>(stats->pushes_applied()));
  std::fflush(stdout);

  // Exactly once, by the shard's own counts.
  EXPECT_EQ(stats->pushes_applied(), uint64_t{kClocks} * 2 * chunks);
  EXPECT_EQ(stats->pushes_rejected(), 0u);
  EXPECT_EQ(stats->min_version(), uint64_t{kClocks});
  EXPECT_EQ(stats->max_version(), uint64_t{kClocks});
  // Replays of applied pushes really happened: at least every push of every
  // lost-ack clock came back, and the clients saw each one acked duplicate.
  EXPECT_GE(stats->pushes_duplicate(), uint64_t{kClocks / 4} * 2 * chunks);
  EXPECT_EQ(stats->pushes_duplicate(), duplicate_acks);
  // A lost-ack cut always hits two live connections (a second cut right
  // after another may find a client still reconnecting).
  EXPECT_GE(reconnects, 2u * (kClocks / 4));
  EXPECT_GT(replayed, stats->pushes_duplicate());
  // Every (chunk, clock) was one round with both workers in it, once.
  std::map<std::pair<uint64_t, uint64_t>, int> rounds;
  for (const auto& r : stats->rounds()) {
    const std::set<uint64_t> who(r.contributors().begin(), r.contributors().end());
    EXPECT_EQ(who, (std::set<uint64_t>{kWorkers[0], kWorkers[1]}))
        << "chunk " << r.chunk_id() << " clock " << r.clock();
    EXPECT_EQ(r.contributors_size(), 2);
    ++rounds[{r.chunk_id(), r.clock()}];
  }
  EXPECT_EQ(rounds.size(), uint64_t{kClocks} * chunks);
  for (const auto& [key, n] : rounds) {
    EXPECT_EQ(n, 1) << "chunk " << key.first << " clock " << key.second << " applied " << n
                    << " times";
  }
  for (auto& c : clients) EXPECT_TRUE(c->Leave(kWait).ok());
}

}  // namespace
}  // namespace gradstream::client
