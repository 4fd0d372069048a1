// PullPublisher. See pull_publisher.h and [pull codec].
#include "server/shard/pull_publisher.h"

#include <cstring>

#include "common/codec/published.h"
#include "common/job/path_sums.h"
#include "glog/logging.h"

namespace gradstream::shard {
namespace {

// What a delta's header weighs on the wire, roughly (codec, count, scales).
constexpr size_t kDeltaHeaderBytes = 16;
// Keys the pull codec's stochastic rounding apart from any worker's pushes.
constexpr uint64_t kPullSeed = 0x70756c6c636f6465;  // "pullcode"
constexpr uint32_t kPullWorker = 0xffffffff;

}  // namespace

PullPublisher::PullPublisher(CodecType codec, bool once_per_clock,
                             const std::vector<ChunkSpec>& chunks,
                             const PrecisionPolicy& precision,
                             const LinkChoicePolicy& link, Env* env)
    : codec_(codec),
      once_per_clock_(once_per_clock),
      env_(env),
      link_enabled_(link.enabled),
      link_(link) {
  CHECK(codec != CodecType::kNone) << "a pull publisher needs a compressing codec";
  PrecisionPolicy policy = precision;
  policy.ladder = LadderFrom(codec);
  for (const ChunkSpec& spec : chunks) {
    auto c = std::make_unique<Chunk>(spec.num_elems, spec.pull_fp32);
    if (!c->fp32) {
      absl::MutexLock l(&c->mu);
      c->publisher = *DeltaPublisher::Create(codec, spec.num_elems);
      c->precision = std::make_unique<PrecisionController>(policy);
    }
    chunks_[spec.chunk_id] = std::move(c);
  }
}

void PullPublisher::Reset(Chunk& c, absl::Span<const float> params, uint64_t version) {
  c.copy.assign(params.begin(), params.end());
  c.has = true;
  c.version = version;
  c.checksum = PublishedChecksum(c.copy);
  c.history.clear();
  c.history_bytes = 0;
}

void PullPublisher::Control(uint64_t chunk_id, Chunk& c, absl::Span<const float> params,
                            uint64_t version) {
  if (c.kept) {
    // The sums over the chunk ([error sums] in common/job/path_sums.cc):
    // error = params - copy, signal = params - the last publication's params.
    const PathSums sums = SumPath(params.data(), c.copy.data(), params.data(),
                                  c.published_params.data(), nullptr, c.num_elems);
    // Measured before this publication's send, the error holds this update
    // whole: what the copy owed along it is dot - |update|^2 ([owed descent]).
    c.precision->Observe(version, sums.error2, sums.signal2, sums.value2,
                         sums.dot - sums.signal2);
    if (c.precision->Flush()) {
      double left2 = 0.0;
      if (!FlushByDelta(chunk_id, c, params, version, &left2) ||
          !c.precision->FlushLeftLittle(left2, sums.signal2)) {
        Reset(c, params, version);  // the copy is exact from this version on
        left2 = 0.0;
      }
      c.precision->Observe(version, left2, sums.signal2, sums.value2);
    }
  }
  Count(c, params);
}

void PullPublisher::Count(Chunk& c, absl::Span<const float> params) {
  c.kept = c.precision->MeasureDue(++c.publications);
  if (c.kept) c.published_params.assign(params.begin(), params.end());
}

bool PullPublisher::FlushByDelta(uint64_t chunk_id, Chunk& c, absl::Span<const float> params,
                                 uint64_t version, double* left2) {
  if (!MorePrecise(kFlushCodec, c.precision->level_codec())) return false;
  // Made for the flush and dropped: flushes are at least 3 x bound clocks
  // apart, and a publisher holds a chunk-sized scratch.
  std::unique_ptr<DeltaPublisher> publisher = *DeltaPublisher::Create(kFlushCodec, c.num_elems);
  if (!PublishWith(*publisher, chunk_id, c, params, version).ok()) return false;
  *left2 = SumPath(params.data(), c.copy.data(), params.data(), nullptr, nullptr, c.num_elems)
               .error2;
  return true;
}

absl::Status PullPublisher::PublishWith(DeltaPublisher& publisher, uint64_t chunk_id, Chunk& c,
                                       absl::Span<const float> params, uint64_t version) {
  Delta d;
  d.from_version = c.version;
  d.from_checksum = c.checksum;
  EncodeKey key;
  key.seed = kPullSeed;
  key.worker = kPullWorker;
  key.clock = static_cast<uint32_t>(version);
  key.chunk = static_cast<uint32_t>(chunk_id);
  const absl::StatusOr<uint32_t> checksum = publisher.Publish(
      params, key, absl::MakeSpan(c.copy), &d.delta.header, &d.delta.payload);
  if (!checksum.ok()) return checksum.status();
  c.version = version;
  c.checksum = *checksum;
  c.history_bytes += d.delta.payload.size() + kDeltaHeaderBytes;
  c.history.push_back(std::move(d));
  // A chain heavier than a snapshot is never sent, so it is not kept.
  const size_t snapshot_bytes = size_t{c.num_elems} * sizeof(float);
  while (c.history_bytes > snapshot_bytes) {
    c.history_bytes -= c.history.front().delta.payload.size() + kDeltaHeaderBytes;
    c.history.pop_front();
  }
  return absl::OkStatus();
}

void PullPublisher::PublishDelta(uint64_t chunk_id, Chunk& c, absl::Span<const float> params,
                                 uint64_t version, bool exact) {
  if (c.fp32) {  // see [layer-wise pull]
    Reset(c, params, version);
    return;
  }
  if (c.precision->Codec() == CodecType::kNone) {  // raised: published whole
    Reset(c, params, version);
    Control(chunk_id, c, params, version);
    return;
  }
  if (exact) {  // the link's choice: whole, unmeasured (the next is measured from here)
    Reset(c, params, version);
    c.precision->Skip();
    Count(c, params);
    return;
  }
  DeltaPublisher* publisher = c.publisher.get();
  if (const CodecType level = c.precision->Codec(); level != codec_) {
    if (c.raised == nullptr || c.raised_codec != level) {
      c.raised = *DeltaPublisher::Create(level, c.num_elems);
      c.raised_codec = level;
    }
    publisher = c.raised.get();
  }
  if (const absl::Status s = PublishWith(*publisher, chunk_id, c, params, version); !s.ok()) {
    // Non-finite parameters: nothing to encode them with; workers get them whole.
    LOG(WARNING) << "chunk " << chunk_id << ": pull codec cannot encode version " << version
                 << " (" << s << "); publishing a snapshot";
    Reset(c, params, version);
    c.kept = false;  // nothing measured against non-finite parameters
    return;
  }
  Control(chunk_id, c, params, version);
}

bool PullPublisher::LinkExact(uint64_t reader_clock) {
  if (!link_enabled_) return false;  // no job-wide lock on a publication without it
  absl::MutexLock l(&link_mu_);
  if (reader_clock > link_clock_) {  // the first publication for a new clock
    link_clock_ = reader_clock;
    if (const LinkDecision* d = link_.Tick(reader_clock, env_->Now())) {
      LOG(INFO) << "pull link choice at clock " << d->clock << ": " << DescribeLinkDecision(*d);
    }
  }
  return link_.Exact(reader_clock);
}

std::optional<LinkDecision> PullPublisher::LinkDecided() const {
  if (!link_enabled_) return std::nullopt;
  absl::MutexLock l(&link_mu_);
  if (link_.decisions().empty()) return std::nullopt;
  return link_.decisions().back();
}

std::optional<PathPrecision> PullPublisher::Precision(uint64_t chunk_id) const {
  auto it = chunks_.find(chunk_id);
  if (it == chunks_.end() || it->second->fp32) return std::nullopt;
  const Chunk& c = *it->second;
  absl::MutexLock l(&c.mu);
  return c.precision->Report();
}

PullPublisher::Chunk& PullPublisher::Find(uint64_t chunk_id) const {
  auto it = chunks_.find(chunk_id);
  CHECK(it != chunks_.end()) << "chunk " << chunk_id << " has no published copy";
  return *it->second;
}

void PullPublisher::MaybePublish(uint64_t chunk_id, Chunk& c, absl::Span<const float> params,
                                 uint64_t version, uint64_t reader_clock) {
  if (!c.has) {
    Reset(c, params, version);
    if (c.precision != nullptr) Count(c, params);
    c.published_clock = reader_clock;
  } else if (version != c.version && (!once_per_clock_ || reader_clock > c.published_clock)) {
    PublishDelta(chunk_id, c, params, version, !c.fp32 && LinkExact(reader_clock));
    c.published_clock = reader_clock;
  }
}

void PullPublisher::Publish(uint64_t chunk_id, absl::Span<const float> params, uint64_t version,
                            uint64_t reader_clock) {
  Chunk& c = Find(chunk_id);
  absl::MutexLock l(&c.mu);
  MaybePublish(chunk_id, c, params, version, reader_clock);
}

size_t PullPublisher::Serve(uint64_t chunk_id, absl::Span<const float> params, uint64_t version,
                            uint64_t reader_clock, const HeldCopy* held, PulledChunk* out) {
  Chunk& c = Find(chunk_id);
  absl::MutexLock l(&c.mu);
  MaybePublish(chunk_id, c, params, version, reader_clock);
  out->published = true;
  out->version = c.version;
  out->checksum = c.checksum;
  out->values.clear();
  out->deltas.clear();
  if (held != nullptr && held->version == c.version && held->checksum == c.checksum) {
    return 0;  // already current
  }
  if (held != nullptr) {
    for (size_t i = 0; i < c.history.size(); ++i) {
      const Delta& d = c.history[i];
      if (d.from_version != held->version || d.from_checksum != held->checksum) continue;
      size_t bytes = 0;
      for (size_t j = i; j < c.history.size(); ++j) {
        out->deltas.push_back(c.history[j].delta);
        bytes += c.history[j].delta.payload.size();
      }
      return bytes;
    }
  }
  out->values.assign(reinterpret_cast<const char*>(c.copy.data()), c.copy.size() * sizeof(float));
  return out->values.size();
}

std::optional<PublishedCopy> PullPublisher::Save(uint64_t chunk_id) const {
  auto it = chunks_.find(chunk_id);
  if (it == chunks_.end()) return std::nullopt;
  const Chunk& c = *it->second;
  absl::MutexLock l(&c.mu);
  if (!c.has) return std::nullopt;
  return PublishedCopy{chunk_id, c.version, c.copy};
}

bool PullPublisher::Restore(const PublishedCopy& saved) {
  auto it = chunks_.find(saved.chunk_id);
  if (it == chunks_.end() || saved.copy.size() != it->second->num_elems) return false;
  Chunk& c = *it->second;
  absl::MutexLock l(&c.mu);
  Reset(c, saved.copy, saved.version);
  c.published_clock = 0;
  c.kept = false;
  return true;
}

}  // namespace gradstream::shard
