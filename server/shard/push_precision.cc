// See push_precision.h.
#include "server/shard/push_precision.h"

#include <algorithm>

namespace gradstream::shard {

void PushPrecisionBook::Record(uint64_t chunk_id, uint64_t worker, uint64_t clock,
                               CodecType codec, float error_clocks, bool raised,
                               CodecType level, float owed_raise) {
  absl::MutexLock l(&mu_);
  if (codec == CodecType::kNone && !raised && !chunks_.contains(chunk_id)) {
    return;  // an uncompressed tensor: nothing to control
  }
  Chunk& c = chunks_[chunk_id];
  if (codec != CodecType::kNone && !raised) c.base = codec;
  Worker& w = c.workers[worker];
  if (!w.seen) {
    w.seen = true;
    w.level = c.base;
    if (raised && warmup_clocks_ > 0) {
      w.warmup_ends_by = std::max<uint64_t>(warmup_clocks_, clock + 1);
    }
  }
  // A none send below the top level is a flush.
  if (codec == CodecType::kNone && (!raised || level != CodecType::kNone)) ++c.flushes;
  const CodecType at = raised ? level : c.base;
  if (at != w.level && c.base != CodecType::kNone) {
    PrecisionEvent e;
    e.kind = MorePrecise(at, w.level) ? PrecisionEvent::Kind::kRaise : PrecisionEvent::Kind::kRelax;
    e.clock = clock;
    e.from = w.level;
    e.to = at;
    e.owed = e.kind == PrecisionEvent::Kind::kRaise && owed_raise > 0;
    e.ratio = e.owed ? owed_raise : error_clocks;
    e.warmup = e.kind == PrecisionEvent::Kind::kRelax && clock <= w.warmup_ends_by;
    if (e.warmup) w.warmup_ends_by = 0;
    c.events.push_back(e);
    while (c.events.size() > PrecisionController::kMaxEvents) c.events.pop_front();
  }
  w.level = at;
  w.ratio = error_clocks;
}

std::optional<PathPrecision> PushPrecisionBook::Report(uint64_t chunk_id) const {
  absl::MutexLock l(&mu_);
  auto it = chunks_.find(chunk_id);
  if (it == chunks_.end() || it->second.base == CodecType::kNone) return std::nullopt;
  const Chunk& c = it->second;
  PathPrecision p;
  p.codec = c.base;
  for (const auto& [id, w] : c.workers) {
    if (MorePrecise(w.level, p.codec)) p.codec = w.level;
    p.raised |= w.level != c.base;
    p.ratio = std::max(p.ratio, w.ratio);
  }
  p.flushes = c.flushes;
  p.events.assign(c.events.begin(), c.events.end());
  return p;
}

}  // namespace gradstream::shard
