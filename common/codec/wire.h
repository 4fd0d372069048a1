// The codec's wire form: the one conversion between a chunk (ChunkHeader +
// payload) and v1::EncodedChunk (proto/ps.proto). Workers build pushes with
// ChunkToWire, the shard reads them with ChunkHeaderFromWire; nothing else
// touches EncodedChunk's fields or v1::Codec. Layouts are in README.md here.
//
// A separate library (gs_codec_wire) so gs_codec stays free of protobuf: the
// codec fuzzer links gs_codec alone.
#ifndef GRADSTREAM_COMMON_CODEC_WIRE_H_
#define GRADSTREAM_COMMON_CODEC_WIRE_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/codec/codec.h"
#include "ps.pb.h"

namespace gradstream {

// v1::Codec value of `type` (tied to CodecType by a static_assert in wire.cc).
// `type` must be known (IsKnownCodec).
v1::Codec CodecToWire(CodecType type);

// Writes the header fields of `chunk`. The payload field is left as it is, so
// an encoder can write straight into chunk->mutable_payload().
void ChunkToWire(const ChunkHeader& header, v1::EncodedChunk* chunk);
// Header fields and payload.
void ChunkToWire(const ChunkHeader& header, std::string payload, v1::EncodedChunk* chunk);

// The header of `chunk` (its payload is chunk.payload()). InvalidArgument for
// a codec value this build does not know. Checks nothing else: the payload
// and the scales are checked, with the consumer's element count, by
// ChunkDecoder::Create (see [chunk validation] in decoder.h).
[[nodiscard]] absl::StatusOr<ChunkHeader> ChunkHeaderFromWire(const v1::EncodedChunk& chunk);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_CODEC_WIRE_H_
