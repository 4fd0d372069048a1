// Straggler benchmark: clocks per second of BSP vs bounded staleness (SSP)
// when workers are occasionally slow, through real gs_shard processes and the
// real client library on loopback.
//
// Each worker loops pull -> "compute" -> push every tensor -> clock. Compute
// is a sleep of --compute_ms, stretched --straggle_factor times on a random
// --straggle_prob fraction of steps (independently per worker, seeded), the
// straggler model of the research notes (reference: SSP s=3 about 1.7x BSP
// with 8 workers). Sleeping instead of computing keeps the 2 cores free for
// the shards, so the table measures waiting, which is what the modes change.
//
//   straggler_bench [--workers=4] [--steps=200] [--compute_ms=5]
//                   [--straggle_prob=0.05] [--straggle_factor=10] [--staleness=3]
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "worker/client/ps_client.h"
#include "worker/client/testing/shard_process.h"

ABSL_FLAG(int, workers, 4, "workers");
ABSL_FLAG(int, shards, 2, "shards");
ABSL_FLAG(int, steps, 200, "clocks per worker");
ABSL_FLAG(int, compute_ms, 5, "normal step compute time");
ABSL_FLAG(double, straggle_prob, 0.05, "probability that a step is slow");
ABSL_FLAG(double, straggle_factor, 10, "how much slower a slow step is");
ABSL_FLAG(int, staleness, 3, "SSP bound");
ABSL_FLAG(int, model_elems, 1 << 18, "parameters (4 tensors)");
ABSL_FLAG(std::string, shard_binary, GS_SHARD_BINARY, "gs_shard binary");

namespace gradstream {
namespace {

using client::PsClient;

struct Outcome {
  double seconds = 0;
  uint64_t max_staleness = 0;
  absl::Status status;
};

Outcome RunMode(const ShardMap& map, v1::ConsistencyMode mode, uint32_t staleness,
                const std::string& job_id) {
  Outcome out;
  const int workers = absl::GetFlag(FLAGS_workers);
  client::testing::JobSetup setup;
  setup.job_id = job_id;
  setup.optimizer.set_type("sgd");
  setup.optimizer.set_learning_rate(0.01f);
  setup.consistency.set_mode(mode);
  setup.consistency.set_staleness(staleness);
  setup.workers.clear();
  for (int w = 1; w <= workers; ++w) setup.workers.push_back(w);
  if (auto s = client::testing::CreateJob(map, setup, absl::Seconds(10)); !s.ok()) {
    out.status = s.status();
    return out;
  }
  std::vector<std::unique_ptr<PsClient>> clients;
  for (int w = 1; w <= workers; ++w) {
    client::ClientOptions opt;
    opt.job_id = job_id;
    opt.worker_id = w;
    opt.codec.default_codec = "twobit";
    auto c = PsClient::Connect(map, opt);
    if (!c.ok()) {
      out.status = c.status();
      return out;
    }
    clients.push_back(std::move(*c));
  }
  const int steps = absl::GetFlag(FLAGS_steps);
  const absl::Duration compute = absl::Milliseconds(absl::GetFlag(FLAGS_compute_ms));
  const double prob = absl::GetFlag(FLAGS_straggle_prob);
  const double factor = absl::GetFlag(FLAGS_straggle_factor);
  std::vector<absl::Status> errors(workers);
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      PsClient* c = clients[w].get();
      std::mt19937_64 rng(1000 + w);  // same straggles in both modes
      std::bernoulli_distribution slow(prob);
      std::vector<std::vector<float>> params, grads;
      for (const auto& t : map.tensors) {
        params.emplace_back(t.num_elems);
        grads.emplace_back(t.num_elems, 0.01f);
      }
      if (w == 0) {
        std::vector<absl::Span<const float>> init(params.begin(), params.end());
        if (auto s = c->InitParams(init, absl::Seconds(30)); !s.ok()) errors[w] = s;
      }
      for (int clock = 0; clock < steps && errors[w].ok(); ++clock) {
        std::vector<absl::Span<float>> dst(params.begin(), params.end());
        if (auto s = PsClient::Wait(c->Pull(clock, std::move(dst)), absl::Seconds(60)); !s.ok()) {
          errors[w] = s;
          break;
        }
        absl::SleepFor(slow(rng) ? compute * factor : compute);
        std::vector<client::PushHandle> h;
        for (uint32_t t = 0; t < grads.size(); ++t) h.push_back(c->Push(t, grads[t], clock));
        for (auto& x : h) {
          if (auto s = PsClient::Wait(x, absl::Seconds(60)); !s.ok()) errors[w] = s;
        }
        if (auto s = c->AdvanceClock(clock + 1); !s.ok()) errors[w] = s;
      }
      (void)c->Leave(absl::Seconds(10));
    });
  }
  for (auto& t : threads) t.join();
  out.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  for (const auto& e : errors) {
    if (!e.ok() && out.status.ok()) out.status = e;
  }
  for (const auto& addr : map.shards) {
    auto st = client::testing::GetStats(addr, job_id, absl::Seconds(5));
    if (st.ok()) out.max_staleness = std::max<uint64_t>(out.max_staleness, st->max_staleness());
  }
  return out;
}

