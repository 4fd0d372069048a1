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
// NOTE: [pull codec default] A job that names its push codec pulls fp32
// unless it sets a pull codec; a job that names no codec at all gets the
// measured default policy, ternary pulls included ([default policy] in
// common/job/codec_defaults.h). Why a hand-picked push codec does not bring
// its pull codec along: the issue asked for that; measured, a compressed
// pull costs accuracy that a compressed push does not: the Fashion-MNIST
// script job of tests/torch (CNN, 2 workers, lr 0.05, 2 epochs of 6000
// images) ended at 0.712 with fp32 pulls and 0.466 with twobit pulls, before
// small tensors were pulled fp32 ([layer-wise pull] in
// common/job/codec_defaults.h). With that rule the built-in CNN keeps twobit
// pulls within 0.3 point of fp32 (bench/fashion_mnist.sh: 0.8750 against
// 0.8774), but ternary pulls lose 0.6 point, and the script job, measured
// again with the rule (tests/torch/fashion_mnist_job_test.py --codecs
// none,twobit --twobit_flags=--pull_codec=twobit: 500 clocks, lr 0.02), ends
// at 0.8277 against 0.8450 single-process (-1.7 pt) where twobit pushes
// alone lose 0.3; and every compressed round costs the shard a publish.
// Ternary pulls, with ternary pushes, did keep accuracy on bench/tta's three
// models, so the defaults carry them; beside any other push codec a pull
// codec stays the user's choice per job.
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

namespace gradstream {

// CRC32C of the little-endian fp32 bits of `copy` (little-endian hosts).
uint32_t PublishedChecksum(absl::Span<const float> copy);

// NOTE: [fused apply] Applying a delta, checksumming the result and (on a
// worker) copying it into the caller's parameters were three passes over
// every pulled chunk, each reading it back from L2 or memory; on a worker
// they run on the stream's reader thread, in the pull's critical path. Done
// block by block (kPublishBlock elements, 16 KiB: the block is still in L1
// when it is checksummed and copied), a chunk is read from memory once. The
// arithmetic is DecodeAdd's per element and the checksum is extended block
// by block, so the results are the same bits as the three passes.
inline constexpr uint32_t kPublishBlock = 4096;
static_assert(kPublishBlock % 8 == 0, "a block starts on a payload byte of every codec");

// copy += decoded delta, with weight exactly 1 so the result does not depend
// on the decode path (portable or AVX2; a product with 1 is exact, so fused
// or not the add rounds once); then, when `out` is not null, out = copy.
// Returns PublishedChecksum(copy) of the result (see [fused apply]).
// InvalidArgument as DecodeAdd; `copy` and `out` are then unchanged.
[[nodiscard]] absl::StatusOr<uint32_t> ApplyPublishedDelta(const ChunkHeader& header,
                                                           absl::string_view payload,
                                                           absl::Span<float> copy,
                                                           float* out = nullptr);

// PublishedChecksum(copy), copying `copy` to `out` (copy.size() floats) on
// the way, in one pass (see [fused apply]).
uint32_t ChecksumAndCopy(absl::Span<const float> copy, float* out);

// NOTE: [fused publish] Publishing a chunk was five passes: d = p - q into a
// scratch chunk, mean |d| (twobit's adaptive threshold), the encode, q +=
// decoded(d), the checksum of q; p and q come from memory (q was last
// touched a step ago) and the scratch from L3. For twobit -- what a
// compressed pull job mostly uses -- DeltaPublisher makes it two passes over
// kPublishBlock-element blocks: the first sums |p - q| block by block, the
// second recomputes each block of d into an L1 scratch, encodes it with the
// threshold, adds the decoded block to q the way every worker will
// (DecodeAdd's arithmetic, weight 1) and checksums it while it is in L1.
// The threshold is mean |d| summed in another order than the one-call
// encoder's (per block, then across blocks), so it may differ from it in
// the last bits; nothing depends on that: the header carries it and shard
// and workers both decode with it. Other codecs take the five passes.
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

  const CodecType type_;
  const uint32_t num_elems_;
  const std::unique_ptr<Codec> encoder_;  // null for twobit (fused, see [fused publish])
  std::vector<float> scratch_;            // d: a block (twobit) or the chunk
};

// Options of the pull codec's encoder: twobit takes the adaptive threshold
// (parameter changes are orders of magnitude below a gradient threshold such
// as 0.5), ternary clips at 2.5 sigma.
CodecOptions PullCodecOptions();

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_CODEC_PUBLISHED_H_
