#include "common/optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/codec/decoder.h"
#include "common/optim/internal/kernels.h"
#include "common/status.h"

namespace gradstream {

std::string_view OptimizerTypeName(OptimizerType type) {
  switch (type) {
    case OptimizerType::kSgd:
      return "sgd";
    case OptimizerType::kMomentum:
      return "momentum";
    case OptimizerType::kNesterov:
      return "nesterov";
    case OptimizerType::kAdaGrad:
      return "adagrad";
    case OptimizerType::kAdam:
      return "adam";
  }
  return "unknown";
}

absl::StatusOr<OptimizerType> OptimizerTypeFromName(std::string_view name) {
  if (name.empty() || name == "momentum") return OptimizerType::kMomentum;
  if (name == "sgd") return OptimizerType::kSgd;
  if (name == "nesterov") return OptimizerType::kNesterov;
  if (name == "adagrad") return OptimizerType::kAdaGrad;
  if (name == "adam") return OptimizerType::kAdam;
  return absl::InvalidArgumentError(absl::StrCat("unknown optimizer '", std::string(name),
                                                 "' (sgd, momentum, nesterov, adagrad, adam)"));
}

int NumStateSlots(OptimizerType type) {
  switch (type) {
    case OptimizerType::kSgd:
      return 0;
    case OptimizerType::kAdam:
      return 2;
    default:
      return 1;
  }
}

absl::StatusOr<Optimizer> Optimizer::Create(const OptimizerOptions& o) {
  for (float v : {o.learning_rate, o.momentum, o.epsilon, o.initial_accumulator, o.beta1, o.beta2,
                  o.weight_decay}) {
    if (!std::isfinite(v) || v < 0.0f) {
      return absl::InvalidArgumentError("optimizer hyper-parameters must be finite and >= 0");
    }
  }
  if (o.beta1 >= 1.0f || o.beta2 >= 1.0f) {
    return absl::InvalidArgumentError("adam betas must be < 1");
  }
  if (static_cast<int>(o.type) > static_cast<int>(OptimizerType::kAdam)) {
    return absl::InvalidArgumentError("unknown optimizer type");
  }
  return Optimizer(o);
}

OptimizerState Optimizer::NewState(size_t n) const {
  OptimizerState s;
  const int slots = NumStateSlots(options_.type);
  const float init = options_.type == OptimizerType::kAdaGrad ? options_.initial_accumulator : 0.0f;
  for (int i = 0; i < slots; ++i) s.slots.emplace_back(n, init);
  return s;
}

absl::Status Optimizer::CheckState(size_t n, const OptimizerState& state) const {
  if (state.slots.size() != static_cast<size_t>(NumStateSlots(options_.type))) {
    return absl::InvalidArgumentError("optimizer state has the wrong number of slots");
  }
  for (const auto& slot : state.slots) {
    if (slot.size() != n) return absl::InvalidArgumentError("optimizer state size mismatch");
  }
  return absl::OkStatus();
}

namespace {

optim_internal::StepParams MakeStep(const OptimizerOptions& o, OptimizerState* state) {
  optim_internal::StepParams sp;
  sp.type = static_cast<int>(o.type);
  sp.lr = o.learning_rate;
  sp.mu = o.momentum;
  sp.eps = o.epsilon;
  sp.b1 = o.beta1;
  sp.b2 = o.beta2;
  sp.wd = o.weight_decay;
  state->step += 1;
  if (o.type == OptimizerType::kAdam) {
    const double t = static_cast<double>(state->step);
    sp.inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(o.beta1), t)));
    sp.inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(o.beta2), t)));
  }
  return sp;
}

// 4 KiB of decoded gradient per block: stays in L1.
constexpr uint32_t kDecodeBlock = 1024;

const float* Slot(const OptimizerState* s, size_t i) {
  return i < s->slots.size() ? s->slots[i].data() : nullptr;
}

}  // namespace

