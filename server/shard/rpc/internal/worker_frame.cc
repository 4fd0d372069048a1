// See worker_frame.h and [push frames].
#include "server/shard/rpc/internal/worker_frame.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <utility>

#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace gradstream::shard::internal {
namespace {

namespace pb = ::gradstream::v1;

// One-byte tags ((field << 3) | wire type) of the fields the fast path reads.
constexpr uint8_t kPushTag = (2 << 3) | 2;  // WorkerMessage.push, length-delimited
constexpr uint8_t kSeqTag = (1 << 3) | 0;   // Push.seq, varint
constexpr uint8_t kChunkIdTag = (2 << 3) | 0;
constexpr uint8_t kClockTag = (3 << 3) | 0;
constexpr uint8_t kChunkTag = (4 << 3) | 2;  // Push.chunk, length-delimited
constexpr uint8_t kCodecTag = (1 << 3) | 0;  // EncodedChunk.codec, varint
constexpr uint8_t kNumElemsTag = (2 << 3) | 0;
constexpr uint8_t kScaleTag = (3 << 3) | 5;  // fixed32
constexpr uint8_t kScale2Tag = (4 << 3) | 5;
constexpr uint8_t kPayloadTag = (5 << 3) | 2;  // length-delimited

// A varint takes at most 10 bytes (protobuf's limit too). Lengths are read
// only up to 4 bytes (< 256 MiB): protobuf reads those the same whatever
// their encoding, and longer ones take its path.
constexpr int kMaxVarintBytes = 10;
constexpr int kMaxLengthBytes = 4;

// Reads the bytes of `pieces` in order. Every read checks the bytes left.
class Cursor {
 public:
  explicit Cursor(absl::Span<const absl::string_view> pieces) : pieces_(pieces) {
    for (absl::string_view p : pieces) total_ += p.size();
  }

  size_t position() const { return pos_; }
  size_t total() const { return total_; }

  bool ReadByte(uint8_t* b) {
    if (pos_ == total_) return false;
    SkipSpentPieces();
    *b = static_cast<uint8_t>(pieces_[piece_][offset_]);
    ++offset_;
    ++pos_;
    return true;
  }

  // A varint of at most `max_bytes` bytes ending before `end`; bits past the
  // 64th are dropped, as protobuf drops them.
  bool ReadVarint(size_t end, int max_bytes, uint64_t* v) {
    uint64_t value = 0;
    for (int i = 0; i < max_bytes && pos_ < end; ++i) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      value |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
      if (b < 0x80) {
        *v = value;
        return true;
      }
    }
    return false;
  }

  // A little-endian fixed32 ending before `end`.
  bool ReadFixed32(size_t end, uint32_t* v) {
    if (end < pos_ + 4) return false;
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      value |= static_cast<uint32_t>(b) << (8 * i);
    }
    *v = value;
    return true;
  }

  // A length ending before `end` whose bytes also end before `end`.
  bool ReadLength(size_t end, size_t* len) {
    uint64_t v;
    if (!ReadVarint(end, kMaxLengthBytes, &v) || v > end - pos_) return false;
    *len = static_cast<size_t>(v);
    return true;
  }

  // Appends the next `n` bytes to `out` (the caller checked n fits).
  void AppendTo(size_t n, std::string* out) {
    while (n > 0) {
      SkipSpentPieces();
      const size_t take = std::min(n, pieces_[piece_].size() - offset_);
      out->append(pieces_[piece_].data() + offset_, take);
      offset_ += take;
      pos_ += take;
      n -= take;
    }
  }

 private:
  // Moves to the first piece with bytes left (callers ensure one exists).
  void SkipSpentPieces() {
    while (offset_ == pieces_[piece_].size()) {
      ++piece_;
      offset_ = 0;
    }
  }

  const absl::Span<const absl::string_view> pieces_;
  size_t total_ = 0;
  size_t pos_ = 0;
  size_t piece_ = 0;
  size_t offset_ = 0;
};

float FloatFromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// The EncodedChunk that ends at `end`. False: not the fast path's layout.
bool ParseChunk(Cursor& in, size_t end, BufferPool* pool, pb::EncodedChunk* chunk) {
  bool have_payload = false;
  while (in.position() < end) {
    uint8_t tag;
    uint64_t v;
    uint32_t bits;
    if (!in.ReadByte(&tag)) return false;
    switch (tag) {
      case kCodecTag:
        if (!in.ReadVarint(end, kMaxVarintBytes, &v)) return false;
        chunk->set_codec(static_cast<pb::Codec>(v));  // as protobuf converts it
        break;
      case kNumElemsTag:
        if (!in.ReadVarint(end, kMaxVarintBytes, &v)) return false;
        chunk->set_num_elems(static_cast<uint32_t>(v));
        break;
      case kScaleTag:
        if (!in.ReadFixed32(end, &bits)) return false;
        chunk->set_scale(FloatFromBits(bits));
        break;
      case kScale2Tag:
        if (!in.ReadFixed32(end, &bits)) return false;
        chunk->set_scale2(FloatFromBits(bits));
        break;
      case kPayloadTag: {
        size_t n;
        if (have_payload || !in.ReadLength(end, &n)) return false;
        have_payload = true;
        std::string* payload = chunk->mutable_payload();
        // Small payloads are cheap to allocate and would tie up a big pooled
        // buffer; a pool miss gives an empty string, so reserve either way.
        if (pool != nullptr && n >= BufferPool::kMinPooledBytes) *payload = pool->Take(n);
        payload->reserve(n);
        in.AppendTo(n, payload);
        break;
      }
      default:
        return false;
    }
  }
  return in.position() == end;
}

// The fast path of [push frames]. False: not its layout (`msg` is then
// partly filled).
bool ParseCanonicalPush(absl::Span<const absl::string_view> pieces, BufferPool* pool,
                        pb::WorkerMessage* msg) {
  Cursor in(pieces);
  const size_t end = in.total();
  uint8_t tag;
  size_t len;
  if (!in.ReadByte(&tag) || tag != kPushTag || !in.ReadLength(end, &len) ||
      len != end - in.position()) {
    return false;
  }
  pb::Push* push = msg->mutable_push();
  bool have_chunk = false;
  while (in.position() < end) {
    uint64_t v;
    if (!in.ReadByte(&tag)) return false;
    switch (tag) {
      case kSeqTag:
        if (!in.ReadVarint(end, kMaxVarintBytes, &v)) return false;
        push->set_seq(v);
        break;
      case kChunkIdTag:
        if (!in.ReadVarint(end, kMaxVarintBytes, &v)) return false;
        push->set_chunk_id(v);
        break;
      case kClockTag:
        if (!in.ReadVarint(end, kMaxVarintBytes, &v)) return false;
        push->set_clock(v);
        break;
      case kChunkTag:
        // A second `chunk` would merge into the first: protobuf's job.
        if (have_chunk || !in.ReadLength(end, &len)) return false;
        have_chunk = true;
        if (!ParseChunk(in, in.position() + len, pool, push->mutable_chunk())) return false;
        break;
      default:
        return false;
    }
  }
  return true;
}

}  // namespace

bool ParseWorkerMessage(absl::Span<const absl::string_view> pieces, BufferPool* pool,
                        pb::WorkerMessage* msg) {
  if (ParseCanonicalPush(pieces, pool, msg)) return true;
  if (pool != nullptr && msg->has_push()) {
    pool->Give(std::move(*msg->mutable_push()->mutable_chunk()->mutable_payload()));
  }
  msg->Clear();
  // protobuf's parser over the same pieces, as gRPC's deserializer runs it.
  std::deque<google::protobuf::io::ArrayInputStream> arrays;  // not movable
  for (absl::string_view p : pieces) arrays.emplace_back(p.data(), static_cast<int>(p.size()));
  std::vector<google::protobuf::io::ZeroCopyInputStream*> streams;
  streams.reserve(arrays.size());
  for (auto& a : arrays) streams.push_back(&a);
  google::protobuf::io::ConcatenatingInputStream all(streams.data(),
                                                     static_cast<int>(streams.size()));
  return msg->ParseFromZeroCopyStream(&all);
}

}  // namespace gradstream::shard::internal
