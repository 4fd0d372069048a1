// model_runtime_bench: the built-in CPU models (worker/model, Eigen) against
// the same networks saved as TorchScript and run through libtorch, one
// trainer step at a time, in paired, interleaved rounds (the table is in
// README.md here, the decision in docs/design/model-runtime.md).
//
// A step is what the built-in trainer's CPU step computes per clock: copy
// the pulled parameters in (Model::SetParam / copy_ into the module's
// parameters), forward + backward with the loss and the correct count, and
// copy every gradient out to a host buffer (what the encoder reads). Both
// sides run on the calling thread only: Eigen is built without OpenMP, and
// libtorch gets at::set_num_threads(1) and one inter-op thread.
//
//   --print_networks   prints each case's layer list (the format
//                      make_models.py reads) and exits, so the TorchScript
//                      modules are built from the very NetworkSpec the
//                      built-in model executes;
//   --models_dir=D     reads D/<case>.pt, checks on one batch that both
//                      sides give the same loss and gradients from the same
//                      parameters, then times them;
//   --noop             returns from main() at once (start-up timing:
//                      libtorch's loading and static initializers).
#include <ATen/Parallel.h>
#include <time.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/rpc/malloc_tuning.h"
#include "common/status.h"
#include "worker/data/rng.h"
#include "worker/model/model.h"

ABSL_FLAG(bool, print_networks, false, "Print every case's layers for make_models.py and exit.");
ABSL_FLAG(bool, noop, false, "Exit as soon as main() starts (start-up timing).");
ABSL_FLAG(std::string, models_dir, "", "Folder with <case>.pt from make_models.py.");
ABSL_FLAG(std::vector<std::string>, cases, {},
          "Cases to run (default all): softmax, mlp, mlp_mnist, cnn_mnist, cnn_cifar.");
ABSL_FLAG(std::vector<std::string>, batches, std::vector<std::string>({"8", "32", "128"}),
          "Batch sizes.");
ABSL_FLAG(int, rounds, 5, "Paired rounds; the order within a pair alternates per round.");
ABSL_FLAG(int, block_ms, 150, "Target length of one timed block of steps per side.");
ABSL_FLAG(bool, malloc_tuning, true,
          "Apply gs_worker's glibc malloc settings ([receive memory]) first, as gs_worker does.");

namespace gradstream {
namespace {

struct Case {
  const char* name;
  ModelConfig config;
};

// The built-in trainer's models as jobs use them: the default MLP on the
// synthetic task, a softmax there, an MLP and the CNN on (Fashion-)MNIST,
// the CNN on CIFAR-10.
std::vector<Case> AllCases() {
  std::vector<Case> cases(5);
  cases[0].name = "softmax";
  cases[0].config.type = ModelType::kSoftmax;
  cases[1].name = "mlp";  // 20-64-10, the job default
  cases[2].name = "mlp_mnist";
  cases[2].config.input = InputShape{784, 1, 1};
  cases[2].config.hidden = {256};
  cases[3].name = "cnn_mnist";
  cases[3].config.type = ModelType::kCnn;
  cases[3].config.input = InputShape{1, 28, 28};
  cases[4].name = "cnn_cifar";
  cases[4].config.type = ModelType::kCnn;
  cases[4].config.input = InputShape{3, 32, 32};
  return cases;
}

// The module name of a layer's weight: "conv1" for "conv1.weight".
std::string ModuleName(const NetworkSpec& net, const LayerSpec& l) {
  const std::string& w = net.params[l.weight].name;
  return w.substr(0, w.rfind('.'));
}

// One line per layer, see make_models.py: "case NAME C H W CLASSES", then
// "dense NAME IN OUT", "conv NAME IN_C OUT_C K PAD", "relu", "maxpool",
// and "end".
absl::Status PrintNetworks(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    GS_ASSIGN_OR_RETURN(NetworkSpec net, BuildNetwork(c.config));
    const InputShape& in = c.config.input;
    std::printf("case %s %d %d %d %d\n", c.name, in.channels, in.height, in.width,
                c.config.num_classes);
    for (const LayerSpec& l : net.layers) {
      switch (l.kind) {
        case LayerKind::kDense:
          std::printf("dense %s %lld %d\n", ModuleName(net, l).c_str(),
                      static_cast<long long>(l.in.elems()), l.out.channels);
          break;
        case LayerKind::kConv:
          std::printf("conv %s %d %d %d %d\n", ModuleName(net, l).c_str(), l.in.channels,
                      l.out.channels, l.kernel, l.padding);
          break;
        case LayerKind::kRelu:
          std::printf("relu\n");
          break;
        case LayerKind::kMaxPool:
          std::printf("maxpool\n");
          break;
      }
    }
    std::printf("end\n");
  }
  return absl::OkStatus();
}

using HostTensors = std::vector<std::vector<float>>;

struct Batch {
  int size = 0;
  InputShape shape;
  std::vector<float> x;
  std::vector<int32_t> y;
};

Batch MakeBatch(const ModelConfig& config, int size) {
  Batch b{size, config.input, std::vector<float>(size * config.input.elems()),
          std::vector<int32_t>(size)};
  SplitMix64 rng(1);
  for (float& v : b.x) v = static_cast<float>(rng.UniformDouble());
  for (int32_t& v : b.y) v = static_cast<int32_t>(rng.UniformInt(config.num_classes));
  return b;
}

// Both sides of one case: the same parameters go in ("pulled"), the
// gradients come out into per-side buffers.
class Runtime {
 public:
  virtual ~Runtime() = default;
  // One trainer step; see the top of this file.
  [[nodiscard]] virtual absl::Status Step(const HostTensors& pulled, const Batch& batch,
                                          HostTensors* grads, StepStats* stats) = 0;
};

class BuiltinRuntime final : public Runtime {
 public:
  explicit BuiltinRuntime(std::unique_ptr<Model> model) : model_(std::move(model)) {}

