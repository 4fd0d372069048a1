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

struct CodecPolicy {
  std::string default_codec = "twobit";         // "none" | "twobit" | "ternary" | "onebit"
  std::map<std::string, std::string> overrides;  // tensor name -> codec name
  uint64_t min_compress_elems = 0;  // smaller tensors travel as "none" (TernGrad's size_to_binarize)
  float twobit_threshold = 0.5f;    // <= 0: adaptive per chunk
  float ternary_clip = 2.5f;        // <= 0: no clipping
  bool error_feedback = true;       // residual per chunk for every compressing codec
};

// The codec `policy` selects for a tensor: an override by name wins, then
// tensors below min_compress_elems get "none", then the default. Names are not
// checked here (the codec registry answers unknown ones with NotFound).
std::string ResolveCodec(const CodecPolicy& policy, std::string_view tensor_name,
                         uint64_t num_elems);

// The typed policy of a normalized spec's codec field (see [normalized spec]).
CodecPolicy CodecPolicyFromProto(const v1::CodecPolicy& proto);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_JOB_CODEC_POLICY_H_
