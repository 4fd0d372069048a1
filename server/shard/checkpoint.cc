#include "server/shard/checkpoint.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/env/crc32c.h"
#include "common/env/record.h"
#include "common/env/string_file.h"
#include "common/status.h"
#include "glog/logging.h"

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

// Bytes a Writer gathers before it hands them on, and a Reader asks for at once.
constexpr size_t kPiece = size_t{1} << 20;

// Gathers small fields and hands them to the record in pieces of about
// kPiece, and larger arrays straight from their memory. The first error
// sticks.
class Writer {
 public:
  explicit Writer(RecordWriter* out) : out_(out) {}
  void U8(uint8_t v) { Raw(&v, 1); }
  void U32(uint32_t v) { Raw(&v, 4); }
  void U64(uint64_t v) { Raw(&v, 8); }
  void Str(std::string_view s) {
    U64(s.size());
    Raw(s.data(), s.size());
  }
  void Floats(absl::Span<const float> v) {
    U64(v.size());
    Raw(v.data(), v.size() * sizeof(float));
  }
  void Rows(const RowArray& a) {  // as Floats of the rows in order
    U64(uint64_t{a.rows()} * a.dim());
    for (size_t b = 0; b < a.rows(); b += a.block_rows()) {
      Raw(a.row(b), std::min(a.block_rows(), a.rows() - b) * a.dim() * sizeof(float));
    }
  }
  void U64s(absl::Span<const uint64_t> v) {  // little-endian, as U64
    U64(v.size());
    Raw(v.data(), v.size() * sizeof(uint64_t));
  }
  void Raw(const void* p, size_t n) {
    if (n == 0) return;  // an empty vector's data() may be null
    if (buf_.size() + n <= kPiece) {
      buf_.append(static_cast<const char*>(p), n);
      return;
    }
    Flush();
    if (n < kPiece) {
      buf_.append(static_cast<const char*>(p), n);
    } else if (status_.ok()) {
      status_ = out_->Append(std::string_view(static_cast<const char*>(p), n));
    }
  }
  // Ends the record with `s` (nothing more is appended).
  void Fail(absl::Status s) {
    if (status_.ok()) status_ = std::move(s);
  }
  absl::Status Finish() {
    Flush();
    if (status_.ok()) status_ = out_->Finish();
    return status_;
  }

 private:
  void Flush() {
    if (status_.ok() && !buf_.empty()) status_ = out_->Append(buf_);
    buf_.clear();
  }

  RecordWriter* const out_;
  std::string buf_;
  absl::Status status_;
};

// Where a body comes from: a record read in pieces, or a legacy body in memory.
class Source {
 public:
  virtual ~Source() = default;
  virtual uint64_t remaining() const = 0;
  // Exactly n <= remaining() bytes.
  virtual absl::Status Read(char* out, size_t n) = 0;
};

class RecordSource final : public Source {
 public:
  explicit RecordSource(RecordReader* in) : in_(in) {}
  uint64_t remaining() const override { return in_->remaining(); }
  absl::Status Read(char* out, size_t n) override { return in_->Read(out, n); }

 private:
  RecordReader* const in_;
};

class MemorySource final : public Source {
 public:
  explicit MemorySource(std::string_view in) : in_(in) {}
  uint64_t remaining() const override { return in_.size(); }
  absl::Status Read(char* out, size_t n) override {
    std::memcpy(out, in_.data(), n);
    in_.remove_prefix(n);
    return absl::OkStatus();
  }

 private:
  std::string_view in_;
};

