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
class PublishedCopies {
 public:
  // `chunk_elems[id]` is chunk id's element count (chunk ids are dense).
  explicit PublishedCopies(const std::vector<uint32_t>& chunk_elems);

  struct Held {
    uint64_t version = 0;
    uint32_t checksum = 0;
  };
  // The copy held of `chunk_id`; nullopt before its first published answer
  // and after a failed one.
  std::optional<Held> held(uint64_t chunk_id) const;

  // Takes the copy of `chunk_id` to `answer` and writes it to `dst`
  // (chunk_elems floats). DataLoss when the result's checksum is not the
  // shard's; InvalidArgument for a snapshot of the wrong size, deltas with
  // no copy to apply them to, or a delta that does not decode. On any error
  // the copy is dropped (the next pull asks for a snapshot). `dst` is
  // untouched on InvalidArgument; on DataLoss it holds the mismatched
  // result: it is written in the same pass that computes the checksum (see
  // [fused apply] in common/codec/published.h), so a copy that diverged --
  // a bug or corrupted memory, never expected -- reaches `dst` as a value
  // within rounding of the shard's until the next pull's snapshot replaces
  // it; every caller pulls again or fails on DataLoss.
  [[nodiscard]] absl::Status Apply(uint64_t chunk_id, const PublishedAnswer& answer, float* dst);

  // (chunk id, held) of every chunk with a copy, by chunk id.
  std::vector<std::pair<uint64_t, Held>> Summary() const;

 private:
  struct Copy {
    mutable absl::Mutex mu;
    bool has ABSL_GUARDED_BY(mu) = false;
    Held held ABSL_GUARDED_BY(mu);
    std::vector<float> values ABSL_GUARDED_BY(mu);
  };
  std::vector<std::unique_ptr<Copy>> copies_;  // by chunk id; fixed
};

}  // namespace gradstream::client::internal

#endif  // GRADSTREAM_WORKER_CLIENT_INTERNAL_PUBLISHED_COPIES_H_