int Main() {
  std::vector<std::unique_ptr<client::testing::ShardProcess>> shards;
  std::vector<std::string> addresses;
  for (int i = 0; i < absl::GetFlag(FLAGS_shards); ++i) {
    auto s = client::testing::ShardProcess::Start(absl::GetFlag(FLAGS_shard_binary), {});
    if (!s.ok()) {
      std::fprintf(stderr, "shard: %s\n", s.status().ToString().c_str());
      return 1;
    }
    addresses.push_back((*s)->address());
    shards.push_back(std::move(*s));
  }
  const int n = absl::GetFlag(FLAGS_model_elems) / 4;
  std::vector<TensorSpec> tensors;
  for (int t = 0; t < 4; ++t) tensors.push_back({absl::StrCat("t", t), int64_t{n}});
  CodecPolicy twobit;  // what the bench measures, as its clients' policy says
  twobit.default_codec = "twobit";
  auto map = SplitModel(tensors, addresses, kMaxChunkElems, twobit);
  if (!map.ok()) {
    std::fprintf(stderr, "map: %s\n", map.status().ToString().c_str());
    return 1;
  }
  const int steps = absl::GetFlag(FLAGS_steps);
  const uint32_t s = absl::GetFlag(FLAGS_staleness);
  std::printf(
      "straggler_bench: %d workers, %d shards, %d clocks, compute %d ms, %.0f%% of steps %.0fx "
      "slower\n\n",
      absl::GetFlag(FLAGS_workers), absl::GetFlag(FLAGS_shards), steps,
      absl::GetFlag(FLAGS_compute_ms), 100 * absl::GetFlag(FLAGS_straggle_prob),
      absl::GetFlag(FLAGS_straggle_factor));
  std::printf("%-14s %10s %12s %14s %10s\n", "mode", "seconds", "clocks/s", "max staleness",
              "vs BSP");
  const Outcome bsp = RunMode(*map, v1::SYNC, 0, "bsp");
  const Outcome ssp = RunMode(*map, v1::BOUNDED, s, "ssp");
  for (const auto& [name, o] : {std::pair<std::string, Outcome>{"BSP", bsp},
                                {absl::StrCat("SSP s=", s), ssp}}) {
    if (!o.status.ok()) {
      std::printf("%-14s failed: %s\n", name.c_str(), o.status.ToString().c_str());
      continue;
    }
    std::printf("%-14s %10.2f %12.1f %14llu %9.2fx\n", name.c_str(), o.seconds, steps / o.seconds,
                static_cast<unsigned long long>(o.max_staleness), bsp.seconds / o.seconds);
  }
  return bsp.status.ok() && ssp.status.ok() ? 0 : 1;
}

}  // namespace
}  // namespace gradstream

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gradstream::Main();
}
