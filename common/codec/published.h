// The published copy of a chunk: what a shard serves to pulls when the job
// has a pull codec, and what every worker reconstructs bit for bit.
//
// NOTE: [pull codec] Per chunk the shard keeps a published copy q of its
// parameters p and sends encoded changes of q: publishing encodes d = p - q
// and adds decoded(d) to q (ApplyPublishedDelta), so p - q is the shard-side
// residual and q trails p by at most one codec residual. A pull names the
// copy the worker holds (version + PublishedChecksum) and gets the deltas
// from there on, or q whole. Shard and worker apply a delta with the same
// code, so their copies stay equal bit for bit. Design:
// docs/design/pull-codec.md.
//
// NOTE: [pull codec default] A job that names its push codec pulls fp32
// unless it sets a pull codec; only the default policy (a job that names no
// codec) carries compressed pulls. Why, with the accuracy measured:
// docs/design/pull-codec-default.md.
#ifndef GRADSTREAM_COMMON_CODEC_PUBLISHED_H_
#define GRADSTREAM_COMMON_CODEC_PUBLISHED_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/codec/codec.h"
#include "common/codec/decoder.h"

namespace gradstream {

// CRC32C of the little-endian fp32 bits of `copy` (little-endian hosts).
uint32_t PublishedChecksum(absl::Span<const float> copy);

// NOTE: [fused apply] A delta is applied and checksummed block by block,
// kPublishBlock elements (16 KiB, still in L1), so a pulled chunk is read
// from memory once; the results are the bits of separate passes. A worker
// applies it where its parameters are ([copy in place] in
// worker/client/internal/published_copies.h). Measured:
// docs/design/fused-publish.md.
inline constexpr uint32_t kPublishBlock = 4096;
static_assert(kPublishBlock % 8 == 0, "a block starts on a payload byte of every codec");

// copy += decoded delta, with weight exactly 1 so the result does not depend
// on the decode path (portable or AVX2; a product with 1 is exact, so fused
// or not the add rounds once). Returns PublishedChecksum(copy) of the
// result (see [fused apply]). InvalidArgument as DecodeAdd; `copy` is then
// unchanged.
[[nodiscard]] absl::StatusOr<uint32_t> ApplyPublishedDelta(const ChunkHeader& header,
                                                           absl::string_view payload,
                                                           absl::Span<float> copy);
// The same for a delta already validated (ChunkDecoder::Create with
// copy.size() elements and weight 1), so a caller that checks several
// deltas before applying any validates each once.
uint32_t ApplyPublishedDelta(const ChunkDecoder& delta, absl::Span<float> copy);

// NOTE: [fused publish] For twobit, DeltaPublisher publishes a chunk in two
// passes over kPublishBlock-element blocks (sum |p - q|; then per block
// recompute d, encode, add the decoded block to q as every worker will, and
// checksum it while in L1); ternary512, whose scales are per 512 elements,
// in one such pass, with the bits of the whole-chunk encode; other codecs
// take five passes. The blocked twobit threshold may differ from the
// one-call encoder's in the last bits; the header carries it, so nothing
// depends on that. Measured: docs/design/fused-publish.md.
class DeltaPublisher {
 public:
  // The pull codec `type` (not kNone) for chunks of `num_elems` elements,
  // with PullCodecOptions().
  static absl::StatusOr<std::unique_ptr<DeltaPublisher>> Create(CodecType type,
                                                                uint32_t num_elems);

  // Encodes d = params - copy (the sizes must be num_elems) with `key`,
  // then copy += decoded(d) exactly as ApplyPublishedDelta does on a worker.
  // Returns PublishedChecksum(copy). InvalidArgument when d holds NaN or Inf;
  // `copy` is then unspecified (the caller publishes a snapshot instead).
  [[nodiscard]] absl::StatusOr<uint32_t> Publish(absl::Span<const float> params,
                                                 const EncodeKey& key, absl::Span<float> copy,
                                                 ChunkHeader* header, std::string* payload);

 private:
  DeltaPublisher(CodecType type, uint32_t num_elems, std::unique_ptr<Codec> encoder);
  absl::StatusOr<uint32_t> PublishTwoBit(absl::Span<const float> params, absl::Span<float> copy,
                                         ChunkHeader* header, std::string* payload);
  absl::StatusOr<uint32_t> PublishTernary512(absl::Span<const float> params,
                                             const EncodeKey& key, absl::Span<float> copy,
                                             ChunkHeader* header, std::string* payload);

  const CodecType type_;
  const uint32_t num_elems_;
  const std::unique_ptr<Codec> encoder_;  // null for twobit, ternary512 ([fused publish])
  std::vector<float> scratch_;            // d: a block (fused) or the chunk
};

// Options of the pull codec's encoder: twobit takes the adaptive threshold
// (parameter changes are orders of magnitude below a gradient threshold such
// as 0.5), ternary clips at 2.5 sigma.
CodecOptions PullCodecOptions();

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_CODEC_PUBLISHED_H_
