// Which codec each tensor of a job travels with: the job spec's CodecPolicy
// (proto/job.proto), typed, and the rule that resolves it per tensor. The
// coordinator resolves it once when it builds the shard map; the codec each
// tensor got is then part of the map (TensorInfo::codec), which is what
// workers use.
#ifndef GRADSTREAM_COMMON_JOB_CODEC_POLICY_H_
#define GRADSTREAM_COMMON_JOB_CODEC_POLICY_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "job.pb.h"

namespace gradstream {

// The defaults of a job's policy live in codec_defaults.h ([codec defaults],
// [default policy]); the two size rules' defaults are here.
//
// NOTE: [layer-wise codec]
// twobit sends +-t with one fixed threshold t for the whole job. That suits a
// large tensor, where error feedback spreads many small gradients over many
// elements and clocks; it does not suit the small tensors -- biases, the first
// convolution, the classifier -- whose gradients are few, larger and of their
// own scale: with t = 0.5 they move in late, coarse steps. On Fashion-MNIST
// (CNN, 2 workers, 3000 clocks; bench/fashion_mnist.sh) twobit everywhere
// lost 2.3 points to fp32; twobit on the one large tensor (fc1.weight, 30720
// elements) with every smaller tensor sent as ternary -- the same 2 bits per
// element, but a scale taken from each chunk itself (TernGrad) -- ended
// 0.07 points above fp32, still at 16x fewer bytes than fp32. This is Hylo's
// layer-wise idea reduced to one rule with one knob: below
// `twobit_min_elems` (default 16384) twobit becomes ternary. An explicit
// per-tensor override is never rewritten, and every tensor's resolved codec
// is in the shard map and in `gradstream status`.
inline constexpr uint32_t kDefaultTwobitMinElems = 16384;

// NOTE: [layer-wise pull]
// A pull codec (see [pull codec] in common/codec/published.h) sends the
// changes of the parameters, with error feedback kept on the shard, so a
// worker computes its gradients at a published copy that trails the true
// parameters by one codec residual. On the small tensors -- biases, the first
// convolution, the classifier -- that residual is large next to their own,
// larger and faster moves, just as it was for twobit pushes ([layer-wise
// codec]). Measured with bench/fashion_mnist.sh (CNN, 2 workers, 3000 clocks;
// fp32 push and pull 0.8774): twobit push + twobit pull on every tensor
// 0.8672, ternary + ternary 0.8380; with tensors under 16384 elements pulled
// fp32, 0.8750 and 0.8717. Those tensors hold a small share of the model
// (11% of the CNN's elements): its pulls are about 6x smaller than fp32
// instead of 16x, the price of keeping accuracy.
// Rule: a tensor below `pull_min_elems` (default 16384, the same size as
// [layer-wise codec]'s) is pulled fp32; every tensor's pull codec is in the
// shard map (TensorInfo::pull_codec, ChunkInfo::pull_fp32) and in status.
inline constexpr uint32_t kDefaultPullMinElems = 16384;

struct CodecPolicy {
  std::string default_codec = "twobit";         // "none" | "twobit" | "ternary" | "onebit"
  std::map<std::string, std::string> overrides;  // tensor name -> codec name
  uint64_t min_compress_elems = 0;  // smaller tensors travel as "none" (TernGrad's size_to_binarize)
  float twobit_threshold = 0.5f;    // <= 0: adaptive per chunk
  float ternary_clip = 2.5f;        // <= 0: no clipping
  bool error_feedback = true;       // residual per chunk for every compressing codec
  uint64_t twobit_min_elems = 0;    // smaller twobit tensors go ternary; see [layer-wise codec]
  std::string pull_codec = "none";  // codec of pulled parameter changes; see [pull codec]
  uint64_t pull_min_elems = 0;      // smaller tensors are pulled fp32; see [layer-wise pull]
};

// The codec `policy` selects for a tensor: an override by name wins, then
// tensors below min_compress_elems get "none", then the default -- except
// that a twobit default becomes "ternary" below twobit_min_elems (see
// [layer-wise codec]). Names are not checked here (the codec registry answers
// unknown ones with NotFound).
std::string ResolveCodec(const CodecPolicy& policy, std::string_view tensor_name,
                         uint64_t num_elems);

// The codec a tensor's pulls carry: the job's pull codec, or "none" below
// pull_min_elems (see [layer-wise pull]).
std::string ResolvePullCodec(const CodecPolicy& policy, uint64_t num_elems);

// The typed policy of a normalized spec's codec field (see [normalized spec]).
CodecPolicy CodecPolicyFromProto(const v1::CodecPolicy& proto);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_JOB_CODEC_POLICY_H_
