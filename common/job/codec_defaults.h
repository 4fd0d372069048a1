// A job's codec defaults, in one place.
//
// NOTE: [codec defaults] ApplyJobDefaults (job_spec.cc) fills every unset
// codec field of a spec from these, every CodecPolicy field starts at them,
// and the CLI's help and `gradstream status` name them; no other file writes
// one of these values as a literal. Why each value: docs/design/codec-defaults.md
// ([default policy], [layer-wise codec], [layer-wise pull]) and
// docs/design/precision-control.md. Include-only, depends on nothing.
#ifndef GRADSTREAM_COMMON_JOB_CODEC_DEFAULTS_H_
#define GRADSTREAM_COMMON_JOB_CODEC_DEFAULTS_H_

#include <cstdint>

namespace gradstream {

// NOTE: [default policy] Ternary (a scale per 512 elements) both ways, tensors under
// kDefaultMinCompressElems pushed and under kDefaultPullMinElems pulled fp32,
// every lossy path held to kDefaultPrecisionBound (docs/design/codec-defaults.md).

// The push codec of a job that names none.
inline constexpr char kDefaultPushCodec[] = "ternary512";
// The pull codec of such a job; a job that names its push codec by hand
// pulls fp32 unless it names a pull codec too.
inline constexpr char kDefaultPullCodec[] = "ternary512";
// twobit's threshold t (<= 0: adaptive, t = mean |g + r| of each chunk; see
// CodecOptions in common/codec/codec.h).
inline constexpr float kDefaultTwobitThreshold = 0.5f;
// ternary's clip, in standard deviations of the chunk (TernGrad's 2.5).
inline constexpr float kDefaultTernaryClip = 2.5f;

// A policy that names its push codec by hand pulls this unless it names a
// pull codec too ([pull codec default] in common/codec/published.h).
inline constexpr char kHandPickedPullCodec[] = "none";

// NOTE: [layer-wise codec] A twobit or onebit tensor under this many
// elements travels as ternary (docs/design/codec-defaults.md).
inline constexpr uint32_t kDefaultTwobitMinElems = 16384;

// NOTE: [layer-wise pull] A tensor under this many elements is pulled fp32
// under a pull codec (docs/design/codec-defaults.md).
inline constexpr uint32_t kDefaultPullMinElems = 16384;

// NOTE: [small tensors exact] A job pushes tensors under this many elements as
// "none", whatever its codec, unless it names a size (1: every tensor); the
// size below which it pulls them fp32 (TernGrad's size_to_binarize;
// docs/design/precision-control.md, "Small tensors exact").
inline constexpr uint64_t kDefaultMinCompressElems = kDefaultPullMinElems;

// The error bound of a lossy push, in clocks of signal; pulls are held to
// half of it (PullBound; common/job/precision.h, docs/design/precision-control.md).
inline constexpr float kDefaultPrecisionBound = 8.0f;
// Clocks sent at full precision before a path's codec (0: no warm-up).
inline constexpr uint32_t kDefaultPrecisionWarmup = 0;
// Clocks of descent a lossy path may owe on average before it is raised
// ([owed descent] in common/job/precision.h).
inline constexpr float kDefaultPrecisionMaxOwed = 0.5f;
// Whether workers probe exact pushes against their codecs and keep the
// faster (docs/design/link-choice.md).
inline constexpr bool kDefaultLinkChoice = false;

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_JOB_CODEC_DEFAULTS_H_
