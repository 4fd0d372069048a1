// The shard's side of a pull codec: per chunk, the published copy, the
// recent encoded deltas, and what a pull gets (see [pull codec] in
// common/codec/published.h).
//
// NOTE: [eager publish] In sync mode Job publishes a chunk on an executor
// thread as soon as its round closes (Job::PublishSoon), so pulls only copy
// encoded bytes; SSP and async publish once per reader clock, when a pull is
// served. A pull of 1 MiB or more is served off the stream's strand, its
// chunks in parallel. Publication runs under the chunk's parameter lock and
// this class's chunk lock: whoever comes first publishes, the other finds
// the copy current. Why: docs/design/eager-publish.md.
#ifndef GRADSTREAM_SERVER_SHARD_PULL_PUBLISHER_H_
#define GRADSTREAM_SERVER_SHARD_PULL_PUBLISHER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/codec/codec.h"
#include "common/codec/published.h"
#include "common/env/env.h"
#include "common/job/precision.h"
#include "server/shard/types.h"

namespace gradstream::shard {

// Thread-safe (one lock per chunk). Memory per chunk: the published copy,
// the DeltaPublisher's scratch, and deltas weighing at most one fp32 snapshot (16 twobit
// or ternary deltas, 32 onebit ones): the history is bounded by the codec,
// not by the job's length. Sync mode needs one delta per clock; SSP with s
// publishes at most once per reader clock, so a worker at the bound is about
// s + 1 deltas behind; farther behind, a snapshot is the cheaper answer anyway.
class PullPublisher {
 public:
  // `codec` must not be kNone; chunks marked pull_fp32 are published whole at
  // every publication (a snapshot, see [layer-wise pull]). `once_per_clock`:
  // publish at most once per reader clock (SSP, async: a copy published for the
  // fastest reader satisfies every slower one) instead of at every version
  // change (sync). `precision` controls every compressed chunk's error
  // (common/job/precision.h), measured at the publications MeasureDue names (a
  // level's first, then every kMeasureEvery-th): a flush publishes an int8
  // delta or a snapshot ([fine flush]), a chunk raised to int4 or int8
  // publishes such deltas, one raised to kNone is published whole. `link`: the
  // link choice ([link choice] in precision.h), by reader clock: a probe times
  // the publications of consecutive clocks with exact (whole) and compressed
  // publications, and the faster holds. `env` times the publications (not
  // owned).
  PullPublisher(CodecType codec, bool once_per_clock, const std::vector<ChunkSpec>& chunks,
                const PrecisionPolicy& precision = PrecisionPolicy{},
                const LinkChoicePolicy& link = LinkChoicePolicy{}, Env* env = Env::Default());

  // Answers one pull of chunk `chunk_id` by a reader at `reader_clock` that
  // holds `held` (null: nothing): first publishes `params` (the true
  // parameters at `version`) when they moved since the last publication and
  // the publication rule allows, then fills `out` (published, version,
  // checksum and either the deltas from `held` on, or a snapshot, or nothing
  // when `held` is current). Returns the bytes the answer carries. The caller
  // serializes calls per chunk with the parameters' lock.
  size_t Serve(uint64_t chunk_id, absl::Span<const float> params, uint64_t version,
               uint64_t reader_clock, const HeldCopy* held, PulledChunk* out);

  // Publishes `params` at `version` now, ahead of any pull (see [eager
  // publish]): what Serve's first step would do for a reader at
  // `reader_clock`, so the pulls that follow only copy encoded bytes. A
  // no-op when the copy is at `version` already or the rule forbids it.
  // The caller serializes calls per chunk with the parameters' lock.
  void Publish(uint64_t chunk_id, absl::Span<const float> params, uint64_t version,
               uint64_t reader_clock);

  // The chunk's pull error and precision decisions; nullopt for a chunk
  // published fp32 by its size.
  std::optional<PathPrecision> Precision(uint64_t chunk_id) const;
  // The link choice's newest decision; nullopt with it off or before one.
  std::optional<LinkDecision> LinkDecided() const;

  // What a checkpoint keeps of a chunk; nullopt before its first pull.
  std::optional<PublishedCopy> Save(uint64_t chunk_id) const;
  // Restores a saved copy (the history starts empty: workers holding an
  // older copy get a snapshot). False when the chunk or its size is unknown.
  bool Restore(const PublishedCopy& saved);

