// Which codec each tensor of a job travels with: the job spec's CodecPolicy
// (proto/job.proto), typed (CodecPolicyFromProto in job_spec.h converts it),
// and the rule that resolves it per tensor. The
// coordinator resolves it once when it builds the shard map; the codec each
// tensor got is then part of the map (TensorInfo::codec), which is what
// workers use.
#ifndef GRADSTREAM_COMMON_JOB_CODEC_POLICY_H_
#define GRADSTREAM_COMMON_JOB_CODEC_POLICY_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/job/codec_defaults.h"

namespace gradstream {

// Every field starts at its value in [codec defaults] (codec_defaults.h).
// A policy built in code names its push codec, so its pulls are fp32 as a
// job's are when it names its push codec by hand ([pull codec default]), and
// it compresses every tensor; the whole default policy, pulls and
// [small tensors exact] included, is what ApplyJobDefaults (job_spec.h) fills
// into a spec.
struct CodecPolicy {
  // "none" | "twobit" | "ternary" | "onebit" | "fp16" | "int8" | "int4" | "ternary512"
  std::string default_codec = kDefaultPushCodec;
  std::map<std::string, std::string> overrides;    // tensor name -> codec name
  uint64_t min_compress_elems = 0;  // smaller tensors travel as "none"
                                    // ([small tensors exact]); 0 or 1: none do
  float twobit_threshold = kDefaultTwobitThreshold;  // <= 0: adaptive per chunk
  float ternary_clip = kDefaultTernaryClip;          // <= 0: no clipping
  bool error_feedback = true;  // residual per chunk for every compressing codec
  // Smaller twobit and onebit tensors go ternary; see [layer-wise codec].
  uint64_t twobit_min_elems = kDefaultTwobitMinElems;
  std::string pull_codec = kHandPickedPullCodec;  // codec of pulled parameter changes; see
                                                  // [pull codec]
  float precision_bound = kDefaultPrecisionBound;      // see common/job/precision.h
  uint32_t precision_warmup = kDefaultPrecisionWarmup;  // clocks at full precision first
  float precision_max_owed = kDefaultPrecisionMaxOwed;  // see [owed descent]; < 0: off
  bool link_choice = kDefaultLinkChoice;  // probe exact pushes, keep the faster (LinkChoice)
  uint64_t pull_min_elems = kDefaultPullMinElems;  // smaller tensors are pulled fp32; see
                                                   // [layer-wise pull]
};

// Whether twobit_min_elems applies to a default `codec`: the 1- and 2-bit
// codecs, whose scale does not fit a small tensor (see [layer-wise codec]).
bool LayerWiseCodec(std::string_view codec);
// Whether any tensor falls under that rule: a layer-wise default whose
// twobit_min_elems lies above min_compress_elems (smaller tensors go exact).
bool LayerWiseRuleApplies(std::string_view default_codec, uint64_t twobit_min_elems,
                          uint64_t min_compress_elems);

// The codec `policy` selects for a tensor: an override by name wins, then
// tensors below min_compress_elems get "none", then the default -- except
// that a twobit or onebit default becomes "ternary" below twobit_min_elems
// (see [layer-wise codec]). Names are not checked here (the codec registry answers
// unknown ones with NotFound).
std::string ResolveCodec(const CodecPolicy& policy, std::string_view tensor_name,
                         uint64_t num_elems);

// The codec a tensor's pulls carry: the job's pull codec, or "none" below
// pull_min_elems (see [layer-wise pull]).
std::string ResolvePullCodec(const CodecPolicy& policy, uint64_t num_elems);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_JOB_CODEC_POLICY_H_
