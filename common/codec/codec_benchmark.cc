// Codec throughput, single thread, as GB/s of fp32 gradient and as a ratio to
// memcpy of the same buffer measured in this same binary (the machines are
// shared and noisy; only the ratio is comparable across runs).
//
//   ./codec_benchmark --benchmark_counters_tabular=true
//
// Counters: GB/s = fp32 bytes per second; x_memcpy = that rate / memcpy rate,
// paired per iteration (see RunPaired; memcpy counted as bytes copied, payload
// once). With a CUDA device the GPU
// rows compare against a device-to-device cudaMemcpy of the same size (x_d2d;
// see BM_GpuEncodeResidual).
#include <benchmark/benchmark.h>

#include <time.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <random>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/cuda_codec.h"
#include "common/codec/published.h"
#include "common/codec/registry.h"
#include "common/job/shard_map.h"

#ifdef GS_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace gradstream {
namespace {

std::vector<float> Grad(size_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 0.3f);
  std::vector<float> g(n);
  for (auto& x : g) x = d(rng);
  return g;
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Every CPU row is paired with its baseline: each iteration copies the same
// n floats with memcpy and then runs the operation once, both timed on this
// thread's CPU clock (time spent descheduled on a shared machine does not
// count), and x_memcpy is the median of the per-iteration ratios
// memcpy_time / op_time (= op GB/s / memcpy GB/s, both counted as fp32
// gradient bytes). Neighbours' noise hits both halves of a pair alike.
// `prepare`, untimed, runs before each pair.
template <typename Op, typename Prepare>
void RunPaired(benchmark::State& state, size_t n, Op op, Prepare prepare) {
  std::vector<float> a(n, 1.0f), b(n, 0.0f);
  std::memcpy(b.data(), a.data(), n * 4);  // fault the pages in first
  std::vector<double> ratios;
  double op_seconds = 0;
  for (auto _ : state) {
    prepare();
    const double t0 = ThreadCpuSeconds();
    std::memcpy(b.data(), a.data(), n * 4);
    benchmark::ClobberMemory();
    const double t1 = ThreadCpuSeconds();
    if (!op()) {
      state.SkipWithError("operation failed");
      return;
    }
    const double t2 = ThreadCpuSeconds();
    state.SetIterationTime(t2 - t1);
    op_seconds += t2 - t1;
    ratios.push_back((t1 - t0) / (t2 - t1));
  }
  if (ratios.empty()) return;
  std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
  const double bytes = static_cast<double>(state.iterations()) * n * 4;
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.counters["GB/s"] = bytes / 1e9 / op_seconds;
  state.counters["x_memcpy"] = ratios[ratios.size() / 2];
}
template <typename Op>
void RunPaired(benchmark::State& state, size_t n, Op op) {
  RunPaired(state, n, op, [] {});
}

void BM_Memcpy(benchmark::State& state) {  // the pairing itself: x_memcpy ~ 1
  const size_t n = state.range(0);
  std::vector<float> a(n, 1.0f), b(n);
  RunPaired(state, n, [&] {
    std::memcpy(b.data(), a.data(), n * 4);
    benchmark::ClobberMemory();
    return true;
  });
}

const char* const kCodecs[] = {"none", "twobit", "ternary", "onebit", "fp16", "int8", "int4",
                              "ternary512"};
constexpr int kNumHostCodecs = std::size(kCodecs);

// Encodes an n-element gradient as the worker does: in chunks of at most
// `chunk` elements, one encoder (and residual) per chunk.
void EncodeRows(benchmark::State& state, bool error_feedback) {
  const char* name = kCodecs[state.range(0)];
  const size_t n = state.range(1);
  const size_t chunk = state.range(2);
  std::vector<std::unique_ptr<Codec>> encoders;
  for (size_t off = 0; off < n; off += chunk) {
    encoders.push_back(*MakeChunkEncoder(name, {}, error_feedback, std::min(chunk, n - off)));
  }
  const auto g = Grad(n);
  ChunkHeader h;
  std::string p;
  uint32_t clock = 0;
  RunPaired(state, n, [&] {
    ++clock;
    for (size_t c = 0; c < encoders.size(); ++c) {
      const size_t off = c * chunk;
      const auto part = absl::MakeConstSpan(g).subspan(off, std::min(chunk, n - off));
      const EncodeKey key{.seed = 1, .clock = clock, .chunk = static_cast<uint32_t>(c)};
      if (!encoders[c]->Encode(part, key, &h, &p).ok()) return false;
      benchmark::DoNotOptimize(p.data());
    }
    return true;
  });
  state.SetLabel(name);
}

// Encode with error feedback (the worker's hot path).
void BM_EncodeResidual(benchmark::State& state) { EncodeRows(state, /*error_feedback=*/true); }

// Encode without residual (ternary without EF is TernGrad's default).
void BM_Encode(benchmark::State& state) { EncodeRows(state, /*error_feedback=*/false); }

// Validate + decode + accumulate (the server's hot path).
void BM_DecodeAdd(benchmark::State& state) {
  const char* name = kCodecs[state.range(0)];
  const size_t n = state.range(1);
  auto enc = MakeChunkEncoder(name, {}, false, n);
  const auto g = Grad(n);
  ChunkHeader h;
  std::string p;
  if (!(*enc)->Encode(g, {}, &h, &p).ok()) state.SkipWithError("encode");
  std::vector<float> acc(n, 0.0f);
  RunPaired(state, n, [&] {
    if (!DecodeAdd(h, p, absl::MakeSpan(acc), 0.25f).ok()) return false;
    benchmark::DoNotOptimize(acc.data());
    return true;
  });
  state.SetLabel(name);
}

// A shard's publish of one pull chunk ([fused publish]): d = params - copy
// encoded, then copy += decoded(d) and its checksum, as every step of a
// compressed pull does; params move a little between iterations.
void BM_Publish(benchmark::State& state) {
  const char* name = kCodecs[state.range(0)];
  const size_t n = state.range(1);
  auto publisher = DeltaPublisher::Create(*CodecTypeFromName(name), n);
  if (!publisher.ok()) return state.SkipWithError("no publisher");
  std::vector<float> params = Grad(n), copy(n, 0.0f);
  const auto step = Grad(n);
  ChunkHeader h;
  std::string p;
  uint32_t clock = 0;
  RunPaired(state, n, [&] {
    ++clock;
    for (size_t i = 0; i < n; i += 64) params[i] += 1e-3f * step[i];
    return (*publisher)->Publish(params, {.seed = 1, .clock = clock}, absl::MakeSpan(copy), &h, &p)
        .ok();
  });
  state.SetLabel(name);
}

// BM_Publish over `chunks` chunks of n elements in turn, 64 MiB of params
// and copies at 32 chunks: each publish finds its chunk out of cache, as a
// shard publishing a large model's step does. Per chunk.
void BM_PublishCold(benchmark::State& state) {
  const char* name = kCodecs[state.range(0)];
  const size_t n = state.range(1), chunks = state.range(2);
  std::vector<std::unique_ptr<DeltaPublisher>> publishers;
  std::vector<std::vector<float>> params, copies;
  for (size_t c = 0; c < chunks; ++c) {
    auto publisher = DeltaPublisher::Create(*CodecTypeFromName(name), n);
    if (!publisher.ok()) return state.SkipWithError("no publisher");
    publishers.push_back(*std::move(publisher));
    params.push_back(Grad(n));
    copies.emplace_back(n, 0.0f);
  }
  const auto step = Grad(n);
  ChunkHeader h;
  std::string p;
  uint32_t clock = 0;
  size_t c = 0;
  RunPaired(
      state, n,
      [&] {
        return publishers[c]
            ->Publish(params[c], {.seed = 1, .clock = clock}, absl::MakeSpan(copies[c]), &h, &p)
            .ok();
      },
      [&] {  // the step's move, on the chunk published half a round from now
        ++clock;
        c = (c + 1) % chunks;
        auto& later = params[(c + chunks / 2) % chunks];
        for (size_t i = 0; i < n; i += 64) later[i] += 1e-3f * step[i];
      });
  state.SetLabel(name);
}

void PublishArgs(benchmark::internal::Benchmark* b) {
  for (int c : {1, 5, 6, 7}) b->Args({c, kMaxChunkElems});  // twobit, int8, int4, ternary512
  b->ArgNames({"codec", "n"})->Unit(benchmark::kMicrosecond)->UseManualTime();
}

void PublishColdArgs(benchmark::internal::Benchmark* b) {
  for (int c : {1, 5, 6, 7}) b->Args({c, kMaxChunkElems, 32});
  b->ArgNames({"codec", "n", "chunks"})->Unit(benchmark::kMicrosecond)->UseManualTime();
}

// n = 1M and 16M elements as one chunk each (a kernel's raw speed; a shard
// map never makes a chunk above kMaxChunkElems), and 16M as the worker
// encodes it: kMaxChunkElems-element chunks, whose second pass (the encode
// after the scale) reads the chunk back from cache rather than from memory.
void CodecArgs(benchmark::internal::Benchmark* b) {
  for (int64_t n : {int64_t{1} << 20, int64_t{1} << 24})
    for (int c = 0; c < kNumHostCodecs; ++c) b->Args({c, n, n});
  for (int c = 0; c < kNumHostCodecs; ++c) b->Args({c, int64_t{1} << 24, kMaxChunkElems});
  b->ArgNames({"codec", "n", "chunk"})->Unit(benchmark::kMicrosecond)->UseManualTime();
}

void DecodeArgs(benchmark::internal::Benchmark* b) {
  for (int64_t n : {int64_t{1} << 20, int64_t{1} << 24})
    for (int c = 0; c < kNumHostCodecs; ++c) b->Args({c, n});
  b->ArgNames({"codec", "n"})->Unit(benchmark::kMicrosecond)->UseManualTime();
}

// A worker's apply of one published delta where its parameters are
// ([fused apply], [copy in place]) over `chunks` chunks of n elements in
// turn, out of cache as in a large model's pull: decode and add, checksum.
// Per chunk.
void BM_ApplyPublishedCold(benchmark::State& state) {
  const char* name = kCodecs[state.range(0)];
  const size_t n = state.range(1), chunks = state.range(2);
  auto publisher = DeltaPublisher::Create(*CodecTypeFromName(name), n);
  if (!publisher.ok()) return state.SkipWithError("no publisher");
  std::vector<float> params = Grad(n), shard_copy(n, 0.0f);
  ChunkHeader h;
  std::string p;
  if (!(*publisher)->Publish(params, {.seed = 1, .clock = 1}, absl::MakeSpan(shard_copy), &h, &p)
           .ok()) {
    return state.SkipWithError("publish failed");
  }
  std::vector<std::vector<float>> copies(chunks, std::vector<float>(n, 0.0f));
  size_t c = 0;
  RunPaired(
      state, n, [&] { return ApplyPublishedDelta(h, p, absl::MakeSpan(copies[c])).ok(); },
      [&] { c = (c + 1) % chunks; });
  state.SetLabel(name);
}

void ApplyColdArgs(benchmark::internal::Benchmark* b) {
  for (int c : {6, 7}) b->Args({c, kMaxChunkElems, 32});  // int4, ternary512
  b->ArgNames({"codec", "n", "chunks"})->Unit(benchmark::kMicrosecond)->UseManualTime();
}

BENCHMARK(BM_Memcpy)->Arg(1 << 20)->Arg(1 << 24)->Unit(benchmark::kMicrosecond)->UseManualTime();
BENCHMARK(BM_EncodeResidual)->Apply(CodecArgs);
BENCHMARK(BM_Encode)->Apply(CodecArgs);
BENCHMARK(BM_DecodeAdd)->Apply(DecodeArgs);
BENCHMARK(BM_Publish)->Apply(PublishArgs);
BENCHMARK(BM_PublishCold)->Apply(PublishColdArgs);
BENCHMARK(BM_ApplyPublishedCold)->Apply(ApplyColdArgs);

#ifdef GS_HAVE_CUDA
// GPU rows: encode with residual (the device path of a GPU worker) and
// validate + decode-accumulate, each against a device-to-device cudaMemcpy of
// the same fp32 buffer. Paired: every iteration times one copy and then the
// operation back to back with CUDA events, and x_d2d is the median of the
// per-pair ratios copy_time / op_time (= op GB/s / copy GB/s, both counted as
// fp32 gradient bytes), so clock and neighbour noise cancel within a pair.
// Registered only when a device exists.
struct GpuBuffers {
  explicit GpuBuffers(size_t n) : n(n) {
    cudaMalloc(&g, n * 4);
    cudaMalloc(&r, n * 4);
    cudaMalloc(&copy, n * 4);
    cudaMalloc(&acc, n * 4);
    cudaMalloc(&p, n * 4);
    const auto host = Grad(n);
    cudaMemcpy(g, host.data(), n * 4, cudaMemcpyHostToDevice);
    cudaMemset(r, 0, n * 4);
    cudaMemset(acc, 0, n * 4);
    cudaEventCreate(&a);
    cudaEventCreate(&b);
  }
  ~GpuBuffers() {
    cudaFree(g);
    cudaFree(r);
    cudaFree(copy);
    cudaFree(acc);
    cudaFree(p);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  // Milliseconds of `op` on the default stream, timed with events.
  template <typename F>
  float Time(F op) {
    cudaEventRecord(a);
    op();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    return ms;
  }
  float TimeCopy() {
    return Time([&] { cudaMemcpyAsync(copy, g, n * 4, cudaMemcpyDeviceToDevice); });
  }

  size_t n;
  float *g, *r, *copy, *acc;
  uint8_t* p;
  cudaEvent_t a, b;
};

// Runs the paired loop; `op` returns false on failure.
template <typename F>
void PairedGpuLoop(benchmark::State& state, GpuBuffers& buf, CodecType type, const char* what,
                   F op) {
  for (int warm = 0; warm < 3; ++warm) {
    buf.TimeCopy();
    if (!op()) state.SkipWithError(what);
  }
  std::vector<double> ratios, op_ms;
  for (auto _ : state) {
    const float copy = buf.TimeCopy();
    bool ok = true;
    const float ms = buf.Time([&] { ok = op(); });
    if (!ok) state.SkipWithError(what);
    state.SetIterationTime(ms / 1e3);
    ratios.push_back(copy / ms);
    op_ms.push_back(ms);
  }
  if (ratios.empty()) return;
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  state.SetLabel(std::string(CodecTypeName(type)) + " (gpu)");
  state.counters["GB/s"] = buf.n * 4 / (median(op_ms) / 1e3) / 1e9;
  state.counters["x_d2d"] = median(ratios);
}

void BM_GpuEncodeResidual(benchmark::State& state) {
  const auto type = static_cast<CodecType>(state.range(0));
  GpuBuffers buf(state.range(1));
  ChunkHeader h;
  uint32_t clock = 0;
  PairedGpuLoop(state, buf, type, "encode", [&] {
    return cuda::EncodeOnDevice(type, {}, buf.g, buf.r, buf.n, {.clock = clock++}, buf.p, &h,
                                nullptr)
        .ok();
  });
}

// The device pusher's form: the statistics scratch zeroed, the header left
// in device memory, nothing read back.
void BM_GpuEncodeResidualAsync(benchmark::State& state) {
  const auto type = static_cast<CodecType>(state.range(0));
  GpuBuffers buf(state.range(1));
  void* scratch = nullptr;
  cudaMalloc(&scratch, cuda::kEncodeStatsBytes + sizeof(cuda::DeviceEncodeResult));
  auto* result = reinterpret_cast<cuda::DeviceEncodeResult*>(static_cast<char*>(scratch) +
                                                             cuda::kEncodeStatsBytes);
  uint32_t clock = 0;
  PairedGpuLoop(state, buf, type, "encode", [&] {
    return cudaMemsetAsync(scratch, 0, cuda::kEncodeStatsBytes) == cudaSuccess &&
           cuda::EncodeOnDeviceAsync(type, {}, buf.g, buf.r, buf.n, {.clock = clock++}, buf.p,
                                     result, scratch, nullptr)
               .ok();
  });
  cudaFree(scratch);
}

void BM_GpuDecodeAdd(benchmark::State& state) {
  const auto type = static_cast<CodecType>(state.range(0));
  GpuBuffers buf(state.range(1));
  ChunkHeader h;
  if (!cuda::EncodeOnDevice(type, {}, buf.g, nullptr, buf.n, {}, buf.p, &h, nullptr).ok()) {
    state.SkipWithError("encode");
    return;
  }
  const size_t bytes = PayloadBytes(type, buf.n);
  PairedGpuLoop(state, buf, type, "decode", [&] {
    return cuda::DecodeAddOnDevice(h, buf.p, bytes, buf.acc, 0.25f, nullptr).ok();
  });
}

const bool kGpuRegistered = [] {
  if (!cuda::DeviceAvailable()) return false;
  for (auto* b :
       {benchmark::RegisterBenchmark("BM_GpuEncodeResidual", BM_GpuEncodeResidual),
        benchmark::RegisterBenchmark("BM_GpuEncodeResidualAsync", BM_GpuEncodeResidualAsync),
        benchmark::RegisterBenchmark("BM_GpuDecodeAdd", BM_GpuDecodeAdd)}) {
    // 4096: a small chunk, where launches and readbacks are the cost.
    for (int64_t n : {int64_t{1} << 12, int64_t{1} << 20, int64_t{1} << 24})
      for (int c = 0; c < 4; ++c) b->Args({c, n});
    b->ArgNames({"codec", "n"})->UseManualTime()->Unit(benchmark::kMicrosecond);
  }
  return true;
}();
#endif

}  // namespace
}  // namespace gradstream

BENCHMARK_MAIN();
