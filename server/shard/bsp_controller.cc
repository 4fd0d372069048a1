// Sync (BSP): the decoded pushes of clock c from every member of the epoch in
// effect at c are summed into one open round; when the round is complete and
// it is the chunk's next clock, it is divided by the contributor count and
// the optimizer runs once; the version becomes c+1. A membership change that
// removes a member lets a round waiting on it complete with the others
// (re-normalized by the actual contributor count).
#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/codec/decoder.h"
#include "glog/logging.h"
#include "server/shard/consistency.h"

namespace gradstream::shard {
namespace {

// Rounds recorded per run of lost clocks passed over at once (see [lost
// rounds]); the rest of the run shows in the version and a log line.
constexpr uint64_t kMaxLostRoundRecords = 64;

bool Contains(const std::vector<uint64_t>& v, uint64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Bounds on a round's sum at or above this take the checked addition: far
// below FLT_MAX, so no sum of pushes that stays under it can overflow.
constexpr double kSafeRoundBound = 1e37;

// Adds a push to an open round's sum unless a sum would overflow (see
// [finite apply] in common/optim/optimizer.h). While the round's bound
// stays far below FLT_MAX it adds in place; otherwise it writes the sum to
// a per-thread buffer and swaps it in only when every value is finite, so a
// refused push leaves the round as it was.
absl::Status AddToRound(const PushArgs& push, SyncRound* round) {
  std::vector<float>* acc = &round->acc;
  absl::StatusOr<ChunkDecoder> decoder =
      ChunkDecoder::Create(push.header, push.payload, acc->size(), 1.0f);
  if (!decoder.ok()) return decoder.status();
  const double bound = round->acc_bound + decoder->max_abs();
  if (bound < kSafeRoundBound) {
    decoder->AddTo(acc->data());
    round->acc_bound = bound;
    return absl::OkStatus();
  }
  thread_local std::vector<float> sum;
  const size_t n = acc->size();
  sum.resize(n);
  constexpr uint32_t kBlock = 1024;
  alignas(64) float block[kBlock];
  const float scale = decoder->block_scale();
  uint32_t bad = 0;
  for (size_t base = 0; base < n; base += kBlock) {
    const uint32_t m = static_cast<uint32_t>(std::min<size_t>(kBlock, n - base));
    const float* u = decoder->Block(static_cast<uint32_t>(base), m, block);
    const float* a = acc->data() + base;
    float* out = sum.data() + base;
    for (uint32_t i = 0; i < m; ++i) {
      const float v = a[i] + scale * u[i];
      out[i] = v;
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
  }
  if (bad != 0) {
    return absl::InvalidArgumentError(
        "adding this push to its round would make the round's sum non-finite (NaN or Inf): "
        "refused, the round is unchanged");
  }
  acc->swap(sum);
  round->acc_bound = bound;
  return absl::OkStatus();
}

class BspController final : public ConsistencyController {
 public:
  ModeRules rules() const override {
    return ModeRules{.rounds = true,
                     .push_clock_window = false,
                     .drop_pushes_awaiting_init = false,
                     .eager_publish = true,
                     .close_lost_rounds = true};
  }

  absl::StatusOr<bool> Push(ChunkState& chunk, const PushArgs& push, JobContext& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu) override {
    auto it = chunk.applied.find(push.worker);
    if (it != chunk.applied.end() && it->second.Contains(push.clock)) return true;
    auto round = chunk.rounds.find(push.clock);
    if (round != chunk.rounds.end() && round->second.Has(push.worker)) return true;

    uint64_t epoch = 0;
    const std::vector<uint64_t> members = job.MembersAt(push.clock, &epoch);
    if (!Contains(members, push.worker)) {
      if (job.LeftBefore(push.worker, push.clock)) return true;  // see [late leave]
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
    if (fresh && push.clock == version && chunk.initialized.load() && members.size() == 1 &&
        push.rows == nullptr) {
      // A round this push completes by itself (one member): decode fused into
      // the update, no accumulator. Same result as the general path.
      absl::Status s = job.optimizer().ApplyEncoded(push.header, push.payload, 1.0f,
                                                    &chunk.params, &chunk.opt);
      if (!s.ok()) return s;
      chunk.applied[push.worker].Add(push.clock);
      chunk.version.store(push.clock + 1);
      job.RecordRound(RoundInfo{chunk.chunk_id, push.clock, epoch, {push.worker}});
      Advance(chunk, job);  // later rounds may be complete already
      return false;
    }
    if (fresh) {
      // AddToRound validates fully before touching acc, so a rejected push
      // leaves no trace but this empty round, which is dropped again. The
      // accumulator reuses the buffer of the last applied round.
      round = chunk.rounds.emplace(push.clock, SyncRound{}).first;
      round->second.acc = std::move(chunk.spare_acc);
      round->second.acc.assign(chunk.num_elems, 0.0f);
    }
    absl::Status s = push.rows != nullptr
                         ? AddRows(*push.rows, chunk.rows->spec().dim, &round->second.rows)
                         : AddToRound(push, &round->second);
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
      if (PassLostClocks(chunk, job)) {
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
      // Sizes were checked when the round was opened, so Apply fails only
      // for an update that would not be finite (see [finite apply]): the
      // round is then closed without an update, like a lost round, so the
      // job goes on with the chunk exactly as it was.
      absl::Status s =
          chunk.rows != nullptr
              ? ApplyRowSum(job.optimizer(), round.rows, scale, chunk.rows.get(), &chunk.opt)
              : job.optimizer().Apply(&chunk.params, round.acc, scale, &chunk.opt,
                                      round.acc_bound);
      if (!s.ok()) {
        LOG(WARNING) << "chunk " << chunk.chunk_id << ": round " << clock
                     << " closed without its update: " << s.message();
      }
      for (uint64_t w : members) chunk.applied[w].Add(clock);  // settled, pushed or lost
      for (uint64_t w : round.contributors) chunk.applied[w].Add(clock);
      RoundInfo info;
      info.chunk_id = chunk.chunk_id;
      info.clock = clock;
      info.epoch = epoch;
      if (s.ok()) info.contributors = std::move(round.contributors);
      chunk.spare_acc = std::move(round.acc);
      chunk.rounds.erase(it);
      chunk.version.store(clock + 1);
      job.RecordRound(std::move(info));
      moved = true;
      SkipUnstaffedClocks(chunk, job);
    }
    return moved;
  }

  // NOTE: [lost rounds] When every member of the epoch in effect at a clock
  // finished it but its round lacks some of their pushes, those pushes were
  // acknowledged by an earlier run of this shard and lost with it (the
  // restored checkpoint predates them): the round closes with what arrived,
  // re-normalized, or is passed over when nothing did. Only a restored shard
  // gets here. Why: docs/design/lost-rounds.md.
  //
  // Passes over the run of clocks from the version's on that every member
  // finished with no round open for them: up to the slowest member's clock,
  // the next open round or the next membership change, whichever is first,
  // in one step whatever the run's length (a member's clock is the client's
  // word, bounded by [clock windows] but long after a restore). Records at
  // most kMaxLostRoundRecords of the run's rounds, with no contributors.
  static bool PassLostClocks(ChunkState& chunk, JobContext& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(chunk.mu) {
    const uint64_t clock = chunk.version.load();
    if (!chunk.rounds.empty() && chunk.rounds.begin()->first == clock) return false;
    uint64_t epoch = 0;
    const std::vector<uint64_t> members = job.MembersAt(clock, &epoch);
    if (members.empty()) return false;  // see [unstaffed clocks]
    uint64_t to = std::numeric_limits<uint64_t>::max();
    for (uint64_t w : members) to = std::min(to, job.WorkerClock(w));
    if (to <= clock) return false;
    if (std::optional<uint64_t> next = job.NextEpochClock(clock)) to = std::min(to, *next);
    if (!chunk.rounds.empty()) to = std::min(to, chunk.rounds.begin()->first);
    for (uint64_t w : members) chunk.applied[w].AddRange(clock, to);
    chunk.version.store(to);
    for (uint64_t c = clock; c < to && c - clock < kMaxLostRoundRecords; ++c) {
      job.RecordRound(RoundInfo{chunk.chunk_id, c, epoch, {}});
    }
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

uint64_t ClockWindow(const ConsistencyOptions& o, uint32_t max_pending_rounds) {
  const uint64_t rounds = std::max<uint32_t>(max_pending_rounds, 1);
  switch (o.mode) {
    case ConsistencyMode::kSync:
      return rounds;
    case ConsistencyMode::kBounded:
      return uint64_t{o.staleness} + rounds;
    case ConsistencyMode::kAsync:
      return kAsyncClockWindow;
  }
  return rounds;
}

uint64_t PullWindow(const ConsistencyOptions& o, uint32_t max_pending_rounds) {
  return std::max(ClockWindow(o, max_pending_rounds), kAsyncClockWindow);
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
