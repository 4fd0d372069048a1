// A shard's work per row of a table (docs/design/sparse-tables.md): a sync
// round of row pushes summed and applied, and the rows of pulls read, on a
// partition that already holds a million rows, with the click-through
// bench's power-law ids. Counters are rows per second.
//   build/server/shard/row_store_benchmark
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "benchmark/benchmark.h"
#include "common/optim/optimizer.h"
#include "glog/logging.h"
#include "server/shard/row_store.h"

namespace gradstream::shard {
namespace {

constexpr uint64_t kTableRows = uint64_t{1} << 22;
constexpr uint32_t kDim = 16;
constexpr int kWorkers = 8;         // pushes per round
constexpr size_t kRowsPerPush = 3400;
constexpr int kBatches = 16;         // distinct id sets the iterations cycle through

TableSpec Spec() {
  TableSpec s;
  s.table_rows = kTableRows;
  s.dim = kDim;
  s.init_std = 0.01f;
  s.seed = 1;
  return s;
}

// Unique ids of one worker's batch: p(k) ~ (k+1)^-1.1, k scrambled over the
// table as the bench's hashed fields are; sorted, as the client sends them.
std::vector<uint64_t> Batch(std::mt19937_64& rng, size_t n) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double tail = 1.0 - std::pow(double(kTableRows) + 1.0, -0.1);
  absl::flat_hash_set<uint64_t> seen;
  std::vector<uint64_t> ids;
  while (ids.size() < n) {
    const double x = std::pow(1.0 - u(rng) * tail, -10.0);
    const uint64_t k = std::min<uint64_t>(static_cast<uint64_t>(x) - 1, kTableRows - 1);
    const uint64_t id = (k * 0x9E3779B97F4A7C15ull) % kTableRows;
    if (seen.insert(id).second) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

struct Fixture {
  Fixture() : optimizer(*Optimizer::Create(Options())), state(optimizer.NewState(0)),
              store(Spec(), optimizer) {
    std::mt19937_64 rng(7);
    for (int b = 0; b < kBatches * kWorkers; ++b) batches.push_back(Batch(rng, kRowsPerPush));
    grads.resize(kRowsPerPush * kDim);
    std::normal_distribution<float> g(0.0f, 1e-3f);
    for (float& v : grads) v = g(rng);
    // A million rows held before the clock: most reads miss the cache.
    std::vector<uint64_t> warm(uint64_t{1} << 20);
    for (size_t i = 0; i < warm.size(); ++i) warm[i] = (i * 0x9E3779B97F4A7C15ull) % kTableRows;
    PulledRows out;
    ReadRows(warm, /*fp16=*/false, &store, &out);
  }
  static OptimizerOptions Options() {
    OptimizerOptions o;
    o.type = OptimizerType::kAdaGrad;
    o.learning_rate = 0.3f;
    return o;
  }
  Optimizer optimizer;
  OptimizerState state;
  RowStore store;
  std::vector<std::vector<uint64_t>> batches;
  std::vector<float> grads;
};

Fixture& Shared() {
  static Fixture* f = new Fixture;
  return *f;
}

// kWorkers pushes checked and summed into a round, then the round applied.
void BM_SyncRound(benchmark::State& state) {
  Fixture& f = Shared();
  const std::string values(reinterpret_cast<const char*>(f.grads.data()),
                           f.grads.size() * sizeof(float));
  int b = 0;
  size_t rows = 0;
  for (auto _ : state) {
    RowSum sum;
    for (int w = 0; w < kWorkers; ++w) {
      const std::vector<uint64_t>& ids = f.batches[(b * kWorkers + w) % f.batches.size()];
      RowGrads g;
      g.ids = ids;
      g.values = values;
      CHECK(CheckRowGrads(f.store, g).ok());
      CHECK(AddRows(g, kDim, &sum).ok());
      rows += ids.size();
    }
    CHECK(ApplyRowSum(f.optimizer, sum, 1.0f / kWorkers, &f.store, &f.state).ok());
    b = (b + 1) % kBatches;
  }
  state.counters["pushed_rows_per_s"] =
      benchmark::Counter(static_cast<double>(rows), benchmark::Counter::kIsRate);
}

// The rows of kWorkers pulls, fp16 (the defaults) or fp32.
void BM_ReadRows(benchmark::State& state) {
  Fixture& f = Shared();
  const bool fp16 = state.range(0) != 0;
  int b = 0;
  size_t rows = 0;
  for (auto _ : state) {
    for (int w = 0; w < kWorkers; ++w) {
      const std::vector<uint64_t>& ids = f.batches[(b * kWorkers + w) % f.batches.size()];
      PulledRows out;
      ReadRows(ids, fp16, &f.store, &out);
      benchmark::DoNotOptimize(out.values.data());
      rows += ids.size();
    }
    b = (b + 1) % kBatches;
  }
  state.counters["read_rows_per_s"] =
      benchmark::Counter(static_cast<double>(rows), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_SyncRound)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReadRows)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gradstream::shard

BENCHMARK_MAIN();
