#include "common/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/codec/decoder.h"
#include "common/optim/internal/kernels.h"
#include "common/status.h"

namespace gradstream {

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

namespace {

// Bounds at or above this take the checked path: far below FLT_MAX (3.4e38),
// so the float rounding of a few operations per element cannot reach it.
constexpr double kSafeBound = 1e37;

double MaxAbs(const float* x, size_t n) {
  const uint32_t bits = optim_internal::Dispatch().max_abs_bits(x, n);
  if (bits > 0x7f800000u) return std::numeric_limits<double>::infinity();  // NaN
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

void MeasureBounds(const std::vector<float>& params, OptimizerState* state) {
  state->params_bound = MaxAbs(params.data(), params.size());
  state->slots_bound = 0;
  for (const auto& slot : state->slots) {
    state->slots_bound = std::max(state->slots_bound, MaxAbs(slot.data(), slot.size()));
  }
}

// The bounds on |params| and |state| after one update with |grad| <= g,
// from bounds p and s before, in exact arithmetic (double: no overflow).
// False when they may reach kSafeBound, or the formula can divide 0 by 0:
// then only the checked path may run the update. See [finite apply].
bool BoundsAfter(const OptimizerOptions& o, const optim_internal::StepParams& sp, double p,
                 double s, double g, double* p_after, double* s_after) {
  const double gi = g + double{o.weight_decay} * p;
  double step = gi, s2 = s, inter = gi;
  switch (o.type) {
    case OptimizerType::kSgd:
      break;
    case OptimizerType::kMomentum:
    case OptimizerType::kNesterov: {
      const double v = double{o.momentum} * s + gi;
      s2 = std::max(s, v);
      step = o.type == OptimizerType::kMomentum ? v : gi + double{o.momentum} * v;
      break;
    }
    case OptimizerType::kAdaGrad: {
      // The accumulator starts at initial_accumulator >= 0 and only grows, so
      // a >= gi^2 and |gi| / (sqrt(a) + eps) <= 1 (2: rounding), unless both
      // a and eps can be 0 (0 / 0).
      if (!(o.epsilon > 0) && !(o.initial_accumulator > 0)) return false;
      const double a = s + gi * gi;
      s2 = std::max(s, a);
      inter = std::max(inter, gi * gi);
      step = 2;
      break;
    }
    case OptimizerType::kAdam: {
      if (!(o.epsilon > 0)) return false;
      const double m = double{o.beta1} * s + (1.0 - o.beta1) * gi;
      const double v = double{o.beta2} * s + (1.0 - o.beta2) * gi * gi;
      s2 = std::max({s, m, v});
      inter = std::max({inter, gi * gi, m * sp.inv_bc1, v * sp.inv_bc2});
      step = m * sp.inv_bc1 / o.epsilon;
      break;
    }
  }
  *p_after = p + double{o.learning_rate} * step;
  *s_after = s2;
  return *p_after < kSafeBound && s2 < kSafeBound && inter < kSafeBound;
}

// Where the checked path writes an update before it is known to be finite:
// per thread, so each executor thread keeps one chunk's worth and reuses it
// (after a commit it holds the chunk's previous buffers).
struct UpdateScratch {
  std::vector<float> params;
  std::vector<float> slots[2];
};

UpdateScratch& ThreadScratch() {
  thread_local UpdateScratch scratch;
  return scratch;
}

// Runs the update over the chunk in blocks of kDecodeBlock elements;
// `block(base, m, &gscale)` gives each block's gradient. `step` is the state's
// step before MakeStep. Returns false (params and state as they were) when
// the update would not be finite.
template <typename Block>
bool RunUpdate(const OptimizerOptions& o, double grad_bound, std::vector<float>* params,
               OptimizerState* state, Block block) {
  const size_t n = params->size();
  if (state->params_bound < 0 || state->slots_bound < 0) MeasureBounds(*params, state);
  const uint64_t step = state->step;
  const optim_internal::StepParams sp = MakeStep(o, state);
  const auto& k = optim_internal::Dispatch();
  float* const s0 = Slot(state, 0);
  float* const s1 = Slot(state, 1);
  double p_after = 0, s_after = 0;
  if (BoundsAfter(o, sp, state->params_bound, state->slots_bound, grad_bound, &p_after,
                  &s_after)) {
    for (size_t base = 0; base < n; base += kDecodeBlock) {
      const size_t m = std::min<size_t>(kDecodeBlock, n - base);
      float gscale = 1.0f;
      const float* g = block(base, m, &gscale);
      k.apply(sp, params->data() + base, s0 ? s0 + base : nullptr, s1 ? s1 + base : nullptr, g,
              gscale, m);
    }
    state->params_bound = p_after;
    state->slots_bound = s_after;
    return true;
  }
  UpdateScratch& out = ThreadScratch();
  out.params.resize(n);
  const size_t slots = state->slots.size();
  for (size_t i = 0; i < slots; ++i) out.slots[i].resize(n);
  float* const s0o = slots > 0 ? out.slots[0].data() : nullptr;
  float* const s1o = slots > 1 ? out.slots[1].data() : nullptr;
  bool finite = true;
  for (size_t base = 0; base < n; base += kDecodeBlock) {
    const size_t m = std::min<size_t>(kDecodeBlock, n - base);
    float gscale = 1.0f;
    const float* g = block(base, m, &gscale);
    finite &= k.apply_checked(sp, params->data() + base, s0 ? s0 + base : nullptr,
                              s1 ? s1 + base : nullptr, g, gscale, out.params.data() + base,
                              s0o ? s0o + base : nullptr, s1o ? s1o + base : nullptr, m);
  }
  if (!finite) {
    state->step = step;
    return false;
  }
  params->swap(out.params);
  for (size_t i = 0; i < slots; ++i) state->slots[i].swap(out.slots[i]);
  MeasureBounds(*params, state);
  return true;
}

absl::Status NonFiniteError() {
  return absl::InvalidArgumentError(
      "the update would make parameters or optimizer state non-finite (NaN or Inf): refused, "
      "parameters and optimizer state unchanged");
}

}  // namespace

absl::Status Optimizer::Apply(std::vector<float>* params, absl::Span<const float> grad,
                              float grad_scale, OptimizerState* state, double grad_bound) const {
  if (grad.size() != params->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient has ", grad.size(), " elements, params ", params->size()));
  }
  GS_RETURN_IF_ERROR(CheckState(params->size(), *state));
  if (grad_bound < 0) grad_bound = MaxAbs(grad.data(), grad.size());
  const bool finite = RunUpdate(options_, std::fabs(double{grad_scale}) * grad_bound, params,
                                state, [&](size_t base, size_t, float* gscale) {
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
  const bool finite = RunUpdate(options_, chunk.max_abs(), params, state,
                                [&](size_t base, size_t m, float* gscale) {
                                  *gscale = chunk.block_scale();
                                  return chunk.Block(static_cast<uint32_t>(base),
                                                     static_cast<uint32_t>(m), scratch);
                                });
  return finite ? absl::OkStatus() : NonFiniteError();
}

absl::Status Optimizer::ApplyRows(absl::Span<float* const> params,
                                  absl::Span<float* const> slot0,
                                  absl::Span<float* const> slot1, uint32_t dim,
                                  absl::Span<const float> grad, float grad_scale,
                                  OptimizerState* state) const {
  const size_t rows = params.size();
  const int slots = NumStateSlots(options_.type);
  if (grad.size() != rows * dim || (slots > 0 && slot0.size() != rows) ||
      (slots > 1 && slot1.size() != rows)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row update: ", rows, " rows of ", dim, " floats, ", grad.size(), " gradient floats, ",
        slot0.size(), " and ", slot1.size(), " state rows"));
  }
  // Rows are short and scattered, so every row runs the checked kernel into
  // a scratch copy and the copy is committed only when all are finite.
  const uint64_t step = state->step;
  const optim_internal::StepParams sp = MakeStep(options_, state);
  const auto& k = optim_internal::Dispatch();
  thread_local std::vector<float> out;
  out.resize(rows * dim * (1 + static_cast<size_t>(slots)));
  float* const po = out.data();
  float* const s0o = slots > 0 ? po + rows * dim : nullptr;
  float* const s1o = slots > 1 ? s0o + rows * dim : nullptr;
  bool finite = true;
  // The rows are scattered over a table far larger than the caches: each
  // row's memory is asked for a few rows before the kernel reads it.
  constexpr size_t kAhead = 8;
  auto prefetch = [dim](const float* row) {
    for (uint32_t j = 0; j < dim; j += 64 / sizeof(float)) __builtin_prefetch(row + j, 1);
  };
  for (size_t i = 0; i < rows; ++i) {
    const size_t at = i * dim;
    if (i + kAhead < rows) {
      prefetch(params[i + kAhead]);
      if (slots > 0) prefetch(slot0[i + kAhead]);
      if (slots > 1) prefetch(slot1[i + kAhead]);
    }
    finite &= k.apply_checked(sp, params[i], slots > 0 ? slot0[i] : nullptr,
                              slots > 1 ? slot1[i] : nullptr, grad.data() + at, grad_scale,
                              po + at, s0o ? s0o + at : nullptr, s1o ? s1o + at : nullptr, dim);
  }
  if (!finite) {
    state->step = step;
    return NonFiniteError();
  }
  const size_t bytes = size_t{dim} * sizeof(float);
  for (size_t i = 0; i < rows; ++i) {
    const size_t at = i * dim;
    std::memcpy(params[i], po + at, bytes);
    if (slots > 0) std::memcpy(slot0[i], s0o + at, bytes);
    if (slots > 1) std::memcpy(slot1[i], s1o + at, bytes);
  }
  return absl::OkStatus();
}

}  // namespace gradstream
