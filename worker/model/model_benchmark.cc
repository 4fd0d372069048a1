// Training-step throughput of the models: one ForwardBackward on a batch of
// 32 per iteration, reported as examples/s. Args: {model, device} with model
// 0 = MLP 20-64-10, 1 = LeNet on 1x28x28, 2 = LeNet on 3x32x32; device
// 0 = CPU, 1 = GPU (skipped without one). GPU timings include the input
// upload and stat download, as in a real step.
#include <vector>

#include "benchmark/benchmark.h"
#include "worker/data/rng.h"
#include "worker/model/model.h"

namespace gradstream {
namespace {

ModelConfig ConfigFor(int which) {
  ModelConfig c;
  if (which == 1 || which == 2) {
    c.type = ModelType::kCnn;
    c.input = which == 1 ? InputShape{1, 28, 28} : InputShape{3, 32, 32};
  }
  return c;
}

void BM_ForwardBackward(benchmark::State& state) {
  const ModelConfig c = ConfigFor(static_cast<int>(state.range(0)));
  const Device device = state.range(1) == 1 ? Device::kGpu : Device::kCpu;
  if (device == Device::kGpu && NumGpuDevices() == 0) {
    state.SkipWithError("no CUDA device");
    return;
  }
  auto m = CreateModel(c, device);
  if (!m.ok()) {
    state.SkipWithError(m.status().ToString().c_str());
    return;
  }
  constexpr int kBatch = 32;
  SplitMix64 rng(1);
  std::vector<float> x(kBatch * c.input.elems());
  for (float& v : x) v = static_cast<float>(rng.UniformDouble());
  std::vector<int32_t> y(kBatch);
  for (int32_t& v : y) v = static_cast<int32_t>(rng.UniformInt(c.num_classes));
  for (auto _ : state) {
    if (!(*m)->ForwardBackward(x.data(), y.data(), kBatch, nullptr).ok() ||
        !(*m)->Synchronize().ok()) {
      state.SkipWithError("step failed");
      return;
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_ForwardBackward)
    ->ArgsProduct({{0, 1, 2}, {0, 1}})
    ->ArgNames({"model", "gpu"})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gradstream

BENCHMARK_MAIN();