 private:
  struct Delta {
    uint64_t from_version = 0;
    uint32_t from_checksum = 0;
    EncodedDelta delta;
  };
  struct Chunk {
    Chunk(uint32_t n, bool whole) : num_elems(n), fp32(whole) {}
    const uint32_t num_elems;
    const bool fp32;  // published whole, never as a delta
    mutable absl::Mutex mu;
    bool has ABSL_GUARDED_BY(mu) = false;  // a copy was published
    uint64_t version ABSL_GUARDED_BY(mu) = 0;
    uint32_t checksum ABSL_GUARDED_BY(mu) = 0;
    uint64_t published_clock ABSL_GUARDED_BY(mu) = 0;  // reader clock of the last publication
    std::vector<float> copy ABSL_GUARDED_BY(mu);
    std::deque<Delta> history ABSL_GUARDED_BY(mu);   // oldest first
    size_t history_bytes ABSL_GUARDED_BY(mu) = 0;
    std::unique_ptr<DeltaPublisher> publisher ABSL_GUARDED_BY(mu);  // null for fp32 chunks
    // Made when raised to a level that still encodes (int8).
    std::unique_ptr<DeltaPublisher> raised ABSL_GUARDED_BY(mu);
    CodecType raised_codec ABSL_GUARDED_BY(mu) = CodecType::kNone;
    // Compressed chunks: the error control, the publications so far, and
    // the parameters at the last one when `kept` (the next is measured:
    // MeasureDue, by publication; the update since is measured against them).
    std::unique_ptr<PrecisionController> precision ABSL_GUARDED_BY(mu);
    uint64_t publications ABSL_GUARDED_BY(mu) = 0;
    bool kept ABSL_GUARDED_BY(mu) = false;
    std::vector<float> published_params ABSL_GUARDED_BY(mu);
  };

  Chunk& Find(uint64_t chunk_id) const;
  // Publishes when the copy is behind `version` and the rule allows it.
  void MaybePublish(uint64_t chunk_id, Chunk& c, absl::Span<const float> params,
                    uint64_t version, uint64_t reader_clock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Takes the copy to `params` at `version`: a delta, or the params whole
  // the first time, for fp32 chunks, and should encoding fail.
  void PublishDelta(uint64_t chunk_id, Chunk& c, absl::Span<const float> params,
                    uint64_t version, bool exact) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  static void Reset(Chunk& c, absl::Span<const float> params, uint64_t version)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Takes the copy to `params` at `version` by one delta of `publisher`'s
  // codec, appended to the history (which drops what a snapshot outweighs).
  // On an error (non-finite parameters) the history is untouched but the
  // copy may be part-updated (twobit and ternary512 publish block by block):
  // the caller resets it.
  static absl::Status PublishWith(DeltaPublisher& publisher, uint64_t chunk_id, Chunk& c,
                                  absl::Span<const float> params, uint64_t version)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // When due, measures what publishing `params` left in p - q against the
  // update since the last publication; a flush takes the copy to `params` at
  // once. Then counts the publication.
  static void Control(uint64_t chunk_id, Chunk& c, absl::Span<const float> params,
                      uint64_t version) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Counts a publication of `params`, keeping them when the next is measured.
  static void Count(Chunk& c, absl::Span<const float> params) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // The flush as a kFlushCodec delta at the same version ([fine flush]):
  // true with |p - q|^2 after it in `left2` when published; false when the
  // chunk's level is kFlushCodec or finer or the encode fails (the caller
  // then publishes the snapshot).
  static bool FlushByDelta(uint64_t chunk_id, Chunk& c, absl::Span<const float> params,
                           uint64_t version, double* left2) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

  // Whether the publications for `reader_clock` go whole; times the clocks.
  bool LinkExact(uint64_t reader_clock);

  const CodecType codec_;
  const bool once_per_clock_;
  Env* const env_;
  const bool link_enabled_;
  mutable absl::Mutex link_mu_;
  LinkChoice link_ ABSL_GUARDED_BY(link_mu_);
  uint64_t link_clock_ ABSL_GUARDED_BY(link_mu_) = 0;  // newest reader clock published for
  absl::flat_hash_map<uint64_t, std::unique_ptr<Chunk>> chunks_;  // fixed after construction
};

}  // namespace gradstream::shard

#endif  // GRADSTREAM_SERVER_SHARD_PULL_PUBLISHER_H_
