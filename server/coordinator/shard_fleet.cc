// The shard fleet; see shard_fleet.h.
#include "server/coordinator/shard_fleet.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace gradstream::coordinator {

namespace {

bool Unreachable(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
}

}  // namespace

void ShardFleet::Restore(const DurableState& state, const JobTableView& jobs) {
  for (const ShardStatus& s : state.shards) {
    shards_.push_back(s);
    shards_.back().healthy = false;  // until it answers a probe
  }
  for (const auto& [id, job] : jobs) {
    JobShards& js = jobs_[id];
    const size_t n = job.status.shard_map.shards.size();
    js.created.assign(n, false);
    js.acked.assign(n, 0);
    js.dropped = IsTerminal(job.status.state);
  }
}

void ShardFleet::WriteTo(DurableState& state) const {
  state.shards.insert(state.shards.end(), shards_.begin(), shards_.end());
}

absl::StatusOr<uint32_t> ShardFleet::AddShard(const std::string& address, bool healthy,
                                              absl::Time now, const JobTableView& jobs) {
  if (address.empty() || address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("address: want host:port, got '", address, "'"));
  }
  ShardStatus* shard = nullptr;
  for (ShardStatus& s : shards_) {
    if (s.address == address) shard = &s;
  }
  if (shard == nullptr) {
    shard = &shards_.emplace_back();
    shard->shard_id = static_cast<uint32_t>(shards_.size());
    shard->address = address;
    LOG(INFO) << "coordinator: shard " << shards_.size() << " at " << address;
  }
  if (healthy) {
    shard->healthy = true;
    shard->last_seen_unix_ms = absl::ToUnixMillis(now);
    shard->message.clear();
    // A shard registering again may have restarted and lost its jobs:
    // install them again (it answers AlreadyExists if it still has them).
    for (const auto& [id, job] : jobs) {
      JobShards& js = jobs_[id];
      const std::vector<std::string>& map = job.status.shard_map.shards;
      for (size_t i = 0; i < map.size(); ++i) {
        if (map[i] == address) js.created[i] = false;
      }
    }
  }
  return shard->shard_id;
}

std::vector<std::string> ShardFleet::HealthyAddresses() const {
  std::vector<std::string> healthy;
  for (const ShardStatus& s : shards_) {
    if (s.healthy) healthy.push_back(s.address);
  }
  return healthy;
}