  absl::Status Step(const HostTensors& pulled, const Batch& b, HostTensors* grads,
                    StepStats* stats) override {
    for (int i = 0; i < model_->num_tensors(); ++i) {
      GS_RETURN_IF_ERROR(model_->SetParam(i, pulled[i]));
    }
    GS_RETURN_IF_ERROR(model_->ForwardBackward(b.x.data(), b.y.data(), b.size, stats));
    for (int i = 0; i < model_->num_tensors(); ++i) {
      GS_RETURN_IF_ERROR(model_->GetGrad(i, (*grads)[i]));
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Model> model_;
};

// The module make_models.py saved: forward(x, y) -> (mean cross-entropy,
// correct count), its network under the attribute "net", so parameter
// "net.fc1.weight" is the built-in's "fc1.weight".
class TorchRuntime final : public Runtime {
 public:
  static absl::StatusOr<std::unique_ptr<TorchRuntime>> Load(const std::string& path,
                                                            const std::vector<TensorSpec>& specs) {
    auto rt = std::unique_ptr<TorchRuntime>(new TorchRuntime);
    try {
      rt->module_ = torch::jit::load(path);
    } catch (const c10::Error& e) {
      return absl::NotFoundError(absl::StrCat(
          "cannot load ", path, " (made by make_models.py): ", e.what_without_backtrace()));
    }
    rt->module_.train();
    for (const TensorSpec& spec : specs) {
      bool found = false;
      for (const auto& p : rt->module_.named_parameters()) {
        if (p.name != "net." + spec.name) continue;
        if (p.value.sizes().vec() != spec.shape) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ": ", p.name, " has shape [", absl::StrJoin(p.value.sizes(), ","),
                           "], the built-in model [", absl::StrJoin(spec.shape, ","), "]"));
        }
        rt->params_.push_back(p.value);
        found = true;
      }
      if (!found) {
        return absl::InvalidArgumentError(absl::StrCat(path, " has no parameter net.", spec.name));
      }
    }
    return rt;
  }

  absl::Status Step(const HostTensors& pulled, const Batch& b, HostTensors* grads,
                    StepStats* stats) override {
    {
      at::NoGradGuard no_grad;
      for (size_t i = 0; i < params_.size(); ++i) {
        params_[i].copy_(
            torch::from_blob(const_cast<float*>(pulled[i].data()), params_[i].sizes()));
      }
    }
    // zero_grad(set_to_none=True): backward allocates fresh gradients.
    for (at::Tensor& p : params_) p.mutable_grad().reset();
    at::Tensor x = torch::from_blob(const_cast<float*>(b.x.data()),
                                    {b.size, b.shape.channels, b.shape.height, b.shape.width});
    at::Tensor y = torch::from_blob(const_cast<int32_t*>(b.y.data()), {b.size}, torch::kInt32)
                       .to(torch::kLong);
    try {
      auto out = module_.forward({x, y}).toTuple();
      at::Tensor loss = out->elements()[0].toTensor();
      loss.backward();
      for (size_t i = 0; i < params_.size(); ++i) {
        const at::Tensor g = params_[i].grad().contiguous();
        std::memcpy((*grads)[i].data(), g.data_ptr<float>(), (*grads)[i].size() * sizeof(float));
      }
      stats->loss = loss.item<double>();
      stats->correct = static_cast<int>(out->elements()[1].toTensor().item<int64_t>());
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat("libtorch step: ", e.what_without_backtrace()));
    }
    return absl::OkStatus();
  }

 private:
  TorchRuntime() = default;
  torch::jit::Module module_;
  std::vector<at::Tensor> params_;  // in the built-in model's tensor order
};

