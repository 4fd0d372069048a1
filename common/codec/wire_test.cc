#include "common/codec/wire.h"

#include <cctype>
#include <string>

#include "gtest/gtest.h"

namespace gradstream {
namespace {

TEST(Wire, EveryCodecRoundTrips) {
  for (int i = 0; i < kNumCodecTypes; ++i) {
    const auto type = static_cast<CodecType>(i);
    const ChunkHeader h{type, 1234, 0.25f, -0.5f};
    v1::EncodedChunk chunk;
    ChunkToWire(h, "payload", &chunk);
    EXPECT_EQ(chunk.payload(), "payload");
    absl::StatusOr<ChunkHeader> back = ChunkHeaderFromWire(chunk);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->codec, h.codec);
    EXPECT_EQ(back->num_elems, h.num_elems);
    EXPECT_EQ(back->scale, h.scale);
    EXPECT_EQ(back->scale2, h.scale2);
  }
}

TEST(Wire, ProtoNamesMatchCodecNames) {
  // CODEC_TWOBIT is "twobit": the two enums say the same thing by name too.
  for (int i = 0; i < kNumCodecTypes; ++i) {
    const auto type = static_cast<CodecType>(i);
    std::string want = "CODEC_";
    for (char c : CodecTypeName(type)) want += static_cast<char>(std::toupper(c));
    EXPECT_EQ(v1::Codec_Name(CodecToWire(type)), want);
  }
}

TEST(Wire, HeaderOnlyLeavesThePayloadAlone) {
  v1::EncodedChunk chunk;
  chunk.set_payload("encoded in place");
  ChunkToWire(ChunkHeader{CodecType::kOneBit, 3, 1.0f, -1.0f}, &chunk);
  EXPECT_EQ(chunk.payload(), "encoded in place");
  EXPECT_EQ(chunk.codec(), v1::CODEC_ONEBIT);
}

TEST(Wire, UnknownCodecIsInvalidArgument) {
  for (int bad : {kNumCodecTypes, 9, -1, 1 << 20}) {
    v1::EncodedChunk chunk;
    chunk.set_codec(static_cast<v1::Codec>(bad));
    EXPECT_EQ(ChunkHeaderFromWire(chunk).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace gradstream
