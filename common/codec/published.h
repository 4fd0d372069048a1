// The published copy of a chunk: what a shard serves to pulls when the job
// has a pull codec, and what every worker reconstructs bit for bit.
//
// NOTE: [pull codec] With a pull codec the shard does not send its true
// parameters p. Per chunk it keeps a *published* copy q and sends changes of
// q, encoded: on publishing, d = p - q is encoded with the pull codec and q
// += decoded(d) (ApplyPublishedDelta). What was not sent stays in p - q, the
// shard-side residual of error feedback, and goes out with a later delta, so
// q trails p by at most one codec residual. The shard keeps the last deltas
// (at most a snapshot's weight of them); a pull names the copy the worker
// holds (version + checksum) and gets the deltas from there on, or q whole
// (a snapshot) when the shard cannot take that copy forward: the worker joins
// or restarted, is too far behind, or the shard restarted from a checkpoint.
// Shard and worker apply a delta the same way (this header), so their copies
// stay equal bit for bit; each answer carries PublishedChecksum(q) and the
// worker checks its copy against it. The published copy is in every shard
// checkpoint (the residual is p - q, so it is saved with them).
//
// NOTE: [pull codec default] Jobs pull fp32 unless they set a pull codec.
// The issue asked for the push codec as the default; measured, a compressed
// pull costs accuracy that a compressed push does not: the Fashion-MNIST
// script job of tests/torch (CNN, 2 workers, lr 0.05, 2 epochs of 6000
// images) ended at 0.712 with fp32 pulls and 0.466 with twobit pulls, before
// small tensors were pulled fp32 ([layer-wise pull] in
// common/job/codec_policy.h). With that rule the built-in CNN keeps twobit
// pulls within 0.3 point of fp32 (bench/fashion_mnist.sh: 0.8750 against
// 0.8774), but ternary pulls lose 0.6 point and the script job has not been
// measured again; and every compressed round costs the shard a publish
// (encode, decode, CRC32C of each chunk). Until a pull codec keeps accuracy
// on every model we measure, it is the user's choice per job.
#ifndef GRADSTREAM_COMMON_CODEC_PUBLISHED_H_
#define GRADSTREAM_COMMON_CODEC_PUBLISHED_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/codec/codec.h"

namespace gradstream {

// CRC32C of the little-endian fp32 bits of `copy` (little-endian hosts).
uint32_t PublishedChecksum(absl::Span<const float> copy);

// copy += decoded delta, with weight exactly 1 so the result does not depend
// on the decode path (portable or AVX2; a product with 1 is exact, so fused
// or not the add rounds once). InvalidArgument as DecodeAdd; `copy` is then
// unchanged.
[[nodiscard]] absl::Status ApplyPublishedDelta(const ChunkHeader& header,
                                               absl::string_view payload,
                                               absl::Span<float> copy);

// Options of the pull codec's encoder: twobit takes the adaptive threshold
// (parameter changes are orders of magnitude below a gradient threshold such
// as 0.5), ternary clips at 2.5 sigma.
CodecOptions PullCodecOptions();

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_CODEC_PUBLISHED_H_