HostTensors ZerosLike(const HostTensors& t) {
  HostTensors z(t.size());
  for (size_t i = 0; i < t.size(); ++i) z[i].assign(t[i].size(), 0.0f);
  return z;
}

// InvalidArgument unless both sides computed the same step: loss and
// correct count, every gradient within 1e-3 of its largest magnitude.
absl::Status CheckSameStep(const std::vector<TensorSpec>& specs, const StepStats& a,
                           const HostTensors& ga, const StepStats& b, const HostTensors& gb) {
  if (std::abs(a.loss - b.loss) > 1e-4 * std::max(1.0, std::abs(a.loss)) ||
      a.correct != b.correct) {
    return absl::InvalidArgumentError(
        absl::StrFormat("loss %.6f / correct %d (built-in) vs %.6f / %d (libtorch)", a.loss,
                        a.correct, b.loss, b.correct));
  }
  for (size_t i = 0; i < ga.size(); ++i) {
    float scale = 1e-6f, diff = 0;
    for (size_t j = 0; j < ga[i].size(); ++j) {
      scale = std::max(scale, std::abs(ga[i][j]));
      diff = std::max(diff, std::abs(ga[i][j] - gb[i][j]));
    }
    if (diff > 1e-3f * scale) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "gradient of %s differs by %g (largest magnitude %g)", specs[i].name, diff, scale));
    }
  }
  return absl::OkStatus();
}

struct Times {
  double wall_s = 0;
  double cpu_s = 0;  // the process's CPU time: helper threads included
};

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

absl::StatusOr<Times> TimeBlock(Runtime& rt, int steps, const HostTensors& pulled, const Batch& b,
                                HostTensors* grads) {
  StepStats stats;
  const double cpu0 = ProcessCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) GS_RETURN_IF_ERROR(rt.Step(pulled, b, grads, &stats));
  const auto t1 = std::chrono::steady_clock::now();
  return Times{std::chrono::duration<double>(t1 - t0).count() / steps,
               (ProcessCpuSeconds() - cpu0) / steps};
}

// One (case, batch) pair of sides, and what the rounds measured.
struct Pair {
  std::string label;
  std::string case_name;
  int batch = 0;
  int steps = 0;  // per timed block, the same on both sides
  std::unique_ptr<Runtime> builtin, torch;
  HostTensors pulled, grads;
  Batch data;
  std::vector<Times> t_builtin, t_torch;
};

absl::StatusOr<Pair> SetUp(const Case& c, int batch, const std::string& dir) {
  Pair p;
  p.case_name = c.name;
  p.batch = batch;
  p.label = absl::StrCat(c.name, " b", batch);
  GS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, CreateModel(c.config, Device::kCpu));
  const std::vector<TensorSpec> specs = model->params();
  p.pulled.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    p.pulled[i].resize(specs[i].num_elems);
    GS_RETURN_IF_ERROR(model->GetParam(static_cast<int>(i), p.pulled[i]));
  }
  p.grads = ZerosLike(p.pulled);
  p.data = MakeBatch(c.config, batch);
  p.builtin = std::make_unique<BuiltinRuntime>(std::move(model));
  const auto t0 = std::chrono::steady_clock::now();
  GS_ASSIGN_OR_RETURN(p.torch, TorchRuntime::Load(absl::StrCat(dir, "/", c.name, ".pt"), specs));
  const auto t1 = std::chrono::steady_clock::now();

  // The first step of each side, timed: what a worker's first clock pays.
  HostTensors torch_grads = ZerosLike(p.pulled);
  StepStats sb, st;
  GS_RETURN_IF_ERROR(p.builtin->Step(p.pulled, p.data, &p.grads, &sb));
  const auto t2 = std::chrono::steady_clock::now();
  GS_RETURN_IF_ERROR(p.torch->Step(p.pulled, p.data, &torch_grads, &st));
  const auto t3 = std::chrono::steady_clock::now();
  if (absl::Status s = CheckSameStep(specs, sb, p.grads, st, torch_grads); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(p.label, ": ", s.message()));
  }
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::fprintf(stderr,
               "%s: same loss and gradients on both sides; torch::jit::load %.1f ms; first "
               "step: built-in %.2f ms, libtorch %.2f ms\n",
               p.label.c_str(), ms(t1 - t0), ms(t2 - t1), ms(t3 - t2));
  // Warm-up (the TorchScript profiling executor optimizes after its first
  // runs), then size the blocks from the slower side.
  double slower = 0;
  for (Runtime* rt : {p.builtin.get(), p.torch.get()}) {
    GS_RETURN_IF_ERROR(TimeBlock(*rt, 10, p.pulled, p.data, &p.grads).status());
    GS_ASSIGN_OR_RETURN(Times warm, TimeBlock(*rt, 5, p.pulled, p.data, &p.grads));
    slower = std::max(slower, warm.wall_s);
  }
  p.steps = std::max(3, static_cast<int>(absl::GetFlag(FLAGS_block_ms) * 1e-3 / slower));
  return p;
}

