// Server-side optimizers applied to (aggregated, decoded) gradients.
//
// The math never sees protos: OptimizerOptions is filled once from the job's
// OptimizerSpec at the RPC edge. Every update first forms the effective
// gradient
//     g = grad_scale * grad + weight_decay * p            (L2 decay)
// and then applies one of (elementwise; lr = learning_rate):
//
//   sgd       p -= lr * g                                  (Robbins & Monro 1951)
//   momentum  v = mu * v + g;  p -= lr * v                 (Polyak 1964, heavy ball;
//                                                           PyTorch's form)
//   nesterov  v = mu * v + g;  p -= lr * (g + mu * v)      (Nesterov 1983 as in
//                                                           Sutskever et al. 2013)
//   adagrad   a += g^2;  p -= lr * g / (sqrt(a) + eps)     (Duchi, Hazan & Singer
//             a starts at initial_accumulator               2011, JMLR)
//   adam      m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  t += 1
//             p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
//                                                          (Kingma & Ba 2015, Alg. 1)
//
// 1-bit SGD (Seide et al. 2014) found AdaGrad works best on the *aggregated*
// gradient at the server, which is where these run.
//
// ApplyEncoded() fuses decoding of a compressed chunk with the update so the
// server never materializes a dense per-push gradient: the codec's
// ChunkDecoder (common/codec/decoder.h) decodes block-wise into an
// L1-resident buffer, then the update runs vectorized.
#ifndef GRADSTREAM_COMMON_OPTIM_OPTIMIZER_H_
#define GRADSTREAM_COMMON_OPTIM_OPTIMIZER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/codec/codec.h"
#include "common/optim/optimizer_options.h"

namespace gradstream {

// Per-chunk optimizer state: 0 (sgd), 1 (momentum, nesterov, adagrad) or 2
// (adam) slots of num_elems floats plus the step counter. Part of every
// checkpoint.
struct OptimizerState {
  std::vector<std::vector<float>> slots;
  uint64_t step = 0;
  // Upper bounds on |params| and |slot values| of the chunk (see [finite
  // apply]); negative = not known (a fresh or restored state, params set
  // from outside): found by a scan before the next update. Not checkpointed.
  double params_bound = -1;
  double slots_bound = -1;
};

// Number of state slots `type` keeps per element.
int NumStateSlots(OptimizerType type);

// Stateless apart from its options; per-chunk state is passed in. Thread-safe
// (callers serialize access to one chunk's params/state).
class Optimizer {
 public:
  // InvalidArgument for non-finite or negative hyper-parameters.
  [[nodiscard]] static absl::StatusOr<Optimizer> Create(const OptimizerOptions& options);

  const OptimizerOptions& options() const { return options_; }

  // A fresh state for a chunk of `num_elems` elements.
  OptimizerState NewState(size_t num_elems) const;

  // NOTE: [finite apply] An update never leaves a parameter or a state
  // value NaN or Inf; one that would is refused (InvalidArgument) with params
  // and state (step included) exactly as they were. Updates whose magnitude
  // bounds stay far below FLT_MAX run in place; others are written to a
  // scratch copy, checked and swapped in. Design:
  // docs/design/finite-apply.md.

  // params -= update(grad_scale * grad). InvalidArgument on size mismatch
  // (params, grad and state must all have params->size() elements) and for
  // an update that would not be finite (see [finite apply]).
  // `grad_bound`: an upper bound on |grad[i]| when the caller knows one
  // (saves a pass over grad), negative when not.
  [[nodiscard]] absl::Status Apply(std::vector<float>* params, absl::Span<const float> grad,
                                   float grad_scale, OptimizerState* state,
                                   double grad_bound = -1) const;

  // Decode + apply fused: the gradient is weight * decoded(header, payload).
  // Validates the chunk completely first, by the same rules as DecodeAdd
  // (see [chunk validation] in common/codec/decoder.h), and the state's
  // shape, and the result (see [finite apply]); on InvalidArgument neither
  // params nor state changed.
  [[nodiscard]] absl::Status ApplyEncoded(const ChunkHeader& header, absl::string_view payload,
                                          float weight, std::vector<float>* params,
                                          OptimizerState* state) const;

  // One lazy step over some rows of a row-sparse table: row i's `dim`
  // parameters at params[i], its state slots at slot0[i] and slot1[i] (null
  // spans where NumStateSlots says there are none), its gradient
  // grad_scale * grad[i * dim, (i + 1) * dim). Rows not named are not
  // touched, momentum and Adam moments included; state->step counts the
  // table's steps (Adam's bias correction, as torch's SparseAdam). All or
  // nothing: an update that would not be finite changes no row and not
  // the step (InvalidArgument, see [finite apply]).
  [[nodiscard]] absl::Status ApplyRows(absl::Span<float* const> params,
                                       absl::Span<float* const> slot0,
                                       absl::Span<float* const> slot1, uint32_t dim,
                                       absl::Span<const float> grad, float grad_scale,
                                       OptimizerState* state) const;

 private:
  explicit Optimizer(const OptimizerOptions& options) : options_(options) {}
  [[nodiscard]] absl::Status CheckState(size_t n, const OptimizerState& state) const;

  OptimizerOptions options_;
};

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_OPTIM_OPTIMIZER_H_
