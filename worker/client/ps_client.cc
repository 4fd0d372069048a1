// PsClient: the encoding front end over one ShardStream per shard. See
// [client streams] in ps_client.h.
#include "worker/client/ps_client.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/buffer_pool.h"
#include "common/codec/codec.h"
#include "common/codec/half_rows.h"
#include "common/codec/wire.h"
#include "common/executor.h"
#include "absl/container/flat_hash_set.h"
#include "common/job/precision.h"
#include "common/job/row_partition.h"
#include "common/status.h"
#include "glog/logging.h"
#include "ps.pb.h"
#include "worker/client/internal/pending.h"
#include "worker/client/internal/shard_stream.h"
#include "worker/client/internal/tensor_encoder.h"

namespace gradstream::client {
namespace {

using internal::Completion;
using internal::PullState;
using internal::PullTarget;
using internal::PushPrecisionReport;
using internal::ShardStream;
using internal::TensorEncoder;

class PsClientImpl final : public PsClient {
 public:
  PsClientImpl(const ShardMap& map, const ClientOptions& options)
      : map_(map),
        options_(options),
        buffers_(options.buffer_pool_bytes),
        published_(ChunkElems(map)),
        link_(LinkChoicePolicy{options.codec.link_choice}) {
    if (options.encode_threads > 0) {
      encode_pool_ = std::make_unique<Executor>(options.encode_threads);
    }
  }

  ~PsClientImpl() override {
    for (auto& s : streams_) s->Stop();
    // Chunks never sent: their handles end as the streams' did.
    for (auto& dones : TakeBucket(0).dones) {
      for (const std::shared_ptr<Completion>& d : dones) {
        d->Done(absl::CancelledError("client stopped"));
      }
    }
  }

  absl::Status Init(ChannelFactory* channels) {
    table_parts_.resize(map_.tensors.size());
    for (const ChunkInfo& c : map_.chunks) {
      if (c.table.has_value()) table_parts_[c.tensor].push_back(&c);
    }
    for (const TensorInfo& t : map_.tensors) {
      if (t.is_table()) {  // pushed and pulled by row: no encoder
        encoders_.push_back(nullptr);
        tensor_mu_.push_back(std::make_unique<absl::Mutex>());
        continue;
      }
      const std::string codec =
          t.codec.empty() ? ResolveCodec(options_.codec, t.name, t.num_elems) : t.codec;
      auto enc = TensorEncoder::Create(map_, t.index, codec, options_.codec);
      if (!enc.ok()) {
        return absl::Status(enc.status().code(), absl::StrCat("tensor '", t.name, "': ",
                                                              enc.status().message()));
      }
      encoders_.push_back(*std::move(enc));
      tensor_mu_.push_back(std::make_unique<absl::Mutex>());
    }
    std::vector<std::vector<uint64_t>> owned(map_.shards.size());
    for (const ChunkInfo& c : map_.chunks) owned[c.shard].push_back(c.chunk_id);
    for (uint32_t s = 0; s < map_.shards.size(); ++s) {
      streams_.push_back(std::make_unique<ShardStream>(s, map_.shards[s], std::move(owned[s]),
                                                       options_, channels, &counters_, &buffers_));
    }
    for (auto& s : streams_) s->Start();
    const absl::Time deadline = absl::Now() + options_.connect_deadline;
    for (auto& s : streams_) GS_RETURN_IF_ERROR(s->WaitReady(deadline));
    return absl::OkStatus();
  }

