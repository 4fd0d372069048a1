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

float* Slot(OptimizerState* s, size_t i) {
  return i < s->slots.size() ? s->slots[i].data() : nullptr;
}

}  // namespace

absl::Status Optimizer::Apply(absl::Span<float> params, absl::Span<const float> grad,
                              float grad_scale, OptimizerState* state) const {
  if (grad.size() != params.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient has ", grad.size(), " elements, params ", params.size()));
  }
  GS_RETURN_IF_ERROR(CheckState(params.size(), *state));
  const optim_internal::StepParams sp = MakeStep(options_, state);
  optim_internal::Dispatch().apply(sp, params.data(), Slot(state, 0), Slot(state, 1),
                                   grad.data(), grad_scale, params.size());
  return absl::OkStatus();
}

absl::Status Optimizer::ApplyEncoded(const ChunkHeader& header, absl::string_view payload,
                                     float weight, absl::Span<float> params,
                                     OptimizerState* state) const {
  GS_ASSIGN_OR_RETURN(const ChunkDecoder chunk,
                      ChunkDecoder::Create(header, payload, params.size(), weight));
  GS_RETURN_IF_ERROR(CheckState(params.size(), *state));
  const optim_internal::StepParams sp = MakeStep(options_, state);
  const auto& k = optim_internal::Dispatch();
  float* const s0 = Slot(state, 0);
  float* const s1 = Slot(state, 1);
  // Decode a block into an L1-resident buffer, then run the vectorized update
  // on it: the server never materializes a dense per-push gradient.
  alignas(64) float scratch[kDecodeBlock];
  const uint32_t n = chunk.num_elems();
  for (uint32_t base = 0; base < n; base += kDecodeBlock) {
    const uint32_t m = std::min(kDecodeBlock, n - base);
    k.apply(sp, params.data() + base, s0 ? s0 + base : nullptr, s1 ? s1 + base : nullptr,
            chunk.Block(base, m, scratch), chunk.block_scale(), m);
  }
  return absl::OkStatus();
}

}  // namespace gradstream
