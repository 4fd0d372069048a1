// Script jobs (JobSpec.entrypoint, model.type "script"): the job's tensor
// list comes from the user's training script, so the coordinator places the
// job on shards only once the script declared it. Also the placement of any
// job on the healthy shards.
//
// NOTE: [script jobs]
//   * submit: the spec carries the command and no tensors; nothing is placed.
//   * start: the planner assigns workers as for any job (epoch 1, clock 0).
//     The epoch has no shard to acknowledge it, so it is committed at once
//     and the workers learn their rank: every gs_worker starts the script.
//   * declare: the script's init sends its tensors to its gs_worker, which
//     sends them on every heartbeat until its assignment carries a shard map.
//     Rank 0's declaration becomes ModelSpec.tensors; the coordinator builds
//     the shard map from it (as for a built-in model) and installs the job on
//     the shards with the current epoch. Other ranks' declarations are not
//     used: each gs_worker compares its script's tensors with the map it gets
//     and fails the script with a clear error when they differ.
//   * the shard map is revealed to workers only once every shard of the map
//     has the job (AssignmentLocked), so no script connects to a shard that
//     would refuse it as an unknown job.
//   * scripts decide when they are done, and may disagree by a few clocks
//     (a joiner that computed its step count from a larger world): a member
//     that reports DONE while another trains on leaves the job at its clock
//     (ScriptDoneEarlyLocked), so no sync round waits for it, and the
//     desired count drops by one, so nobody replaces it; the job
//     completes when the last members are DONE.
//   * a script that fails (non-zero exit, no init within the deadline) makes
//     its worker report ERROR with the exit code and its last stderr lines;
//     that fails the whole job with that message (a bug in the user's script
//     fails every rank alike: retrying on other workers would not help).
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/coordinator/coordinator.h"

namespace gradstream::coordinator {

bool Coordinator::PlaceJobLocked(const std::string& id) {
  const JobRecord* job = jobs_.Find(id);
  if (job == nullptr) return false;
  if (!job->status.shard_map.shards.empty()) return true;
  if (AwaitsDeclaration(job->status.spec)) return false;
  std::vector<std::string> healthy = fleet_.HealthyAddresses();
  const uint32_t want = job->status.spec.shards;
  if (healthy.empty() || healthy.size() < want) {
    jobs_.SetMessage(id, absl::StrCat("waiting for shards: ", healthy.size(),
                                      " healthy registered, job wants ",
                                      want == 0 ? std::string("at least 1") : absl::StrCat(want)));
    return false;
  }
  if (want > 0) healthy.resize(want);
  absl::StatusOr<ShardMap> map = models_->Place(job->status.spec, healthy);
  if (!map.ok()) {
    (void)FinishLocked(id, JobState::kFailed, absl::StrCat("shard map: ", map.status().message()));
    return false;
  }
  if (!jobs_.SetShardMap(id, *map).ok()) return false;
  fleet_.Placed(id, job->status.shard_map.shards.size());
  return true;
}

void Coordinator::DeclareTensorsLocked(const std::string& job_id, uint64_t worker_id,
                                       const HeartbeatReport& request) {
  const JobRecord* job = jobs_.Find(job_id);
  if (job == nullptr || job->status.state != JobState::kRunning ||
      job->status.spec.model_type != "script" || !job->status.shard_map.shards.empty()) {
    return;
  }
  if (AwaitsDeclaration(job->status.spec)) {
    // Only rank 0 of the newest committed epoch declares.
    const uint64_t committed = job->status.committed_epoch;
    if (request.declared_tensors.empty() || committed == 0 ||
        committed > job->status.epochs.size()) {
      return;
    }
    const MembershipEpoch& epoch = job->status.epochs[committed - 1];
    if (epoch.worker_ids.empty() || epoch.worker_ids[0] != worker_id) return;
    absl::StatusOr<JobSpec> spec = models_->Declare(job->status.spec, request.declared_tensors);
    if (!spec.ok()) {
      (void)FinishLocked(job_id, JobState::kFailed,
                         absl::StrCat("the script of worker ", worker_id,
                                      " (rank 0) declared invalid tensors: ",
                                      spec.status().message()));
      return;
    }
    if (!jobs_.SetSpec(job_id, *spec).ok()) {
      return;  // the next heartbeat declares again
    }
    LOG(INFO) << "coordinator: job " << job_id << ": rank 0 (worker " << worker_id
              << ") declared " << spec->model_tensors << " tensors";
  }
  // Declared but not placed yet (e.g. no healthy shard a moment ago): every
  // heartbeat of a member tries again.
  (void)PlaceJobLocked(job_id);
}

bool Coordinator::ScriptDoneEarlyLocked(const JobRecord& job, uint64_t worker_id,
                                        WorkerState state) const {
  if (state != WorkerState::kDone || job.status.spec.entrypoint.empty()) return false;
  for (const JobMember& m : job.status.members) {
    if (m.worker_id == worker_id || m.leaving) continue;
    const WorkerRecord* w = workers_.Find(m.worker_id);
    if (w != nullptr && w->status.state != WorkerState::kDone) return true;
  }
  return false;
}

}  // namespace gradstream::coordinator
