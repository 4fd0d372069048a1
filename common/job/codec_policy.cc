// Per-tensor codec choice; see codec_policy.h.
#include "common/job/codec_policy.h"

namespace gradstream {

bool LayerWiseCodec(std::string_view codec) { return codec == "twobit" || codec == "onebit"; }

bool LayerWiseRuleApplies(std::string_view default_codec, uint64_t twobit_min_elems,
                          uint64_t min_compress_elems) {
  return LayerWiseCodec(default_codec) && twobit_min_elems > 1 &&
         twobit_min_elems > min_compress_elems;
}

std::string ResolveCodec(const CodecPolicy& policy, std::string_view tensor_name,
                         uint64_t num_elems) {
  auto it = policy.overrides.find(std::string(tensor_name));
  if (it != policy.overrides.end()) return it->second;
  if (num_elems < policy.min_compress_elems) return "none";
  if (LayerWiseCodec(policy.default_codec) && num_elems < policy.twobit_min_elems) {
    return "ternary";
  }
  return policy.default_codec;
}

std::string ResolvePullCodec(const CodecPolicy& policy, uint64_t num_elems) {
  if (policy.pull_codec.empty() || num_elems < policy.pull_min_elems) return "none";
  return policy.pull_codec;
}

}  // namespace gradstream
