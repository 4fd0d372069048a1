// See push_precision.h.
#include "server/shard/push_precision.h"

#include <algorithm>

namespace gradstream::shard {

void PushPrecisionBook::Record(uint64_t chunk_id, uint64_t worker, uint64_t clock,
                               CodecType codec, float error_clocks, bool raised) {
  absl::MutexLock l(&mu_);
  if (codec == CodecType::kNone && !raised && !chunks_.contains(chunk_id)) {
    return;  // an uncompressed tensor: nothing to control
  }
  Chunk& c = chunks_[chunk_id];
  if (codec != CodecType::kNone) c.base = codec;
  Worker& w = c.workers[worker];
  if (codec == CodecType::kNone && !raised && !w.raised) ++c.flushes;
  if (raised != w.raised && c.base != CodecType::kNone) {
    PrecisionEvent e;
    e.kind = raised ? PrecisionEvent::Kind::kRaise : PrecisionEvent::Kind::kRelax;
    e.clock = clock;
    e.from = raised ? c.base : CodecType::kNone;
    e.to = raised ? CodecType::kNone : c.base;
    e.ratio = error_clocks;
    c.events.push_back(e);
    while (c.events.size() > PrecisionController::kMaxEvents) c.events.pop_front();
  }
  w.raised = raised;
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
    if (w.raised) p.codec = CodecType::kNone;
    p.ratio = std::max(p.ratio, w.ratio);
  }
  p.flushes = c.flushes;
  p.events.assign(c.events.begin(), c.events.end());
  return p;
}

}  // namespace gradstream::shard
