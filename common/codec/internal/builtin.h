// Factory of the built-in codecs, used by the registry. Internal.
#ifndef GRADSTREAM_COMMON_CODEC_INTERNAL_BUILTIN_H_
#define GRADSTREAM_COMMON_CODEC_INTERNAL_BUILTIN_H_

#include <memory>

#include "common/codec/codec.h"

namespace gradstream {
namespace internal {

std::unique_ptr<Codec> NewBuiltinCodec(CodecType type, const CodecOptions& options);

}  // namespace internal
}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_CODEC_INTERNAL_BUILTIN_H_