  PushHandle Push(uint32_t tensor, absl::Span<const float> grad, uint64_t clock) override {
    push_calls_.fetch_add(1, std::memory_order_relaxed);
    if (tensor >= map_.tensors.size()) {
      return MakePush(Completion::Failed(absl::InvalidArgumentError(
          absl::StrCat("Push: tensor ", tensor, " of ", map_.tensors.size()))));
    }
    const TensorInfo& info = map_.tensors[tensor];
    if (info.is_table()) return MakePush(Completion::Failed(NotDense("Push", info)));
    if (grad.size() != info.num_elems) {
      return MakePush(Completion::Failed(absl::InvalidArgumentError(absl::StrCat(
          "Push: tensor '", info.name, "' has ", info.num_elems, " elements, got ", grad.size()))));
    }
    TensorEncoder& enc = *encoders_[tensor];
    auto done = std::make_shared<Completion>(static_cast<int>(enc.num_chunks()));
    const bool exact = LinkExact(clock);
    if (exact) link_exact_pushes_.fetch_add(1, std::memory_order_relaxed);
    // One push of a tensor at a time (its residuals are state); its chunks are
    // encoded on this thread, or spread over the encode pool, and each goes to
    // its shard's writer as soon as it is encoded, so sending overlaps
    // encoding.
    absl::MutexLock lock(tensor_mu_[tensor].get());
    auto encode_and_send = [&](size_t i) {
      const ChunkInfo& c = enc.chunk(i);
      // The encoded size: a compressed push returns a buffer of that size to
      // the pool, so asking for the fp32 size would never find it again.
      std::string payload = buffers_.Take(PayloadBytes(enc.codec(), c.num_elems));
      ChunkHeader header;
      PushPrecisionReport report;
      absl::Status s = enc.EncodeChunk(i, grad, options_.seed, options_.worker_id, clock, &header,
                                       &payload, &report, exact);
      if (!s.ok()) {
        // The other chunks still go out; the handle reports this failure.
        done->Done(absl::Status(s.code(), absl::StrCat("tensor '", info.name, "' chunk ",
                                                       c.chunk_id, ": ", s.message())));
        return;
      }
      AddToBucket(c, clock, header, std::move(payload), done, report);
    };
    if (encode_pool_ != nullptr && enc.num_chunks() > 1) {
      encode_pool_->ParallelFor(enc.num_chunks(), encode_pool_->num_threads(), encode_and_send);
    } else {
      for (size_t i = 0; i < enc.num_chunks(); ++i) encode_and_send(i);
    }
    return MakePush(std::move(done));
  }

