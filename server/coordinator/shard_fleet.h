// The shards as the coordinator knows them: the shard table (address,
// health) and, per job, what its shards have (the job, the epochs they
// acknowledged), where they are (clocks, progress) and what they report
// (checkpoint failures). Each tick the fleet plans the shard calls under the
// coordinator's lock (Plan), RunShardCalls makes them without it, and Apply
// folds the answers in. The shard table is durable; what the fleet knows of
// a job's shards is rebuilt after a restart.
#ifndef GRADSTREAM_SERVER_COORDINATOR_SHARD_FLEET_H_
#define GRADSTREAM_SERVER_COORDINATOR_SHARD_FLEET_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/coordinator/clock_rate.h"
#include "server/coordinator/membership_planner.h"
#include "server/coordinator/shard_client.h"
#include "server/coordinator/state_storage.h"
#include "server/coordinator/types.h"

namespace gradstream::coordinator {

// What the coordinator knows of one job's shards.
struct JobShards {
  // Per shard index of the map: has the job, newest acknowledged epoch.
  std::vector<bool> created;
  std::vector<uint64_t> acked;
  bool dropped = false;  // a finished job's shards dropped it (or need not)
  // Every shard had the job at once at some point in this process's life:
  // from then on a running job that a shard lacks is one it lost, to be
  // resumed. A script job is first installed while RUNNING, before any
  // worker sees its map ([script jobs]), so RUNNING alone does not say "lost".
  bool installed_once = false;
  bool final_exported = false;                      // see [final gauges] in coordinator.cc
  absl::Time ready_since = absl::InfiniteFuture();  // map built, waiting for workers
  // From the shards' GetStats, refreshed every tick while the job runs.
  ShardClocks clocks;
  // The newest clock or sync round any shard reported; a restarted shard's
  // lower answer does not lower it ([claimed clocks] in reconciler.cc).
  uint64_t clock_high = 0;
  uint64_t max_staleness = 0;
  bool stats_fresh = false;                       // answered by every shard this tick
  ClockRate clock_rate{absl::Milliseconds(500)};  // of clocks.min_clock
  // NOTE: [shard progress] A running job's clock, once its shards report
  // progress, is theirs: the slowest shard's applied sync rounds (SYNC) or
  // the slowest member's clock (otherwise), not the members' heartbeats (a
  // joiner reports its join clock before it trains). `progress_since` is
  // when it last moved: a clock that stands still shows as stalled.
  uint64_t min_version = 0;     // rounds applied on every answering shard
  bool progress_known = false;  // some shard reported a clock or version
  uint64_t progress_clock = 0;
  absl::Time progress_since = absl::InfiniteFuture();
  // Per shard index, from its last answer (see [checkpoint failures] in
  // server/shard/job.h).
  std::vector<uint64_t> checkpoint_failures;
  std::vector<std::string> checkpoint_errors;
  // Each compressed chunk's pull precision, from its shard's last answer.
  std::map<uint64_t, PathPrecision> pull_precision;
  std::map<uint64_t, PathPrecision> push_precision;
  // Each table partition's rows, from its shard's last answer.
  std::map<uint64_t, TableRowStats> tables;
  // Each shard's newest pull link decision, by shard index.
  std::map<uint32_t, LinkDecision> pull_links;
};

// One shard RPC, planned under the lock and made outside it.
struct ShardCall {
  enum Kind { kCreate, kUpdate, kDrop, kStats } kind;
  std::string job_id;        // "" for a plain health probe
  uint32_t shard_index = 0;  // within the job's map
  std::string address;
  uint64_t epoch = 0;
  ShardJob create;         // kCreate
  MembershipEpoch update;  // kUpdate
  absl::Status status;     // the answer
  ShardJobStats stats;     // kStats
};

// Makes `calls` in order through `client`, filling in each one's answer; an
// update that failed skips the later epochs to the same shard (Aborted).
// Touches nothing but `calls`: the coordinator calls it without its lock.
void RunShardCalls(ShardClient* client, std::vector<ShardCall>& calls);

using JobTableView = std::map<std::string, JobRecord>;  // the job table, by id

// Not thread-safe: the Coordinator calls it under its mutex.
class ShardFleet {
 public:
  ShardFleet() = default;
  ShardFleet(const ShardFleet&) = delete;
  ShardFleet& operator=(const ShardFleet&) = delete;

  // The shard table of `state`, each shard unhealthy until it answers a
  // probe, and an entry for each of `jobs` (a finished one's shards need not
  // drop it again).
  void Restore(const DurableState& state, const JobTableView& jobs);
  // Adds the shard table to `state`.
  void WriteTo(DurableState& state) const;

  // The shard at `address`, added unless known. `healthy` marks it so, and
  // makes every job of `jobs` mapped onto it be installed again (it may
  // have restarted and lost them). Returns its id (stable per address);
  // InvalidArgument for an address that is not host:port.
  absl::StatusOr<uint32_t> AddShard(const std::string& address, bool healthy, absl::Time now,
                                    const JobTableView& jobs);
  // The healthy shards' addresses, in id order.
  std::vector<std::string> HealthyAddresses() const;
  const std::vector<ShardStatus>& shards() const { return shards_; }

  // Job `id`'s entry, made empty when it has none.
  JobShards& Job(const std::string& id) { return jobs_[id]; }
  // nullptr when job `id` has no entry.
  const JobShards* Find(const std::string& id) const;
  // Job `id` got a map over `shards` shards, none of which has it yet.
  void Placed(const std::string& id, size_t shards);
  // Job `id` was deleted.
  void Forget(const std::string& id) { jobs_.erase(id); }
  // Every shard of job `id`'s map has the job.
  bool Installed(const std::string& id) const;
  // The newest epoch every shard of job `id`'s map acknowledged, once every
  // one of them has the job; nullopt before, or for a job without a map.
  std::optional<uint64_t> Acknowledged(const std::string& id) const;

  // This tick's calls: CreateJob to each shard of a map that lacks the job,
  // every epoch a shard lacks in order, GetStats of every running job (and
  // of every job and shard when `probe`), DropJob of a finished job.
  std::vector<ShardCall> Plan(const JobTableView& jobs, bool probe);
  // Folds the answers to `calls` in: shard health, jobs installed, epochs
  // acknowledged, jobs dropped, and the jobs' clocks and progress.
  void Apply(const std::vector<ShardCall>& calls, const JobTableView& jobs, absl::Time now);

 private:
  std::vector<ShardStatus> shards_;  // index = shard_id - 1
  std::map<std::string, JobShards> jobs_;
};

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_SHARD_FLEET_H_
