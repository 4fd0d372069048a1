// Sync (BSP): the decoded pushes of clock c from every member of the epoch in
// effect at c are summed into one open round; when the round is complete and
// it is the chunk's next clock, it is divided by the contributor count and
// the optimizer runs once; the version becomes c+1. A membership change that
// removes a member lets a round waiting on it complete with the others
// (re-normalized by the actual contributor count).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/shard/consistency.h"

namespace gradstream::shard {
namespace {

bool Contains(const std::vector<uint64_t>& v, uint64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

class BspController final : public ConsistencyController {
 public:
  absl::StatusOr<bool> Push(ChunkState& chunk, const PushArgs& push, JobContext& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu) override {
    auto it = chunk.applied.find(push.worker);
    if (it != chunk.applied.end() && it->second.Contains(push.clock)) return true;
    auto round = chunk.rounds.find(push.clock);
    if (round != chunk.rounds.end() && round->second.Has(push.worker)) return true;

    uint64_t epoch = 0;
    const std::vector<uint64_t> members = job.MembersAt(push.clock, &epoch);
    if (!Contains(members, push.worker)) {
      return absl::FailedPreconditionError(absl::StrCat("worker ", push.worker,
                                                        " is not a member at clock ", push.clock,
                                                        " (epoch ", epoch, ")"));
    }
    const uint64_t version = chunk.version.load();
    if (push.clock < version) {
      return absl::FailedPreconditionError(absl::StrCat(
          "round ", push.clock, " of chunk ", chunk.chunk_id,
          " was already applied without worker ", push.worker, " (chunk version ", version, ")"));
    }
    // A member may be further ahead than the window when this shard lost
    // the rounds in between, which it says it finished (see [lost rounds]);
    // its round waits for them to close. Never more open rounds than the
    // window either way.
    const bool after_lost_rounds =
        job.WorkerClock(push.worker) >= push.clock &&
        (round != chunk.rounds.end() || chunk.rounds.size() < job.max_pending_rounds());
    if (push.clock >= version + job.max_pending_rounds() && !after_lost_rounds) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "clock ", push.clock, " is too far ahead of chunk ", chunk.chunk_id, " version ", version,
          " (at most ", job.max_pending_rounds(), " open rounds)"));
    }
    const bool fresh = round == chunk.rounds.end();
    if (fresh && push.clock == version && chunk.initialized.load() && members.size() == 1) {
      // A round this push completes by itself (one member): decode fused into
      // the update, no accumulator. Same result as the general path.
      absl::Status s = job.optimizer().ApplyEncoded(push.header, push.payload, 1.0f,
                                                    absl::MakeSpan(chunk.params), &chunk.opt);
      if (!s.ok()) return s;
      chunk.applied[push.worker].Add(push.clock);
      chunk.version.store(push.clock + 1);
      job.RecordRound(RoundInfo{chunk.chunk_id, push.clock, epoch, {push.worker}});
      Advance(chunk, job);  // later rounds may be complete already
      return false;
    }
    if (fresh) {
      // DecodeAdd validates fully before touching acc, so a rejected push
      // leaves no trace but this empty round, which is dropped again. The
      // accumulator reuses the buffer of the last applied round.
      round = chunk.rounds.emplace(push.clock, SyncRound{}).first;
      round->second.acc = std::move(chunk.spare_acc);
      round->second.acc.assign(chunk.num_elems, 0.0f);
    }
    absl::Status s = DecodeAdd(push.header, push.payload, absl::MakeSpan(round->second.acc), 1.0f);
    if (!s.ok()) {
      if (fresh) chunk.rounds.erase(round);
      return s;
    }
    round->second.contributors.push_back(push.worker);
    Advance(chunk, job);
    return false;
  }