namespace {

// Where an update is written before it is known to be finite (see [finite
// apply]): per thread, so each executor thread keeps one chunk's worth and
// reuses it (after a commit it holds the chunk's previous buffers).
struct UpdateScratch {
  std::vector<float> params;
  std::vector<float> slots[2];
};

UpdateScratch& ThreadScratch() {
  thread_local UpdateScratch scratch;
  return scratch;
}

// Runs `block(base, m, in, out)` over the chunk in blocks of kDecodeBlock
// elements, writing into the thread's scratch, and swaps the scratch in when
// every block stayed finite. On false (a non-finite value) params and state
// are as they were, step included.
template <typename Block>
bool UpdateOutOfPlace(const OptimizerOptions& o, std::vector<float>* params,
                      OptimizerState* state, Block block) {
  const size_t n = params->size();
  UpdateScratch& out = ThreadScratch();
  out.params.resize(n);
  const size_t slots = state->slots.size();
  for (size_t i = 0; i < slots; ++i) out.slots[i].resize(n);
  const uint64_t step = state->step;
  const optim_internal::StepParams sp = MakeStep(o, state);
  const auto& k = optim_internal::Dispatch();
  const float* s0 = Slot(state, 0);
  const float* s1 = Slot(state, 1);
  float* const s0o = slots > 0 ? out.slots[0].data() : nullptr;
  float* const s1o = slots > 1 ? out.slots[1].data() : nullptr;
  bool finite = true;
  for (size_t base = 0; base < n; base += kDecodeBlock) {
    const size_t m = std::min<size_t>(kDecodeBlock, n - base);
    float gscale = 1.0f;
    const float* g = block(base, m, &gscale);
    finite &= k.apply(sp, params->data() + base, s0 ? s0 + base : nullptr,
                      s1 ? s1 + base : nullptr, g, gscale, out.params.data() + base,
                      s0o ? s0o + base : nullptr, s1o ? s1o + base : nullptr, m);
  }
  if (!finite) {
    state->step = step;
    return false;
  }
  params->swap(out.params);
  for (size_t i = 0; i < slots; ++i) state->slots[i].swap(out.slots[i]);
  return true;
}

absl::Status NonFiniteError() {
  return absl::InvalidArgumentError(
      "the update would make parameters or optimizer state non-finite (NaN or Inf): refused, "
      "parameters and optimizer state unchanged");
}

}  // namespace

absl::Status Optimizer::Apply(std::vector<float>* params, absl::Span<const float> grad,
                              float grad_scale, OptimizerState* state) const {
  if (grad.size() != params->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient has ", grad.size(), " elements, params ", params->size()));
  }
  GS_RETURN_IF_ERROR(CheckState(params->size(), *state));
  const bool finite = UpdateOutOfPlace(options_, params, state,
                                       [&](size_t base, size_t, float* gscale) {
                                         *gscale = grad_scale;
                                         return grad.data() + base;
                                       });
  return finite ? absl::OkStatus() : NonFiniteError();
}

absl::Status Optimizer::ApplyEncoded(const ChunkHeader& header, absl::string_view payload,
                                     float weight, std::vector<float>* params,
                                     OptimizerState* state) const {
  GS_ASSIGN_OR_RETURN(const ChunkDecoder chunk,
                      ChunkDecoder::Create(header, payload, params->size(), weight));
  GS_RETURN_IF_ERROR(CheckState(params->size(), *state));
  // Decode a block into an L1-resident buffer, then run the vectorized update
  // on it: the server never materializes a dense per-push gradient.
  alignas(64) float scratch[kDecodeBlock];
  const bool finite = UpdateOutOfPlace(options_, params, state,
                                       [&](size_t base, size_t m, float* gscale) {
                                         *gscale = chunk.block_scale();
                                         return chunk.Block(static_cast<uint32_t>(base),
                                                            static_cast<uint32_t>(m), scratch);
                                       });
  return finite ? absl::OkStatus() : NonFiniteError();
}

}  // namespace gradstream