const JobShards* ShardFleet::Find(const std::string& id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

void ShardFleet::Placed(const std::string& id, size_t shards) {
  JobShards& js = jobs_[id];
  js.created.assign(shards, false);
  js.acked.assign(shards, 0);
}

bool ShardFleet::Installed(const std::string& id) const {
  const JobShards* js = Find(id);
  if (js == nullptr || js->created.empty()) return false;
  return std::all_of(js->created.begin(), js->created.end(), [](bool c) { return c; });
}

std::optional<uint64_t> ShardFleet::Acknowledged(const std::string& id) const {
  if (!Installed(id)) return std::nullopt;
  const JobShards& js = *Find(id);
  return *std::min_element(js.acked.begin(), js.acked.end());
}

std::vector<ShardCall> ShardFleet::Plan(const JobTableView& jobs, bool probe) {
  std::vector<ShardCall> calls;
  for (const auto& [id, job] : jobs) {
    const ShardMap& map = job.status.shard_map;
    const JobShards& js = jobs_[id];
    // A call about this job to the shard at index `i` of its map.
    const std::string& job_id = id;  // a structured binding cannot be captured in C++17
    auto call_to = [&](ShardCall::Kind kind, size_t i) {
      ShardCall call{kind};
      call.job_id = job_id;
      call.shard_index = static_cast<uint32_t>(i);
      call.address = map.shards[i];
      return call;
    };
    if (IsTerminal(job.status.state)) {
      if (js.dropped) continue;
      for (size_t i = 0; i < map.shards.size(); ++i) {
        calls.push_back(call_to(ShardCall::kDrop, i));
      }
      continue;
    }
    // A job is installed on its shards as soon as it has a map, with the
    // empty epoch 0 until workers are assigned.
    const std::vector<MembershipEpoch>& epochs = job.status.epochs;
    const uint64_t latest = epochs.size();
    for (size_t i = 0; i < map.shards.size(); ++i) {
      if (!js.created[i]) {
        ShardCall call = call_to(ShardCall::kCreate, i);
        call.epoch = latest;
        ShardJob& req = call.create;
        req.job_id = id;
        req.shard_index = static_cast<uint32_t>(i);
        req.spec = job.status.spec;
        for (const ChunkInfo& chunk : map.chunks) {
          if (chunk.shard == i) req.chunks.push_back(chunk);
        }
        if (latest > 0) {
          req.membership.epoch = epochs.back().epoch;
          req.membership.effective_clock = epochs.back().effective_clock;
          req.membership.worker_ids = epochs.back().worker_ids;
        }
        req.job_token = job.token;
        // A running job lost by a shard: its epochs replace a restored
        // checkpoint's, and without one the shard takes a live worker's
        // parameters from the slowest clock seen, below which no member
        // pushes any more (see [re-initialization] in server/shard/job.h).
        req.epochs = epochs;
        if (job.status.state == JobState::kRunning &&
            (job.status.spec.entrypoint.empty() || js.installed_once)) {
          req.resume = true;
          req.resume_clock = js.clocks.min_clock;
        }
        calls.push_back(std::move(call));
        continue;
      }
      // Every epoch the shard lacks, in order, so each change takes effect
      // at its own clock.
      for (uint64_t e = js.acked[i] + 1; e <= latest; ++e) {
        ShardCall call = call_to(ShardCall::kUpdate, i);
        call.epoch = e;
        call.update = epochs[e - 1];
        calls.push_back(std::move(call));
      }
      if (probe || job.status.state == JobState::kRunning) {
        calls.push_back(call_to(ShardCall::kStats, i));
      }
    }
  }
  if (probe) {
    for (const ShardStatus& s : shards_) {
      ShardCall call{ShardCall::kStats};
      call.address = s.address;
      calls.push_back(std::move(call));
    }
  }
  return calls;
}

void RunShardCalls(ShardClient* client, std::vector<ShardCall>& calls) {
  // A failed update must not be followed by later epochs to the same shard.
  std::string failed_key;
  for (ShardCall& call : calls) {
    const std::string key = absl::StrCat(call.job_id, "/", call.address);
    if (call.kind == ShardCall::kUpdate && key == failed_key) {
      call.status = absl::AbortedError("skipped after an earlier failure");
      continue;
    }
    switch (call.kind) {
      case ShardCall::kCreate: {
        absl::StatusOr<ShardJobCreated> r = client->CreateJob(call.address, call.create);
        call.status = r.status();
        if (r.ok() && r->restored) {
          LOG(INFO) << "coordinator: shard " << call.address << " restored job " << call.job_id
                    << " at clock " << r->restored_clock;
        }
        break;
      }
      case ShardCall::kUpdate:
        call.status = client->UpdateMembership(call.address, call.job_id, call.update);
        break;
      case ShardCall::kDrop:
        call.status = client->DropJob(call.address, call.job_id);
        break;
      case ShardCall::kStats: {
        absl::StatusOr<ShardJobStats> r = client->GetStats(call.address, call.job_id);
        call.status = r.status();
        if (r.ok()) call.stats = *std::move(r);
        break;
      }
    }
    if (!call.status.ok() && call.kind == ShardCall::kUpdate) failed_key = key;
    if (!call.status.ok() && !(call.kind == ShardCall::kStats && call.job_id.empty())) {
      VLOG(1) << "coordinator: shard " << call.address << " job " << call.job_id << ": "
              << call.status;
    }
  }
}

void ShardFleet::Apply(const std::vector<ShardCall>& calls, const JobTableView& jobs,
                       absl::Time now) {
  struct JobStats {
    uint64_t min_clock = UINT64_MAX, max_version = 0, max_clock = 0, max_staleness = 0;
    uint64_t min_version = UINT64_MAX;
    size_t answers = 0;
  };
  std::map<std::string, JobStats> job_stats;
  std::map<std::string, bool> drop_ok;
  for (const ShardCall& call : calls) {
    if (absl::IsAborted(call.status)) continue;
    for (ShardStatus& s : shards_) {
      if (s.address != call.address) continue;
      if (Unreachable(call.status)) {
        if (s.healthy) {
          LOG(WARNING) << "coordinator: shard " << call.address << " unreachable: " << call.status;
        }
        s.healthy = false;
        s.message = std::string(call.status.message());
      } else {
        s.healthy = true;
        s.last_seen_unix_ms = absl::ToUnixMillis(now);
        s.message.clear();
      }
    }
    if (call.job_id.empty()) continue;
    auto js = jobs_.find(call.job_id);
    if (js == jobs_.end() || call.shard_index >= js->second.created.size()) continue;
    std::vector<bool>& created = js->second.created;
    std::vector<uint64_t>& acked = js->second.acked;
    const uint32_t i = call.shard_index;
    switch (call.kind) {
      case ShardCall::kCreate:
        if (call.status.ok()) {
          created[i] = true;
          acked[i] = std::max(acked[i], call.epoch);
        } else if (absl::IsAlreadyExists(call.status)) {
          // The shard kept the job (the coordinator restarted): replay every
          // epoch; the shard ignores the ones it has.
          created[i] = true;
          acked[i] = 0;
        } else if (!Unreachable(call.status)) {
          LOG(WARNING) << "coordinator: CreateJob " << call.job_id << " on " << call.address << ": "
                       << call.status;
        }
        if (std::all_of(created.begin(), created.end(), [](bool c) { return c; })) {
          js->second.installed_once = true;
        }
        break;
      case ShardCall::kUpdate:
        if (call.status.ok() || absl::IsAlreadyExists(call.status) ||
            absl::IsFailedPrecondition(call.status)) {
          if (!call.status.ok()) {
            LOG(WARNING) << "coordinator: UpdateMembership epoch " << call.epoch << " of "
                         << call.job_id << " on " << call.address << ": " << call.status
                         << " (treated as acknowledged)";
          }
          acked[i] = std::max(acked[i], call.epoch);
        } else if (absl::IsNotFound(call.status)) {
          created[i] = false;
        }
        break;
      case ShardCall::kDrop: {
        auto [it, inserted] = drop_ok.try_emplace(call.job_id, true);
        it->second = it->second && (call.status.ok() || absl::IsNotFound(call.status));
        break;
      }
      case ShardCall::kStats:
        if (call.status.ok()) {
          JobStats& stats = job_stats[call.job_id];
          stats.min_clock = std::min(stats.min_clock, call.stats.min_clock);
          stats.max_version = std::max(stats.max_version, call.stats.max_version);
          stats.max_clock = std::max(stats.max_clock, call.stats.max_clock);
          stats.min_version = std::min(stats.min_version, call.stats.min_version);
          js->second.checkpoint_failures.resize(created.size());
          js->second.checkpoint_errors.resize(created.size());
          js->second.checkpoint_failures[i] = call.stats.checkpoint_failures;
          js->second.checkpoint_errors[i] = call.stats.checkpoint_error;
          stats.max_staleness = std::max(stats.max_staleness, call.stats.max_staleness);
          for (const auto& [chunk, p] : call.stats.pull_precision) {
            js->second.pull_precision[chunk] = p;
          }
          for (const auto& [chunk, p] : call.stats.push_precision) {
            js->second.push_precision[chunk] = p;
          }
          for (const auto& [chunk, t] : call.stats.tables) js->second.tables[chunk] = t;
          if (call.stats.pull_link) js->second.pull_links[i] = *call.stats.pull_link;
          ++stats.answers;
        } else if (absl::IsNotFound(call.status)) {
          created[i] = false;  // the shard lost the job (restart)
        }
        break;
    }
  }
  for (const auto& [id, ok] : drop_ok) {
    if (auto js = jobs_.find(id); js != jobs_.end() && ok) js->second.dropped = true;
  }
  for (auto& [id, js] : jobs_) js.stats_fresh = false;
  for (const auto& [id, stats] : job_stats) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    JobShards& js = it->second;
    js.clocks.min_clock = stats.min_clock == UINT64_MAX ? 0 : stats.min_clock;
    js.clocks.max_version = stats.max_version;
    js.clocks.max_clock = stats.max_clock;
    js.clock_high = std::max({js.clock_high, js.clocks.min_clock, js.clocks.max_version,
                              js.clocks.max_clock});
    js.min_version = stats.min_version == UINT64_MAX ? 0 : stats.min_version;
    // See [shard progress].
    auto job = jobs.find(id);
    const bool sync =
        job == jobs.end() || job->second.status.spec.consistency == ConsistencyMode::kSync;
    const uint64_t clock = sync ? js.min_version : js.clocks.min_clock;
    js.progress_known = js.progress_known || stats.max_version > 0 || stats.max_clock > 0;
    if (clock != js.progress_clock || js.progress_since == absl::InfiniteFuture()) {
      js.progress_clock = clock;
      js.progress_since = now;
    }
    js.max_staleness = std::max(js.max_staleness, stats.max_staleness);
    js.stats_fresh = stats.answers == js.created.size();
    js.clock_rate.Observe(now, js.clocks.min_clock);
  }
}

}  // namespace gradstream::coordinator