// Reads a body from a Source through a buffer, bounds-checking every field
// against the bytes left (a count can never allocate past the file's size);
// the first failure sticks (ok() false; source_status() says whether the
// source failed).
class Reader {
 public:
  explicit Reader(Source* in) : in_(in), left_(in->remaining()) {}
  bool ok() const { return ok_; }
  bool done() const { return ok_ && left_ == 0; }
  // The source's error, or OK (a parse failure is for the caller to name).
  const absl::Status& source_status() const { return source_status_; }
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
    std::string s(n, '\0');
    Raw(s.data(), n);
    return s;
  }
  std::vector<float> Floats() {
    const uint64_t n = Count(sizeof(float));
    std::vector<float> v(n);
    Raw(v.data(), n * sizeof(float));
    return v;
  }
  // A table's rows: `rows` rows of the width the count gives
  // (RowStore::Restore checks it against the table's).
  RowArray Rows(size_t rows) {
    const uint64_t n = Count(sizeof(float));
    if (ok_ && rows == 0 && n == 0) return RowArray();
    if (!ok_ || rows == 0 || n == 0 || n % rows != 0 || n / rows > UINT32_MAX) {
      ok_ = false;
      return RowArray();
    }
    RowArray a(static_cast<uint32_t>(n / rows));
    a.Fill(rows, [this](float* out, size_t floats) {
      Raw(out, floats * sizeof(float));
      return ok_;
    });
    return a;
  }
  std::vector<uint64_t> U64s() {
    const uint64_t n = Count(sizeof(uint64_t));
    std::vector<uint64_t> v(n);
    Raw(v.data(), n * sizeof(uint64_t));
    return v;
  }
  // A count of items that each take at least `min_bytes`: bounds a resize.
  uint64_t Count(size_t min_bytes) {
    const uint64_t n = U64();
    if (n > left_ / min_bytes) ok_ = false;
    return ok_ ? n : 0;
  }

 private:
  bool Fits(uint64_t n) {
    if (!ok_ || n > left_) ok_ = false;
    return ok_;
  }
  void Raw(void* p, size_t n) {
    if (!Fits(n) || n == 0) return;  // an empty vector's data() may be null
    left_ -= n;
    char* out = static_cast<char*>(p);
    const size_t buffered = std::min(n, buf_.size() - pos_);
    std::memcpy(out, buf_.data() + pos_, buffered);
    pos_ += buffered;
    out += buffered;
    n -= buffered;
    if (n == 0) return;
    if (n >= kPiece) {  // large arrays straight into their vector
      Fill(out, n);
      return;
    }
    buf_.resize(std::min<uint64_t>(kPiece, in_->remaining()));
    pos_ = 0;
    Fill(buf_.data(), buf_.size());
    std::memcpy(out, buf_.data(), n);
    pos_ = n;
  }
  void Fill(char* out, size_t n) {
    if (absl::Status s = in_->Read(out, n); !s.ok()) {
      source_status_ = s;
      ok_ = false;
    }
  }

  Source* const in_;
  uint64_t left_;  // body bytes not yet returned by Raw
  std::string buf_;
  size_t pos_ = 0;
  bool ok_ = true;
  absl::Status source_status_;
};

// The rows of `rows` as U64s(ids), Floats(values), U64(slots), Floats per
// slot: the layout of a snapshot's vectors, copied a block at a time.
void WriteRows(RowBlocks& rows, Writer& w) {
  const uint64_t n = rows.rows();
  const uint64_t dim = rows.dim();
  const uint64_t block = std::max<uint64_t>(1, kPiece / (dim * sizeof(float)));  // rows
  std::vector<uint64_t> ids(std::min<uint64_t>(n, kPiece / sizeof(uint64_t)));
  w.U64(n);
  for (uint64_t b = 0; b < n; b += ids.size()) {
    const uint64_t e = std::min<uint64_t>(n, b + ids.size());
    if (absl::Status s = rows.Ids(b, e, ids.data()); !s.ok()) return w.Fail(s);
    w.Raw(ids.data(), (e - b) * sizeof(uint64_t));
  }
  std::vector<float> values(std::min(n, block) * dim);
  for (int array = -1; array < rows.num_slots(); ++array) {
    if (array == 0) w.U64(rows.num_slots());
    w.U64(n * dim);
    for (uint64_t b = 0; b < n; b += block) {
      const uint64_t e = std::min<uint64_t>(n, b + block);
      if (absl::Status s = rows.Floats(array, b, e, values.data()); !s.ok()) return w.Fail(s);
      w.Raw(values.data(), (e - b) * dim * sizeof(float));
    }
  }
  if (rows.num_slots() == 0) w.U64(0);
}

