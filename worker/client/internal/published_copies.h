// The worker's copies of the shards' published parameters, one per chunk
// pulled with a pull codec (see [pull codec] in common/codec/published.h).
#ifndef GRADSTREAM_WORKER_CLIENT_INTERNAL_PUBLISHED_COPIES_H_
#define GRADSTREAM_WORKER_CLIENT_INTERNAL_PUBLISHED_COPIES_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/codec/codec.h"

namespace gradstream::client::internal {

// One published answer of a chunk: the copy at `version`, given whole
// (`snapshot`, fp32 bytes) or as `deltas` onto the copy held (neither: the
// held copy is current). Views into the received message.
struct PublishedAnswer {
  uint64_t version = 0;
  uint32_t checksum = 0;
  std::string_view snapshot;
  std::vector<std::pair<ChunkHeader, std::string_view>> deltas;
};

// Thread-safe (one lock per chunk).
//
// NOTE: [copy in place] A chunk's copy lives in the caller's buffer that the
// last answer was written to, not in one of its own: a delta is applied where
// the parameters are, one read and one write of the chunk instead of also
// writing a second copy out, and a worker holds its model once. So a pull
// into another buffer names no held copy (held() is nullopt for it) and gets
// a snapshot; and a change the caller made to its buffer since shows as a
// checksum mismatch (DataLoss) at the next answer, which drops the copy: the
// pull after gets a snapshot. Why: docs/design/pull-codec.md, "The copy in
// place".
class PublishedCopies {
 public:
  // `chunk_elems[id]` is chunk id's element count (chunk ids are dense).
  explicit PublishedCopies(const std::vector<uint32_t>& chunk_elems);

  struct Held {
    uint64_t version = 0;
    uint32_t checksum = 0;
  };
  // The copy of `chunk_id` held in `dst`; nullopt before its first published
  // answer, after a failed one, and when the copy is in another buffer.
  std::optional<Held> held(uint64_t chunk_id, const float* dst) const;

  // Takes the copy of `chunk_id` to `answer` in `dst` (chunk_elems floats),
  // where it then lives ([copy in place]). DataLoss when the result's
  // checksum is not the shard's; InvalidArgument for a snapshot of the wrong
  // size, deltas with no copy in `dst` to apply them to, or a delta that does
  // not decode. On any error the copy is dropped (the next pull asks for a
  // snapshot). `dst` is untouched on InvalidArgument; on DataLoss it holds
  // the mismatched result (the checksum is computed in the pass that writes
  // it, see [fused apply] in common/codec/published.h), a value within
  // rounding of the shard's unless `dst` was changed since the last answer,
  // until the next pull's snapshot replaces it; every caller pulls again or
  // fails on DataLoss.
  [[nodiscard]] absl::Status Apply(uint64_t chunk_id, const PublishedAnswer& answer, float* dst);

  // (chunk id, held) of every chunk with a copy, by chunk id.
  std::vector<std::pair<uint64_t, Held>> Summary() const;

 private:
  struct Copy {
    explicit Copy(uint32_t n) : num_elems(n) {}
    const uint32_t num_elems;
    mutable absl::Mutex mu;
    Held held ABSL_GUARDED_BY(mu);  // when `at` is set
    // The caller's buffer holding the copy; null before the first answer
    // and after a failed one.
    const float* at ABSL_GUARDED_BY(mu) = nullptr;
  };
  std::vector<std::unique_ptr<Copy>> copies_;  // by chunk id; fixed
};

}  // namespace gradstream::client::internal

#endif  // GRADSTREAM_WORKER_CLIENT_INTERNAL_PUBLISHED_COPIES_H_
