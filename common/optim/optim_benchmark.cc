// Server apply throughput: fused decode(twobit) + AdaGrad next to memcpy of
// the same buffer in the same binary. Rates count the fp32-equivalent gradient
// (4 bytes per element) for the fused apply and the copied bytes for memcpy;
// `ratio_vs_memcpy` is the headline number (target >= 0.3).
//   build-shard/common/optim/optim_benchmark   (or the path ninja prints)
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/optim/optimizer.h"

namespace gradstream {
namespace {

std::string RandomTwoBitPayload(size_t n) {
  std::mt19937 rng(1);
  std::string payload((n + 3) / 4, 0);
  for (auto& b : payload) {
    uint8_t v = 0;
    for (int k = 0; k < 4; ++k) v |= static_cast<uint8_t>(rng() % 3) << (2 * k);
    b = static_cast<char>(v);
  }
  return payload;
}

void BM_Memcpy(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  std::vector<float> src(n, 1.0f), dst(n, 0.0f);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(state.iterations()) * n * sizeof(float);
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}

// kChecked: every update takes the checked path of [finite apply] (out of
// place, then swapped in), as a push whose bounds come near FLT_MAX does;
// otherwise the fast, in-place path that normal training takes.
template <OptimizerType kType, CodecType kCodec, bool kChecked = false>
void BM_FusedApply(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  OptimizerOptions o;
  o.type = kType;
  o.learning_rate = 1e-4f;
  Optimizer opt = *Optimizer::Create(o);
  std::vector<float> params(n, 0.5f);
  OptimizerState st = opt.NewState(n);
  ChunkHeader h;
  h.codec = kCodec;
  h.num_elems = static_cast<uint32_t>(n);
  h.scale = 0.5f;
  std::string payload;
  if (kCodec == CodecType::kNone) {
    payload.assign(n * sizeof(float), 0);
    std::vector<float> g(n, 0.25f);
    std::memcpy(payload.data(), g.data(), payload.size());
  } else if (kCodec == CodecType::kOneBit) {
    h.scale2 = -0.5f;
    payload = RandomTwoBitPayload(n).substr(0, (n + 7) / 8);  // any bits are valid
  } else if (kCodec == CodecType::kTernary512) {  // a scale per block, then the codes
    h.scale = 0.0f;
    const size_t blocks = (n + kTernaryScaleBlock - 1) / kTernaryScaleBlock;
    for (size_t b = 0; b < blocks; ++b) {
      const float scale = 0.5f + 0.001f * static_cast<float>(b % 7);
      payload.append(reinterpret_cast<const char*>(&scale), sizeof scale);
    }
    payload += RandomTwoBitPayload(n);
  } else {
    payload = RandomTwoBitPayload(n);
  }
  for (auto _ : state) {
    if (kChecked) st.params_bound = 1e38;  // as if near FLT_MAX: the checked path
    absl::Status s = opt.ApplyEncoded(h, payload, 1.0f / 3.0f, &params, &st);
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    benchmark::DoNotOptimize(params.data());
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(state.iterations()) * n * sizeof(float);
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}

// Collects the memcpy and fused AdaGrad/twobit rates per element count and
// prints their ratio after the usual table.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred) continue;
      auto it = r.counters.find("bytes_per_second");
      if (it == r.counters.end()) continue;
      const std::string& fn = r.run_name.function_name;
      // Rates by CPU time too: on a shared machine wall time includes waiting.
      const double cpu_factor =
          r.cpu_accumulated_time > 0 ? r.real_accumulated_time / r.cpu_accumulated_time : 0.0;
      if (fn == "BM_Memcpy") {
        memcpy_[r.run_name.args] = it->second.value;
        memcpy_cpu_[r.run_name.args] = it->second.value * cpu_factor;
      }
      if (fn.find("BM_FusedApply") == 0 && fn.find("kAdaGrad") != std::string::npos &&
          fn.find("kTwoBit") != std::string::npos && fn.find("true") == std::string::npos) {
        fused_[r.run_name.args] = it->second.value;
        fused_cpu_[r.run_name.args] = it->second.value * cpu_factor;
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    for (const auto& [args, fused] : fused_) {
      auto m = memcpy_.find(args);
      if (m == memcpy_.end() || m->second <= 0) continue;
      const double fc = fused_cpu_[args], mc = memcpy_cpu_[args];
      std::printf(
          "elems=%s: fused decode(twobit)+AdaGrad %.2f GB/s (fp32-equivalent), memcpy %.2f GB/s,"
          " ratio %.2fx memcpy (target >= 0.30x); by CPU time %.2f vs %.2f GB/s, ratio %.2fx\n",
          args.c_str(), fused / 1e9, m->second / 1e9, fused / m->second, fc / 1e9, mc / 1e9,
          mc > 0 ? fc / mc : 0.0);
    }
  }

 private:
  std::map<std::string, double> memcpy_, fused_, memcpy_cpu_, fused_cpu_;
};

constexpr int64_t kElems = 16 << 20;  // 64 MiB of fp32: a full model, out of cache

BENCHMARK(BM_Memcpy)->Arg(kElems)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_FusedApply, OptimizerType::kAdaGrad, CodecType::kTwoBit)
    ->Arg(kElems)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_FusedApply, OptimizerType::kAdaGrad, CodecType::kTernary)
    ->Arg(kElems)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_FusedApply, OptimizerType::kAdaGrad, CodecType::kNone)
    ->Arg(kElems)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_FusedApply, OptimizerType::kAdaGrad, CodecType::kOneBit)
    ->Arg(kElems)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_FusedApply, OptimizerType::kMomentum, CodecType::kTwoBit)
    ->Arg(kElems)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_FusedApply, OptimizerType::kAdam, CodecType::kTwoBit)
    ->Arg(kElems)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_FusedApply, OptimizerType::kAdaGrad, CodecType::kTwoBit, true)
    ->Arg(kElems)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// In-cache size: one 1 MiB chunk, as the shard applies it.
BENCHMARK(BM_Memcpy)->Arg(1 << 18)->UseRealTime();
BENCHMARK_TEMPLATE(BM_FusedApply, OptimizerType::kAdaGrad, CodecType::kTwoBit)
    ->Arg(1 << 18)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_FusedApply, OptimizerType::kAdaGrad, CodecType::kTwoBit, true)
    ->Arg(1 << 18)
    ->UseRealTime();
// The defaults' push (ternary512) into the bench's optimizer, as a shard applies a chunk.
BENCHMARK_TEMPLATE(BM_FusedApply, OptimizerType::kMomentum, CodecType::kTernary512)
    ->Arg(1 << 18)
    ->UseRealTime();

}  // namespace
}  // namespace gradstream

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  gradstream::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