struct Spread {
  double median, min, max;
};

Spread SpreadOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double median = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return {median, v.front(), v.back()};
}

std::string RatioCell(const std::vector<Times>& num, const std::vector<Times>& den,
                      double Times::*field) {
  std::vector<double> r;
  for (size_t i = 0; i < num.size(); ++i) r.push_back(num[i].*field / den[i].*field);
  const Spread s = SpreadOf(r);
  return absl::StrFormat("%.2fx [%.2f, %.2f]", s.median, s.min, s.max);
}

double MedianMs(const std::vector<Times>& t) {
  std::vector<double> v;
  for (const Times& x : t) v.push_back(x.wall_s * 1e3);
  return SpreadOf(v).median;
}

absl::Status Run(const std::vector<Case>& cases) {
  at::set_num_threads(1);
  at::set_num_interop_threads(1);
  const std::string dir = absl::GetFlag(FLAGS_models_dir);
  if (dir.empty()) return absl::InvalidArgumentError("--models_dir is required");
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (rounds < 1) return absl::InvalidArgumentError("--rounds must be >= 1");
  std::vector<Pair> pairs;
  for (const Case& c : cases) {
    for (const std::string& b : absl::GetFlag(FLAGS_batches)) {
      int batch = 0;
      if (!absl::SimpleAtoi(b, &batch) || batch <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("bad batch size '", b, "'"));
      }
      GS_ASSIGN_OR_RETURN(Pair p, SetUp(c, batch, dir));
      std::fprintf(stderr, "%s: %d steps per block\n", p.label.c_str(), p.steps);
      pairs.push_back(std::move(p));
    }
  }
  // NOTE: [paired rounds] Rounds are outermost, so each pair's rounds are
  // spread over the whole run; within a round the two sides of a pair run
  // back to back, in an order that alternates per round, and only their
  // ratio is reported: load from other processes on this machine moves both.
  for (int r = 0; r < rounds; ++r) {
    for (Pair& p : pairs) {
      for (int side = 0; side < 2; ++side) {
        const bool torch_side = (side + r) % 2 == 1;
        Runtime& rt = torch_side ? *p.torch : *p.builtin;
        GS_ASSIGN_OR_RETURN(Times t, TimeBlock(rt, p.steps, p.pulled, p.data, &p.grads));
        (torch_side ? p.t_torch : p.t_builtin).push_back(t);
      }
    }
    std::fprintf(stderr, "round %d of %d done\n", r + 1, rounds);
  }
  std::printf(
      "| case | batch | built-in ms/step | libtorch ms/step | libtorch / built-in, wall | "
      "libtorch / built-in, CPU |\n|---|---|---|---|---|---|\n");
  for (const Pair& p : pairs) {
    std::printf("| %s | %d | %.3f | %.3f | %s | %s |\n", p.case_name.c_str(), p.batch,
                MedianMs(p.t_builtin), MedianMs(p.t_torch),
                RatioCell(p.t_torch, p.t_builtin, &Times::wall_s).c_str(),
                RatioCell(p.t_torch, p.t_builtin, &Times::cpu_s).c_str());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Case>> SelectedCases() {
  const std::vector<std::string> names = absl::GetFlag(FLAGS_cases);
  std::vector<Case> all = AllCases();
  if (names.empty()) return all;
  std::vector<Case> out;
  for (const std::string& n : names) {
    auto it = std::find_if(all.begin(), all.end(), [&](const Case& c) { return n == c.name; });
    if (it == all.end()) return absl::InvalidArgumentError(absl::StrCat("unknown case '", n, "'"));
    out.push_back(*it);
  }
  return out;
}

}  // namespace
}  // namespace gradstream

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_noop)) return 0;
  // Both sides run with the heap settings gs_worker's main() applies.
  if (absl::GetFlag(FLAGS_malloc_tuning) && !gradstream::rpc::KeepFreedMemoryForReuse()) {
    std::fprintf(stderr, "model_runtime_bench: glibc malloc settings not applied\n");
  }
  auto cases = gradstream::SelectedCases();
  absl::Status s = cases.status();
  if (s.ok()) {
    s = absl::GetFlag(FLAGS_print_networks) ? gradstream::PrintNetworks(*cases)
                                            : gradstream::Run(*cases);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "model_runtime_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
