// Rows of a row-sparse table in fp16 on the wire (ps.proto PushedRows and
// PulledRows; docs/design/sparse-tables.md, "Rows at the fp16 level"): x /
// scale in IEEE half, one scale = HalfScale(max |x|) per message ([fp16
// scale] in common/codec/internal/kernels.h).
#ifndef GRADSTREAM_COMMON_CODEC_HALF_ROWS_H_
#define GRADSTREAM_COMMON_CODEC_HALF_ROWS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gradstream {

// The scale of `x`'s message: HalfScale(max |x|).
float HalfRowsScale(absl::Span<const float> x);
// Appends half(x[i] / scale) to `out`, 2 bytes each, rounded to nearest
// even; a value past half's range becomes +-inf (the receiver refuses it).
void EncodeHalfRows(absl::Span<const float> x, float scale, std::string* out);
// out[i] = half_i * scale. InvalidArgument when `bytes` is not 2 per value
// of `out` or `scale` is not a positive finite float.
[[nodiscard]] absl::Status DecodeHalfRows(absl::string_view bytes, float scale,
                                          absl::Span<float> out);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_CODEC_HALF_ROWS_H_