void WriteBody(const JobSnapshot& s, Writer& w) {
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
      const std::vector<uint64_t> above(a.above.begin(), a.above.end());
      w.U64s(above);
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
      if (c.rows != nullptr) {
        WriteRows(*c.rows, w);
      } else {
        w.U64s(c.row_ids);
        w.Rows(c.row_values);
        w.U64(c.row_slots.size());
        for (const auto& slot : c.row_slots) w.Rows(slot);
      }
    }
  }
}

// A failed parse: the source's error (a truncated file, a read error), or
// DataLoss saying `what`.
absl::Status ParseError(const Reader& r, absl::string_view what) {
  if (!r.source_status().ok()) return r.source_status();
  return absl::DataLossError(absl::StrCat("checkpoint: ", what));
}

absl::StatusOr<JobSnapshot> ReadBody(Reader& r) {
  JobSnapshot s;
  s.job_id = r.Str();
  s.shard_index = r.U32();
  const uint8_t mode = r.U8();
  const uint8_t opt = r.U8();
  if (mode > 2 || opt > static_cast<uint8_t>(OptimizerType::kAdam)) {
    return ParseError(r, "bad mode or optimizer type");
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
    if (c.params.size() != c.num_elems) return ParseError(r, "params size");
    for (const auto& slot : c.opt.slots) {
      if (slot.size() != c.num_elems) return ParseError(r, "state size");
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
          return ParseError(r, absl::StrCat("rows of unknown chunk ", id));
        }
        c->table = true;
        c->row_ids = r.U64s();
        c->row_values = r.Rows(c->row_ids.size());
        c->row_slots.resize(r.Count(8));
        for (auto& slot : c->row_slots) slot = r.Rows(c->row_ids.size());
      }
    } else {
      return ParseError(r, "body does not parse");
    }
    last_tag = tag;
  }
  if (!r.done()) return ParseError(r, "body does not parse");
  return s;
}

}  // namespace

absl::StatusOr<uint64_t> WriteCheckpoint(const JobSnapshot& snapshot, WritableFile* file) {
  RecordWriter out(kFormat, file);
  Writer w(&out);
  WriteBody(snapshot, w);
  GS_RETURN_IF_ERROR(w.Finish());
  return out.bytes();
}

absl::StatusOr<JobSnapshot> ReadCheckpoint(SequentialFile* file, std::string_view name) {
  std::string header(kRecordHeaderSize, '\0');
  size_t got = 0;
  while (got < header.size()) {
    absl::StatusOr<size_t> n = file->Read(header.data() + got, header.size() - got);
    if (!n.ok()) return n.status();
    if (*n == 0) break;
    got += *n;
  }
  header.resize(got);
  if (header.substr(0, kLegacyMagic.size()) == kLegacyMagic) {
    // Legacy files predate tables: small enough to read whole.
    char buf[1 << 16];
    for (;;) {
      absl::StatusOr<size_t> n = file->Read(buf, sizeof buf);
      if (!n.ok()) return n.status();
      if (*n == 0) break;
      header.append(buf, *n);
    }
    absl::StatusOr<std::string_view> body = LegacyBody(header);
    if (!body.ok()) return body.status();
    MemorySource source(*body);
    Reader r(&source);
    return ReadBody(r);
  }
  absl::StatusOr<RecordReader> in = RecordReader::Open(kFormat, name, header, file);
  if (!in.ok()) return in.status();
  RecordSource source(&*in);
  Reader r(&source);
  absl::StatusOr<JobSnapshot> snap = ReadBody(r);
  if (!snap.ok()) return snap.status();
  GS_RETURN_IF_ERROR(in->Finish());
  return snap;
}

std::string EncodeCheckpoint(const JobSnapshot& snapshot) {
  StringFile file;
  const absl::StatusOr<uint64_t> written = WriteCheckpoint(snapshot, &file);
  CHECK(written.ok()) << written.status();  // memory takes every piece
  return std::move(file.data());
}

absl::StatusOr<JobSnapshot> DecodeCheckpoint(std::string_view data) {
  StringFile file{std::string(data)};
  return ReadCheckpoint(&file, "checkpoint");
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
