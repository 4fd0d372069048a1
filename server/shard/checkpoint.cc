#include "server/shard/checkpoint.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/env/crc32c.h"
#include "common/env/record.h"

namespace gradstream::shard {
namespace {

// Version 1 is the body layout in checkpoint.h.
constexpr RecordFormat kFormat{"checkpoint", "GSSHCKPT", 1};

// NOTE: [legacy checkpoint frame]
// Before the common record frame a checkpoint was framed on its own:
//   "GSCKPT01"  u64 body_len  body  u32 crc32c("GSCKPT01" .. body)
// with the same body. Such files still load, so a shard upgraded in place
// restores its jobs; the next checkpoint rewrites them in the new frame.
constexpr std::string_view kLegacyMagic = "GSCKPT01";
// Opens the optional published-copies section after the chunks.
constexpr uint32_t kPublishedTag = 0x4c425550;  // "PUBL"
// Opens the optional table rows section, after the published copies.
constexpr uint32_t kRowsTag = 0x53574f52;  // "ROWS"


absl::StatusOr<std::string_view> LegacyBody(std::string_view data) {
  constexpr size_t kHeader = kLegacyMagic.size() + 8;
  if (data.size() < kHeader + 4) {
    return absl::DataLossError("checkpoint: truncated legacy header");
  }
  uint64_t body_len = 0;
  std::memcpy(&body_len, data.data() + kLegacyMagic.size(), 8);
  if (body_len != data.size() - kHeader - 4) {
    return absl::DataLossError(absl::StrCat("checkpoint: length mismatch (header says ", body_len,
                                            " body bytes, file has ", data.size() - kHeader - 4,
                                            "): truncated or appended"));
  }
  uint32_t stored = 0;
  std::memcpy(&stored, data.data() + data.size() - 4, 4);
  const uint32_t actual = Crc32c(data.substr(0, data.size() - 4));
  if (stored != actual) {
    return absl::DataLossError(
        absl::StrCat("checkpoint: CRC32C mismatch (stored ", stored, ", computed ", actual, ")"));
  }
  return data.substr(kHeader, body_len);
}

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) { Raw(&v, 4); }
  void U64(uint64_t v) { Raw(&v, 8); }
  void Str(std::string_view s) {
    U64(s.size());
    out_.append(s.data(), s.size());
  }
  void Floats(const std::vector<float>& v) {
    U64(v.size());
    Raw(v.data(), v.size() * sizeof(float));
  }
  void U64s(const std::vector<uint64_t>& v) {
    U64(v.size());
    for (uint64_t x : v) U64(x);
  }
  void Raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

// Every read is bounds-checked; the first failure sticks.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  bool done() const { return ok_ && pos_ == in_.size(); }
  uint8_t U8() {
    uint8_t v = 0;
    Raw(&v, 1);
    return v;
  }
  uint32_t U32() {
    uint32_t v = 0;
    Raw(&v, 4);
    return v;
  }
  uint64_t U64() {
    uint64_t v = 0;
    Raw(&v, 8);
    return v;
  }
  std::string Str() {
    const uint64_t n = U64();
    if (!Fits(n)) return {};
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  std::vector<float> Floats() {
    const uint64_t n = U64();
    if (n > (in_.size() - pos_) / sizeof(float)) {
      ok_ = false;
      return {};
    }
    std::vector<float> v(n);
    Raw(v.data(), n * sizeof(float));
    return v;
  }
  std::vector<uint64_t> U64s() {
    const uint64_t n = U64();
    if (n > (in_.size() - pos_) / 8) {
      ok_ = false;
      return {};
    }
    std::vector<uint64_t> v(n);
    for (auto& x : v) x = U64();
    return v;
  }
  // A count of items that each take at least `min_bytes`: bounds a resize.
  uint64_t Count(size_t min_bytes) {
    const uint64_t n = U64();
    if (n > (in_.size() - pos_) / min_bytes) ok_ = false;
    return ok_ ? n : 0;
  }

 private:
  bool Fits(uint64_t n) {
    if (!ok_ || n > in_.size() - pos_) ok_ = false;
    return ok_;
  }
  void Raw(void* p, size_t n) {
    if (!Fits(n) || n == 0) return;  // an empty vector's data() may be null
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }

  std::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace

std::string EncodeCheckpoint(const JobSnapshot& s) {
  Writer w;
  w.Str(s.job_id);
  w.U32(s.shard_index);
  w.U8(static_cast<uint8_t>(s.mode));
  w.U8(static_cast<uint8_t>(s.optimizer));
  w.U64(s.clock);
  w.U64(s.epochs.size());
  for (const auto& e : s.epochs) {
    w.U64(e.epoch);
    w.U64(e.effective_clock);
    w.U64s(e.workers);
  }
  w.U64(s.worker_clocks.size());
  for (const auto& [k, v] : s.worker_clocks) {
    w.U64(k);
    w.U64(v);
  }
  w.U64(s.incarnations.size());
  for (const auto& [k, v] : s.incarnations) {
    w.U64(k);
    w.U64(v);
  }
  w.U64(s.chunks.size());
  for (const auto& c : s.chunks) {
    w.U64(c.chunk_id);
    w.U32(c.num_elems);
    w.U64(c.version);
    w.U8(c.initialized ? 1 : 0);
    w.Floats(c.params);
    w.U64(c.opt.step);
    w.U64(c.opt.slots.size());
    for (const auto& slot : c.opt.slots) w.Floats(slot);
    w.U64(c.applied.size());
    for (const auto& [worker, a] : c.applied) {
      w.U64(worker);
      w.U8(a.started ? 1 : 0);
      w.U64(a.below);
      w.U64s(std::vector<uint64_t>(a.above.begin(), a.above.end()));
    }
  }
  if (!s.published.empty()) {
    w.U32(kPublishedTag);
    w.U64(s.published.size());
    for (const PublishedCopy& p : s.published) {
      w.U64(p.chunk_id);
      w.U64(p.version);
      w.Floats(p.copy);
    }
  }
  size_t tables = 0;
  for (const auto& c : s.chunks) tables += c.table ? 1 : 0;
  if (tables > 0) {
    w.U32(kRowsTag);
    w.U64(tables);
    for (const auto& c : s.chunks) {
      if (!c.table) continue;
      w.U64(c.chunk_id);
      w.U64s(c.row_ids);
      w.Floats(c.row_values);
      w.U64(c.row_slots.size());
      for (const auto& slot : c.row_slots) w.Floats(slot);
    }
  }
  return EncodeRecord(kFormat, w.out());
}

absl::StatusOr<JobSnapshot> DecodeCheckpoint(std::string_view data) {
  const bool legacy = data.substr(0, kLegacyMagic.size()) == kLegacyMagic;
  const absl::StatusOr<std::string_view> body =
      legacy ? LegacyBody(data) : DecodeRecord(kFormat, "checkpoint", data);
  if (!body.ok()) return body.status();
  Reader r(*body);
  JobSnapshot s;
  s.job_id = r.Str();
  s.shard_index = r.U32();
  const uint8_t mode = r.U8();
  const uint8_t opt = r.U8();
  if (mode > 2 || opt > static_cast<uint8_t>(OptimizerType::kAdam)) {
    return absl::DataLossError("checkpoint: bad mode or optimizer type");
  }
  s.mode = static_cast<ConsistencyMode>(mode);
  s.optimizer = static_cast<OptimizerType>(opt);
  s.clock = r.U64();
  s.epochs.resize(r.Count(24));
  for (auto& e : s.epochs) {
    e.epoch = r.U64();
    e.effective_clock = r.U64();
    e.workers = r.U64s();
  }
  s.worker_clocks.resize(r.Count(16));
  for (auto& [k, v] : s.worker_clocks) {
    k = r.U64();
    v = r.U64();
  }
  s.incarnations.resize(r.Count(16));
  for (auto& [k, v] : s.incarnations) {
    k = r.U64();
    v = r.U64();
  }
  s.chunks.resize(r.Count(37));
  for (auto& c : s.chunks) {
    c.chunk_id = r.U64();
    c.num_elems = r.U32();
    c.version = r.U64();
    c.initialized = r.U8() != 0;
    c.params = r.Floats();
    c.opt.step = r.U64();
    c.opt.slots.resize(r.Count(8));
    for (auto& slot : c.opt.slots) slot = r.Floats();
    c.applied.resize(r.Count(25));
    for (auto& [worker, a] : c.applied) {
      worker = r.U64();
      a.started = r.U8() != 0;
      a.below = r.U64();
      for (uint64_t x : r.U64s()) a.above.insert(x);
    }
    if (!r.ok()) break;
    if (c.params.size() != c.num_elems) return absl::DataLossError("checkpoint: params size");
    for (const auto& slot : c.opt.slots) {
      if (slot.size() != c.num_elems) return absl::DataLossError("checkpoint: state size");
    }
  }
  // The optional sections, each at most once, in this order.
  uint32_t last_tag = 0;
  while (r.ok() && !r.done()) {
    const uint32_t tag = r.U32();
    if (tag == kPublishedTag && last_tag == 0) {
      s.published.resize(r.Count(24));
      for (PublishedCopy& p : s.published) {
        p.chunk_id = r.U64();
        p.version = r.U64();
        p.copy = r.Floats();
      }
    } else if (tag == kRowsTag && last_tag != kRowsTag) {
      const uint64_t n = r.Count(32);
      for (uint64_t i = 0; i < n && r.ok(); ++i) {
        const uint64_t id = r.U64();
        auto c = std::find_if(s.chunks.begin(), s.chunks.end(),
                              [&](const ChunkSnapshot& x) { return x.chunk_id == id; });
        if (c == s.chunks.end() || c->table) {
          return absl::DataLossError(absl::StrCat("checkpoint: rows of unknown chunk ", id));
        }
        c->table = true;
        c->row_ids = r.U64s();
        c->row_values = r.Floats();
        c->row_slots.resize(r.Count(8));
        for (auto& slot : c->row_slots) slot = r.Floats();
      }
    } else {
      return absl::DataLossError("checkpoint: body does not parse");
    }
    last_tag = tag;
  }
  if (!r.done()) return absl::DataLossError("checkpoint: body does not parse");
  return s;
}

std::string CheckpointPath(const std::string& dir, const std::string& job_id,
                           uint32_t shard_index) {
  std::string safe = job_id;
  for (char& ch : safe) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.';
    if (!ok) ch = '_';
  }
  if (safe.empty() || safe[0] == '.') safe.insert(0, "job");
  return absl::StrCat(dir, "/", safe, ".shard", shard_index, ".ckpt");
}

}  // namespace gradstream::shard