  PushHandle PushEncoded(uint32_t tensor, absl::Span<const EncodedChunkView> chunks,
                         uint64_t clock) override {
    push_calls_.fetch_add(1, std::memory_order_relaxed);
    auto fail = [](absl::Status s) { return MakePush(Completion::Failed(std::move(s))); };
    if (tensor >= map_.tensors.size()) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("PushEncoded: tensor ", tensor, " of ", map_.tensors.size())));
    }
    if (map_.tensors[tensor].is_table()) return fail(NotDense("PushEncoded", map_.tensors[tensor]));
    const TensorEncoder& enc = *encoders_[tensor];
    const std::string& name = map_.tensors[tensor].name;
    if (chunks.size() != enc.num_chunks()) {
      return fail(absl::InvalidArgumentError(absl::StrCat("PushEncoded: tensor '", name, "' has ",
                                                          enc.num_chunks(), " chunks, got ",
                                                          chunks.size())));
    }
    const CodecType codec = enc.codec();
    // Every chunk is checked before any is sent: a bad call sends nothing.
    for (size_t i = 0; i < chunks.size(); ++i) {
      const ChunkHeader& h = chunks[i].header;
      const uint32_t n = enc.chunk(i).num_elems;
      const bool exact = h.codec == CodecType::kNone && enc.guarded();
      // A GPU worker sends ternary512 as ternary (device_pusher.cc).
      const bool device_form = h.codec == CodecType::kTernary && codec == CodecType::kTernary512;
      if ((h.codec != codec && !exact && !device_form) || h.num_elems != n ||
          chunks[i].payload.size() != PayloadBytes(h.codec, n)) {
        return fail(absl::InvalidArgumentError(
            absl::StrCat("PushEncoded: tensor '", name, "' chunk ", i, " is ",
                         CodecTypeName(h.codec), " with ", h.num_elems, " elements and ",
                         chunks[i].payload.size(), " bytes, the map wants ", CodecTypeName(codec),
                         " with ", n, " elements and ", PayloadBytes(codec, n), " bytes")));
      }
    }
    auto done = std::make_shared<Completion>(static_cast<int>(chunks.size()));
    for (size_t i = 0; i < chunks.size(); ++i) {
      std::string payload = buffers_.Take(chunks[i].payload.size());
      payload.assign(chunks[i].payload.data(), chunks[i].payload.size());
      PushPrecisionReport report;
      report.error_clocks = chunks[i].error_clocks;
      report.raised = chunks[i].raised;
      report.level = chunks[i].level;
      AddToBucket(enc.chunk(i), clock, chunks[i].header, std::move(payload), done, report);
    }
    return MakePush(std::move(done));
  }

  PullHandle Pull(uint64_t clock, std::vector<absl::Span<float>> out) override {
    return PullWithRows(clock, std::move(out), {});
  }

  PullHandle PullWithRows(uint64_t clock, std::vector<absl::Span<float>> out,
                          std::vector<RowsAsk> rows) override {
    return PullAsked(clock, std::move(out), std::move(rows), /*deferred=*/false);
  }

  PullHandle PullDeferred(uint64_t clock, std::vector<absl::Span<float>> out) override {
    return PullAsked(clock, std::move(out), {}, /*deferred=*/true);
  }

  PullHandle PullAsked(uint64_t clock, std::vector<absl::Span<float>> out,
                       std::vector<RowsAsk> rows, bool deferred) {
    pull_calls_.fetch_add(1, std::memory_order_relaxed);
    auto fail = [](absl::Status s) {
      auto state = std::make_shared<PullState>(std::vector<PullTarget>(),
                                               std::vector<std::vector<uint64_t>>(1, {0}));
      state->Fail(0, s);
      return state;
    };
    if (out.size() != map_.tensors.size()) {
      return MakePull(fail(absl::InvalidArgumentError(absl::StrCat(
          "Pull: ", out.size(), " output spans for ", map_.tensors.size(), " tensors"))));
    }
    for (const TensorInfo& t : map_.tensors) {
      if (t.is_table() && !out[t.index].empty()) return MakePull(fail(NotDense("Pull", t)));
      if (!out[t.index].empty() && out[t.index].size() != t.num_elems) {
        return MakePull(fail(absl::InvalidArgumentError(absl::StrCat(
            "Pull: tensor '", t.name, "' has ", t.num_elems, " elements, span has ",
            out[t.index].size()))));
      }
    }
    std::vector<PullTarget> targets(map_.chunks.size());
    std::vector<std::vector<uint64_t>> per_shard(map_.shards.size());
    for (const ChunkInfo& c : map_.chunks) {
      absl::Span<float> dst = out[c.tensor];
      if (dst.empty()) continue;
      targets[c.chunk_id] = PullTarget{dst.data() + c.offset, c.num_elems, c.tensor};
      per_shard[c.shard].push_back(c.chunk_id);
    }
    std::vector<bool> asked(map_.tensors.size(), false);
    for (const RowsAsk& r : rows) {
      const TensorInfo* table = nullptr;
      absl::Status bad = CheckRows("PullWithRows", r.tensor, r.ids, r.out.size(), false, &table);
      if (bad.ok() && asked[r.tensor]) {
        bad = absl::InvalidArgumentError(
            absl::StrCat("PullWithRows: table '", table->name, "' asked twice"));
      }
      if (!bad.ok()) return MakePull(fail(std::move(bad)));
      asked[r.tensor] = true;
      AddRowTargets(*table, r.ids, r.out, &targets, &per_shard);
    }
    auto state = std::make_shared<PullState>(std::move(targets), std::move(per_shard), &published_,
                                             deferred);
    for (RowsAsk& r : rows) state->Keep(std::move(r.keep));
    for (uint32_t s = 0; s < streams_.size(); ++s) {
      if (!state->chunks_of(s).empty()) streams_[s]->SendPull(clock, state);
    }
    // The handle is a second owner whose release abandons the pull, so a
    // caller that drops every copy without waiting can free its buffers.
    return MakePull(
        std::shared_ptr<PullState>(state.get(), [state](PullState* s) { s->Abandon(); }));
  }

  absl::Status InitParams(absl::Span<const absl::Span<const float>> values,
                          absl::Duration timeout) override {
    if (values.size() != map_.tensors.size()) {
      return absl::InvalidArgumentError(absl::StrCat("InitParams: ", values.size(),
                                                     " tensors, map has ", map_.tensors.size()));
    }
    for (const TensorInfo& t : map_.tensors) {
      if (t.is_table() && values[t.index].empty()) continue;  // its rows start on the shards
      if (values[t.index].size() != t.num_elems) {
        return absl::InvalidArgumentError(absl::StrCat("InitParams: tensor '", t.name, "' has ",
                                                       t.num_elems, " elements, got ",
                                                       values[t.index].size()));
      }
    }
    int dense = 0;
    for (const ChunkInfo& c : map_.chunks) dense += c.table.has_value() ? 0 : 1;
    auto done = std::make_shared<Completion>(dense);
    for (const ChunkInfo& c : map_.chunks) {
      if (c.table.has_value()) continue;
      auto message = std::make_unique<v1::WorkerMessage>();
      v1::InitChunk* init = message->mutable_init();
      init->set_chunk_id(c.chunk_id);
      const float* src = values[c.tensor].data() + c.offset;
      *init->mutable_values() = buffers_.Take(size_t{c.num_elems} * sizeof(float));
      init->mutable_values()->assign(reinterpret_cast<const char*>(src),
                                     size_t{c.num_elems} * sizeof(float));
      streams_[c.shard]->SendPush(std::move(message), {done});
    }
    return done->Wait(timeout);
  }

  PullHandle PullRows(uint32_t tensor, absl::Span<const uint64_t> ids, uint64_t clock,
                      absl::Span<float> out) override {
    pull_calls_.fetch_add(1, std::memory_order_relaxed);
    const TensorInfo* table = nullptr;
    absl::Status bad = CheckRows("PullRows", tensor, ids, out.size(), false, &table);
    if (!bad.ok()) {
      auto state = std::make_shared<PullState>(std::vector<PullTarget>(),
                                               std::vector<std::vector<uint64_t>>(1, {0}));
      state->Fail(0, bad);
      return MakePull(std::move(state));
    }
    const size_t dim = table->table_dim;
    const size_t rows_per_part = std::max<size_t>(1, kMaxRowAskBytes / (dim * sizeof(float)));
    std::vector<std::shared_ptr<PullState>> parts;
    for (size_t lo = 0; lo == 0 || lo < ids.size(); lo += rows_per_part) {
      const size_t n = std::min(rows_per_part, ids.size() - lo);
      std::vector<PullTarget> targets(map_.chunks.size());
      std::vector<std::vector<uint64_t>> per_shard(map_.shards.size());
      AddRowTargets(*table, ids.subspan(lo, n), out.subspan(lo * dim, n * dim), &targets,
                    &per_shard);
      auto state = std::make_shared<PullState>(std::move(targets), std::move(per_shard));
      for (uint32_t s = 0; s < streams_.size(); ++s) {
        if (!state->chunks_of(s).empty()) streams_[s]->SendPull(clock, state);
      }
      // Dropping every copy of the handle abandons the part.
      parts.emplace_back(state.get(), [state](PullState* s) { s->Abandon(); });
    }
    return MakePullHandle(std::move(parts));
  }

  PushHandle PushRows(uint32_t tensor, absl::Span<const uint64_t> ids,
                      absl::Span<const float> grads, uint64_t clock) override {
    push_calls_.fetch_add(1, std::memory_order_relaxed);
    const TensorInfo* table = nullptr;
    if (absl::Status bad = CheckRows("PushRows", tensor, ids, grads.size(), true, &table);
        !bad.ok()) {
      return MakePush(Completion::Failed(std::move(bad)));
    }
    const std::vector<const ChunkInfo*>& parts = table_parts_[tensor];
    const uint32_t dim = table->table_dim;
    const bool fp16 = table->codec == "fp16";  // the map says ([fp16 rows] in shard_map.cc)
    std::vector<v1::PushedRows> rows(parts.size());
    std::vector<std::vector<float>> fp32(fp16 ? parts.size() : 0);  // gathered, then encoded
    for (size_t i = 0; i < ids.size(); ++i) {
      const uint32_t p = RowPartition(tensor, ids[i], parts.size());
      rows[p].add_ids(ids[i]);
      const float* g = grads.data() + i * dim;
      if (fp16) {
        fp32[p].insert(fp32[p].end(), g, g + dim);
      } else {
        rows[p].mutable_values()->append(reinterpret_cast<const char*>(g),
                                         size_t{dim} * sizeof(float));
      }
    }
    for (size_t p = 0; p < fp32.size(); ++p) {
      rows[p].set_fp16(true);
      rows[p].set_scale(HalfRowsScale(fp32[p]));
      EncodeHalfRows(fp32[p], rows[p].scale(), rows[p].mutable_values());
    }
    const size_t value_bytes = fp16 ? 2 : sizeof(float);
    for (size_t p = 0; p < parts.size(); ++p) {
      const uint64_t ids = static_cast<uint64_t>(rows[p].ids_size());
      const uint64_t bytes = ids * dim * sizeof(float) + uint64_t{8} * ids;
      if (bytes > kMaxPushedRowsBytes) {
        return MakePush(Completion::Failed(absl::InvalidArgumentError(absl::StrCat(
            "PushRows: ", rows[p].ids_size(), " rows of table '", table->name,
            "' for partition ", p, " are ", bytes, " bytes, more than a shard takes of one "
            "partition in one clock (", kMaxPushedRowsBytes,
            "): touch fewer rows per clock (a smaller batch)"))));
      }
    }
    // Every partition, also one without rows (see PushRows in ps_client.h).
    auto done = std::make_shared<Completion>(static_cast<int>(parts.size()));
    const size_t rows_per_piece = std::max<size_t>(1, kMaxRowPushBytes / (dim * value_bytes + 8));
    for (size_t p = 0; p < parts.size(); ++p) {
      const ChunkInfo& c = *parts[p];
      rows[p].set_chunk_id(c.chunk_id);
      const uint64_t bytes = rows[p].values().size();
      chunks_pushed_.fetch_add(1, std::memory_order_relaxed);
      bytes_pushed_.fetch_add(bytes, std::memory_order_relaxed);
      fp32_bytes_pushed_.fetch_add(
          static_cast<uint64_t>(rows[p].ids_size()) * dim * sizeof(float),
          std::memory_order_relaxed);
      if (static_cast<size_t>(rows[p].ids_size()) > rows_per_piece) {
        SendPieces(c.shard, clock, rows_per_piece, dim * value_bytes, std::move(rows[p]), done);
        continue;
      }
      AddToBucketWith(c.shard, clock, bytes, done, [&](v1::Push* push) {
        *push->add_rows() = std::move(rows[p]);
      });
    }
    return MakePush(std::move(done));
  }

  absl::Status AdvanceClock(uint64_t clock) override {
    ObserveStep(clock);
    absl::Status first;
    for (auto& s : streams_) first.Update(s->SendClock(clock));
    return first;
  }

  void Flush(uint64_t min_bytes) override { Send(TakeBucket(min_bytes)); }

  absl::Status Leave(absl::Duration timeout) override {
    Flush(0);
    const absl::Time deadline = absl::Now() + timeout;
    absl::Status status;
    for (auto& s : streams_) status.Update(s->Drain(deadline));
    for (auto& s : streams_) status.Update(s->Leave(deadline));
    for (auto& s : streams_) s->Stop();
    return status;
  }

  ClientStats stats() const override {
    ClientStats st;
    st.push_calls = push_calls_.load();
    st.chunks_pushed = chunks_pushed_.load();
    st.push_messages = push_messages_.load();
    st.pull_messages = counters_.pull_messages.load();
    st.bytes_pushed = bytes_pushed_.load();
    st.fp32_bytes_pushed = fp32_bytes_pushed_.load();
    st.link_exact_pushes = link_exact_pushes_.load();
    st.chunks_acked = counters_.chunks_acked.load();
    st.duplicate_acks = counters_.duplicate_acks.load();
    st.pull_calls = pull_calls_.load();
    st.chunks_pulled = counters_.chunks_pulled.load();
    st.bytes_pulled = counters_.bytes_pulled.load();
    st.fp32_bytes_pulled = counters_.fp32_bytes_pulled.load();
    st.bytes_pulled_discarded = counters_.bytes_pulled_discarded.load();
    st.reconnects = counters_.reconnects.load();
    st.replayed = counters_.replayed.load();
    if (link_enabled_) {
      absl::MutexLock lock(&link_mu_);
      if (!link_.decisions().empty()) st.push_link = link_.decisions().back();
    }
    return st;
  }

  double ResidualNorm() const override {
    double sq = 0.0;
    for (size_t t = 0; t < encoders_.size(); ++t) {
      if (encoders_[t] == nullptr) continue;  // a table: no residual
      absl::MutexLock lock(tensor_mu_[t].get());
      sq += encoders_[t]->ResidualNormSquared();
    }
    return std::sqrt(sq);
  }

  const ShardMap& shard_map() const override { return map_; }

  std::vector<PublishedCopyInfo> published_copies() const override {
    std::vector<PublishedCopyInfo> out;
    for (const auto& [id, held] : published_.Summary()) {
      out.push_back(PublishedCopyInfo{id, held.version, held.checksum});
    }
    return out;
  }

 private:
  // The open bucket (see [fused messages]): per shard, the Push being filled
  // and one completion per chunk in it.
  struct Bucket {
    uint64_t clock = 0;
    uint64_t bytes = 0;  // encoded payload bytes, every shard's
    std::vector<std::unique_ptr<v1::WorkerMessage>> pushes;       // by shard; null: none
    std::vector<std::vector<std::shared_ptr<Completion>>> dones;  // by shard
    bool empty() const { return pushes.empty(); }
  };

  // Counts chunk `c`'s encoded gradient in the stats and adds it to the open
  // bucket of `clock`; sends the bucket once it is full (and first the open
  // one of another clock).
  void AddToBucket(const ChunkInfo& c, uint64_t clock, const ChunkHeader& header,
                   std::string payload, const std::shared_ptr<Completion>& done,
                   const PushPrecisionReport& report = PushPrecisionReport()) {
    chunks_pushed_.fetch_add(1, std::memory_order_relaxed);
    bytes_pushed_.fetch_add(payload.size(), std::memory_order_relaxed);
    fp32_bytes_pushed_.fetch_add(uint64_t{c.num_elems} * sizeof(float), std::memory_order_relaxed);
    AddToBucketWith(c.shard, clock, payload.size(), done, [&](v1::Push* push) {
      v1::PushedChunk* pc = push->add_chunks();
      pc->set_chunk_id(c.chunk_id);
      ChunkToWire(header, std::move(payload), pc->mutable_chunk());
      pc->set_error_clocks(report.error_clocks);
      pc->set_raised(report.raised);
      if (report.raised) pc->set_level(CodecToWire(report.level));
      if (report.owed_raise > 0) pc->set_owed_raise(report.owed_raise);
    });
  }

  // Adds what `fill` writes into shard `shard`'s Push of the open bucket of
  // `clock` (`bytes` of payload); sends the bucket once it is full (and
  // first the open one of another clock).
  template <typename Fill>
  void AddToBucketWith(uint32_t shard, uint64_t clock, uint64_t bytes,
                       const std::shared_ptr<Completion>& done, Fill fill) {
    Bucket other_clock, full;
    {
      absl::MutexLock lock(&bucket_mu_);
      if (!open_.empty() && open_.clock != clock) other_clock = TakeBucketLocked();
      open_.clock = clock;
      if (open_.pushes.empty()) {
        open_.pushes.resize(streams_.size());
        open_.dones.resize(streams_.size());
      }
      std::unique_ptr<v1::WorkerMessage>& push = open_.pushes[shard];
      if (push == nullptr) {
        push = std::make_unique<v1::WorkerMessage>();
        push->mutable_push()->set_clock(clock);
      }
      open_.bytes += bytes;
      fill(push->mutable_push());
      open_.dones[shard].push_back(done);
      const bool first = sent_clock_ != clock || sent_in_clock_ == 0;
      const uint64_t bound = first ? options_.first_bucket_bytes : options_.bucket_bytes;
      if (open_.bytes >= bound) full = TakeBucketLocked();
    }
    Send(std::move(other_clock));
    Send(std::move(full));
  }

  Bucket TakeBucket(uint64_t min_bytes) {
    absl::MutexLock lock(&bucket_mu_);
    if (open_.bytes < min_bytes) return Bucket();
    return TakeBucketLocked();
  }
  Bucket TakeBucketLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(bucket_mu_) {
    if (open_.empty()) return Bucket();
    if (sent_clock_ != open_.clock) sent_in_clock_ = 0;
    sent_clock_ = open_.clock;
    ++sent_in_clock_;
    return std::exchange(open_, Bucket());
  }
  // A partition's rows past one message, as consecutive pieces of at most
  // `rows_per_piece` rows (PushedRows.more in ps.proto); `done` counts them
  // as one push.
  void SendPieces(uint32_t shard, uint64_t clock, size_t rows_per_piece, size_t row_bytes,
                  v1::PushedRows rows, const std::shared_ptr<Completion>& done) {
    std::vector<std::unique_ptr<v1::WorkerMessage>> pieces;
    const size_t n = rows.ids_size();
    for (size_t lo = 0; lo < n; lo += rows_per_piece) {
      const size_t m = std::min(rows_per_piece, n - lo);
      auto message = std::make_unique<v1::WorkerMessage>();
      v1::Push* push = message->mutable_push();
      push->set_clock(clock);
      v1::PushedRows* piece = push->add_rows();
      piece->set_chunk_id(rows.chunk_id());
      piece->mutable_ids()->Add(rows.ids().begin() + lo, rows.ids().begin() + lo + m);
      piece->set_values(rows.values().substr(lo * row_bytes, m * row_bytes));
      piece->set_more(lo + m < n);
      if (rows.fp16()) {
        piece->set_fp16(true);
        piece->set_scale(rows.scale());  // one scale for the partition's rows
      }
      pieces.push_back(std::move(message));
    }
    push_messages_.fetch_add(pieces.size(), std::memory_order_relaxed);
    streams_[shard]->SendPushes(std::move(pieces), {done});
  }

  // One Push per shard the bucket holds chunks of.
  void Send(Bucket bucket) {
    for (size_t s = 0; s < bucket.pushes.size(); ++s) {
      if (bucket.pushes[s] == nullptr) continue;
      push_messages_.fetch_add(1, std::memory_order_relaxed);
      streams_[s]->SendPush(std::move(bucket.pushes[s]), std::move(bucket.dones[s]));
    }
  }

  // [link choice]: whether clock `clock`'s pushes go exact.
  bool LinkExact(uint64_t clock) {
    if (!link_enabled_) return false;  // no lock on the push path of a job without it
    absl::MutexLock lock(&link_mu_);
    return link_.Exact(clock);
  }

  // AdvanceClock(clock) ends step clock - 1: the link choice times it.
  void ObserveStep(uint64_t clock) {
    if (!link_enabled_) return;
    const absl::Time now = options_.env->Now();
    absl::MutexLock lock(&link_mu_);
    if (const LinkDecision* d = link_.Tick(clock, now)) {
      LOG(INFO) << "link choice at clock " << d->clock << ": " << DescribeLinkDecision(*d);
    }
  }

  static absl::Status NotDense(absl::string_view call, const TensorInfo& t) {
    return absl::InvalidArgumentError(
        absl::StrCat(call, ": tensor '", t.name, "' is a table: use PullRows/PushRows"));
  }

  // Where rows `ids` of `table` land (row i at out + i * dim), by partition
  // chunk: PullRows's targets.
  void AddRowTargets(const TensorInfo& table, absl::Span<const uint64_t> ids,
                     absl::Span<float> out, std::vector<PullTarget>* targets,
                     std::vector<std::vector<uint64_t>>* per_shard) const {
    const std::vector<const ChunkInfo*>& parts = table_parts_[table.index];
    for (size_t i = 0; i < ids.size(); ++i) {
      const ChunkInfo& c = *parts[RowPartition(table.index, ids[i], parts.size())];
      PullTarget& t = (*targets)[c.chunk_id];
      if (t.row_ids.empty()) {
        t.dst = out.data();
        t.tensor = table.index;
        t.dim = table.table_dim;
        t.fp16 = table.pull_codec == "fp16";  // [fp16 rows]
        (*per_shard)[c.shard].push_back(c.chunk_id);
      }
      t.row_ids.push_back(ids[i]);
      t.positions.push_back(static_cast<uint32_t>(i));
      t.num_elems += table.table_dim;
    }
  }

  // The checks of PullRows (`unique` false) and PushRows: a table, ids in
  // range (and each once), `floats` = ids x dim.
  absl::Status CheckRows(absl::string_view call, uint32_t tensor, absl::Span<const uint64_t> ids,
                         size_t floats, bool unique, const TensorInfo** table) const {
    if (tensor >= map_.tensors.size() || !map_.tensors[tensor].is_table()) {
      return absl::InvalidArgumentError(absl::StrCat(call, ": tensor ", tensor, " is not a table"));
    }
    const TensorInfo& t = map_.tensors[tensor];
    *table = &t;
    if (floats != ids.size() * t.table_dim || floats > (uint64_t{1} << 31)) {
      return absl::InvalidArgumentError(absl::StrCat(call, ": ", ids.size(), " rows of table '",
                                                     t.name, "' want ", ids.size() * t.table_dim,
                                                     " floats (at most 2^31), got ", floats));
    }
    absl::flat_hash_set<uint64_t> seen;
    for (uint64_t id : ids) {
      if (id >= t.table_rows) {
        return absl::InvalidArgumentError(absl::StrCat(call, ": row ", id, " of table '", t.name,
                                                       "' is out of range (", t.table_rows,
                                                       " rows)"));
      }
      if (unique && !seen.insert(id).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(call, ": row ", id, " of table '", t.name, "' twice"));
      }
    }
    return absl::OkStatus();
  }

  static std::vector<uint32_t> ChunkElems(const ShardMap& map) {
    std::vector<uint32_t> n(map.chunks.size());
    for (const ChunkInfo& c : map.chunks) n[c.chunk_id] = c.num_elems;
    return n;
  }

  static PushHandle MakePush(std::shared_ptr<Completion> c) { return MakePushHandle(std::move(c)); }
  static PullHandle MakePull(std::shared_ptr<PullState> s) { return MakePullHandle(std::move(s)); }

  const ShardMap map_;
  const ClientOptions options_;
  std::vector<std::unique_ptr<TensorEncoder>> encoders_;  // by tensor index; null: a table
  std::vector<std::vector<const ChunkInfo*>> table_parts_;  // by tensor: partitions in order
  std::vector<std::unique_ptr<absl::Mutex>> tensor_mu_;   // guards encoders_[t]
  std::vector<std::unique_ptr<ShardStream>> streams_;     // by shard index
  internal::StreamCounters counters_;
  BufferPool buffers_;
  internal::PublishedCopies published_;  // pull codec: the copies pulls apply to
  std::unique_ptr<Executor> encode_pool_;  // null: encode on the caller
  std::atomic<uint64_t> push_calls_{0}, chunks_pushed_{0}, bytes_pushed_{0},
      fp32_bytes_pushed_{0}, pull_calls_{0}, push_messages_{0};
  std::atomic<uint64_t> link_exact_pushes_{0};
  const bool link_enabled_ = options_.codec.link_choice;
  mutable absl::Mutex link_mu_;
  LinkChoice link_ ABSL_GUARDED_BY(link_mu_);
  absl::Mutex bucket_mu_;
  Bucket open_ ABSL_GUARDED_BY(bucket_mu_);
  uint64_t sent_clock_ ABSL_GUARDED_BY(bucket_mu_) = 0;    // clock of the last bucket sent
  uint64_t sent_in_clock_ ABSL_GUARDED_BY(bucket_mu_) = 0;  // buckets sent in it
};

}  // namespace

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Connect(const ShardMap& map,
                                                            const ClientOptions& options,
                                                            ChannelFactory* channels) {
  GS_RETURN_IF_ERROR(ValidateShardMap(map));
  if (options.job_id.empty()) return absl::InvalidArgumentError("Connect: empty job_id");
  if (std::max(options.first_bucket_bytes, options.bucket_bytes) > kMaxBucketBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Connect: bucket bounds ", options.first_bucket_bytes, "/", options.bucket_bytes,
        " bytes, at most ", kMaxBucketBytes, " (a Push message must fit the shard's limit)"));
  }
  auto client = std::make_unique<PsClientImpl>(map, options);
  GS_RETURN_IF_ERROR(client->Init(channels != nullptr ? channels : ChannelFactory::Default()));
  return client;
}