  bool Advance(ChunkState& chunk, JobContext& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu) override {
    bool moved = SkipUnstaffedClocks(chunk, job);
    while (chunk.initialized.load()) {
      if (PassLostClock(chunk, job)) {
        moved = true;
        SkipUnstaffedClocks(chunk, job);
        continue;
      }
      if (chunk.rounds.empty()) break;
      auto it = chunk.rounds.begin();
      const uint64_t clock = it->first;
      if (clock != chunk.version.load()) break;
      uint64_t epoch = 0;
      const std::vector<uint64_t> members = job.MembersAt(clock, &epoch);
      SyncRound& round = it->second;
      // A member that finished `clock` without its push being here will
      // never send it: see [lost rounds].
      const bool complete =
          !round.contributors.empty() &&
          std::all_of(members.begin(), members.end(),
                      [&](uint64_t w) { return round.Has(w) || job.WorkerClock(w) > clock; });
      if (!complete) break;
      const float scale = 1.0f / static_cast<float>(round.contributors.size());
      // Sizes were checked when the round was opened; Apply cannot fail here.
      absl::Status s =
          job.optimizer().Apply(absl::MakeSpan(chunk.params), round.acc, scale, &chunk.opt);
      if (!s.ok()) break;
      for (uint64_t w : members) chunk.applied[w].Add(clock);  // settled, pushed or lost
      for (uint64_t w : round.contributors) chunk.applied[w].Add(clock);
      RoundInfo info;
      info.chunk_id = chunk.chunk_id;
      info.clock = clock;
      info.epoch = epoch;
      info.contributors = std::move(round.contributors);
      chunk.spare_acc = std::move(round.acc);
      chunk.rounds.erase(it);
      chunk.version.store(clock + 1);
      job.RecordRound(std::move(info));
      moved = true;
      SkipUnstaffedClocks(chunk, job);
    }
    return moved;
  }

  // NOTE: [lost rounds] A member's ClockAdvance(c + 1) reaches a shard after
  // all its pushes for clock c (one stream, handled in order; the trainer
  // even waits for their acks). So when every member of the epoch in effect
  // at c has finished c but the round of c lacks some of their pushes, those
  // will never come: an earlier run of this shard acknowledged them, then
  // died, and the checkpoint this one restored predates them. The round is
  // then closed with what did arrive (re-normalized, like a round that lost
  // a dead member), or passed over when nothing did: those updates are lost
  // (at most the checkpoint interval's worth) and the job goes on. Without
  // this the members, who moved on, and the restored shard would wait for
  // each other forever. A shard that never restarted has every push its
  // members finished, so this never fires there.
  //
  // Passes over the version's clock when no round is open for it and every
  // member finished it; records the round with no contributors.
  static bool PassLostClock(ChunkState& chunk, JobContext& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu) {
    const uint64_t clock = chunk.version.load();
    if (!chunk.rounds.empty() && chunk.rounds.begin()->first == clock) return false;
    uint64_t epoch = 0;
    const std::vector<uint64_t> members = job.MembersAt(clock, &epoch);
    if (members.empty()) return false;  // see [unstaffed clocks]
    for (uint64_t w : members) {
      if (job.WorkerClock(w) <= clock) return false;
    }
    for (uint64_t w : members) chunk.applied[w].Add(clock);
    chunk.version.store(clock + 1);
    job.RecordRound(RoundInfo{chunk.chunk_id, clock, epoch, {}});
    return true;
  }

  // NOTE: [unstaffed clocks] When every member of a job left or died, the
  // epoch in effect has no workers: its clocks carry no gradient, so their
  // rounds are vacuous and nobody will ever push them. The version passes
  // over them to the clock where the next epoch with members starts (the
  // clock a replacement worker joins at). Without this the replacement's
  // first pull would wait for rounds that can never complete. An open round
  // on the way (pushed before its workers were removed) stops the skip: it
  // is complete, as a round that lost a dead member is, and Advance applies
  // it first, whenever the next epoch became known.
  static bool SkipUnstaffedClocks(ChunkState& chunk, JobContext& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu) {
    if (!chunk.initialized.load()) return false;
    const uint64_t version = chunk.version.load();
    const std::optional<uint64_t> next = job.NextStaffedClock(version);
    if (!next.has_value()) return false;
    uint64_t to = *next;
    if (!chunk.rounds.empty()) to = std::min(to, chunk.rounds.begin()->first);
    if (to == version) return false;
    chunk.version.store(to);
    return true;
  }

  bool PullReady(uint64_t clock, uint64_t min_clock, uint64_t min_version) const override {
    return min_version >= clock;
  }
};

}  // namespace

std::unique_ptr<ConsistencyController> NewBspController() {
  return std::make_unique<BspController>();
}

std::unique_ptr<ConsistencyController> NewController(const ConsistencyOptions& o) {
  switch (o.mode) {
    case ConsistencyMode::kSync:
      return NewBspController();
    case ConsistencyMode::kBounded:
      return NewSspController(o.staleness, o.scale_stale_pushes);
    case ConsistencyMode::kAsync:
      return NewAsyncController(o.scale_stale_pushes);
  }
  return NewBspController();
}

}  // namespace gradstream::shard
