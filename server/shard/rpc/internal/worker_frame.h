// The shard's parse of one Session frame (a serialized WorkerMessage, as the
// slices of a gRPC ByteBuffer) with the push payload copied once into a
// recycled buffer instead of a fresh string per push. See [push frames].
#ifndef GRADSTREAM_SERVER_SHARD_RPC_INTERNAL_WORKER_FRAME_H_
#define GRADSTREAM_SERVER_SHARD_RPC_INTERNAL_WORKER_FRAME_H_

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/buffer_pool.h"
#include "ps.pb.h"

namespace gradstream::shard::internal {

// NOTE: [push frames] Parses the serialized WorkerMessage held in `pieces`
// (in order) into `msg`, which must be empty. Returns false exactly when
// protobuf's parser would (the frame is not a WorkerMessage); on true, `msg`
// equals what protobuf would have parsed.
//
// A Push frame in the layout every protobuf serializer writes (the push as the
// only field, one-byte tags, each field of Push and EncodedChunk known and
// with its own wire type, `chunk` and `payload` at most once, lengths within
// the frame) is read here, bounds-checked, and its payload is copied once from
// `pieces` into a buffer from `pool` (its capacity reused; a payload under
// BufferPool::kMinPooledBytes gets a fresh one). Anything else (other
// messages, unknown or repeated fields, odd encodings, a truncated frame)
// goes to protobuf's own parser, so errors stay protobuf's. `pool` may be
// null: fresh buffers.
//
// Why this and not the alternatives (measured on loopback, 64 MiB fp32 push
// of 1 MiB chunks, shard CPU time per push, medians of 21 pairs,
// bench/pslite/pair.py): protobuf's parse 78.9 ms (12,500 page faults);
// this parse alone 68.5 ms (1.17x; gRPC's own slices still fault: 9,600);
// glibc malloc settings alone ([receive memory] in
// common/rpc/malloc_tuning.h) 51.6 ms (1.44x, 0 faults); both 51.3 ms
// (1.51x), which gs_shard runs. The parse stays because it removes a malloc
// and free of every payload whatever the allocator does (an embedded
// ShardServer, a sanitizer build). Zero copy is not on offer: gRPC 1.51 reads
// into 64 KiB slices, so a 1 MiB payload always spans ~17 of them and the
// decoders want it contiguous. A protobuf Arena does not help either: in
// protobuf 3.21 a bytes field on an arena still allocates its std::string
// buffer on the heap and copies into it.
[[nodiscard]] bool ParseWorkerMessage(absl::Span<const absl::string_view> pieces, BufferPool* pool,
                                      v1::WorkerMessage* msg);

}  // namespace gradstream::shard::internal

#endif  // GRADSTREAM_SERVER_SHARD_RPC_INTERNAL_WORKER_FRAME_H_