absl::Status PsClient::Wait(const PushHandle& handle, absl::Duration timeout, Env* env) {
  if (!handle.valid()) return absl::OkStatus();
  return handle.done_->Wait(timeout, env);
}

absl::Status PsClient::Wait(const PullHandle& handle, absl::Duration timeout, Env* env) {
  return WaitTensors(handle, {}, timeout, env);
}

absl::Status PsClient::WaitTensors(const PullHandle& handle, absl::Span<const uint32_t> tensors,
                                   absl::Duration timeout, Env* env) {
  const absl::Time deadline = env->Now() + timeout;
  for (const auto& part : handle.parts_) {
    absl::Status s = part->WaitTensors(tensors, deadline - env->Now(), env);
    if (s.ok()) continue;
    if (absl::IsDeadlineExceeded(s) && handle.parts_.size() > 1) {  // name the caller's timeout
      s = absl::DeadlineExceededError(
          absl::StrCat("pull: no answer within ", absl::FormatDuration(timeout)));
    }
    // A pull that failed writes nothing more into the caller's buffers; one
    // that is only slower than `timeout` goes on (see [step loop]).
    if (part->settled()) Abandon(handle);
    return s;
  }
  return absl::OkStatus();
}

PullHandle PsClient::PullWithRows(uint64_t clock, std::vector<absl::Span<float>> out,
                                  std::vector<RowsAsk> rows) {
  if (rows.empty()) return Pull(clock, std::move(out));
  auto state = std::make_shared<internal::PullState>(std::vector<internal::PullTarget>(),
                                                     std::vector<std::vector<uint64_t>>(1, {0}));
  state->Fail(0, absl::UnimplementedError("PullWithRows: this client asks rows with PullRows"));
  return MakePullHandle(std::move(state));
}

PullHandle PsClient::PullDeferred(uint64_t, std::vector<absl::Span<float>>) {
  auto state = std::make_shared<internal::PullState>(std::vector<internal::PullTarget>(),
                                                     std::vector<std::vector<uint64_t>>(1, {0}));
  state->Fail(0, absl::UnimplementedError("PullDeferred: this client does not defer answers"));
  return MakePullHandle(std::move(state));
}

void PsClient::Release(const PullHandle& handle) { StopDeferring(handle)(); }

std::function<void()> PsClient::StopDeferring(const PullHandle& handle) {
  std::vector<std::function<void()>> runs;
  for (const auto& part : handle.parts_) runs.push_back(part->StopDeferring());
  return [parts = handle.parts_, runs = std::move(runs)]() {
    for (const auto& run : runs) run();
  };
}

void PsClient::Abandon(const PullHandle& handle) {
  for (const auto& part : handle.parts_) part->Abandon();
}

PsClient::PullProgress PsClient::Progress(const PullHandle& handle) {
  PullProgress p{0, true};
  for (const auto& part : handle.parts_) {
    p.chunks_done += part->chunks_done();
    p.settled = p.settled && part->settled();
  }
  return p;
}

}  // namespace gradstream::client
