// See coordinator_api.h.
#include "server/coordinator/rpc/coordinator_api.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job/job_spec.h"
#include "common/job/shard_map_proto.h"
#include "common/rpc/rpc.h"
#include "common/status.h"
#include "server/coordinator/rpc/coordinator_convert.h"

namespace gradstream::coordinator {

namespace v1 = gradstream::v1;

namespace {

class SpecModels final : public JobModels {
 public:
  absl::StatusOr<ShardMap> Place(const JobSpec& spec,
                                 const std::vector<std::string>& shards) const override {
    return BuildShardMap(JobSpecToProto(spec), shards);
  }

  absl::StatusOr<JobSpec> Declare(const JobSpec& spec,
                                  const std::vector<DeclaredTensor>& tensors) const override {
    v1::JobSpec proto = JobSpecToProto(spec);
    v1::ModelSpec* model = proto.mutable_model();
    model->clear_tensors();
    for (const DeclaredTensor& t : tensors) *model->add_tensors() = DeclaredTensorToProto(t);
    GS_RETURN_IF_ERROR(DeclaredTensors(*model).status());
    return JobSpecFromProto(proto);
  }
};

}  // namespace

const JobModels& SpecJobModels() {
  static const SpecModels* const models = new SpecModels();
  return *models;
}

absl::StatusOr<std::unique_ptr<Coordinator>> OpenCoordinator(CoordinatorOptions options,
                                                             ShardClient* shards,
                                                             const std::string& state_file,
                                                             StateStoreOptions store) {
  std::unique_ptr<StateStorage> storage;
  if (!state_file.empty()) {
    GS_ASSIGN_OR_RETURN(storage, OpenStateStorage(state_file, std::move(store)));
  }
  return Coordinator::Open(std::move(options), shards, &SpecJobModels(), std::move(storage));
}

absl::StatusOr<v1::RegisterShardResponse> CoordinatorApi::RegisterShard(
    const v1::RegisterShardRequest& request) {
  GS_ASSIGN_OR_RETURN(uint32_t id, core_->RegisterShard(request.address()));
  v1::RegisterShardResponse response;
  response.set_shard_id(id);
  return response;
}

absl::StatusOr<v1::RegisterWorkerResponse> CoordinatorApi::RegisterWorker(
    const v1::RegisterWorkerRequest& request) {
  GS_ASSIGN_OR_RETURN(RegisteredWorker registered,
                      core_->RegisterWorker(RegistrationFromProto(request)));
  return RegisteredToProto(registered);
}

absl::StatusOr<v1::HeartbeatResponse> CoordinatorApi::Heartbeat(
    const v1::HeartbeatRequest& request) {
  GS_ASSIGN_OR_RETURN(Assignment assignment, core_->Heartbeat(HeartbeatFromProto(request)));
  v1::HeartbeatResponse response;
  *response.mutable_assignment() = AssignmentToProto(assignment);
  return response;
}

absl::StatusOr<v1::SubmitJobResponse> CoordinatorApi::SubmitJob(
    const v1::SubmitJobRequest& request) {
  GS_ASSIGN_OR_RETURN(v1::JobSpec spec, NormalizeJobSpec(request.spec()));
  JobSpec plain = JobSpecFromProto(spec);
  // Dry-run the split so chunking errors surface now, not when shards exist.
  if (!AwaitsDeclaration(plain)) GS_RETURN_IF_ERROR(BuildShardMap(spec, {"dry-run:0"}).status());
  GS_ASSIGN_OR_RETURN(std::string id, core_->SubmitJob(plain, rpc::NewToken()));
  v1::SubmitJobResponse response;
  response.set_job_id(id);
  *response.mutable_spec() = std::move(spec);
  return response;
}

absl::StatusOr<v1::JobStatus> CoordinatorApi::GetJob(const v1::GetJobRequest& request) {
  GS_ASSIGN_OR_RETURN(JobStatus job, core_->GetJob(request.job_id(), request.include_shard_map()));
  return JobStatusToProto(job);
}

absl::StatusOr<v1::ListJobsResponse> CoordinatorApi::ListJobs(const v1::ListJobsRequest& request) {
  std::string next;
  GS_ASSIGN_OR_RETURN(std::vector<JobStatus> jobs,
                      core_->ListJobs(request.page_size(), request.page_token(), &next));
  v1::ListJobsResponse response;
  for (const JobStatus& job : jobs) *response.add_jobs() = JobStatusToProto(job);
  response.set_next_page_token(next);
  return response;
}

absl::StatusOr<v1::ScaleJobResponse> CoordinatorApi::ScaleJob(const v1::ScaleJobRequest& request) {
  if (request.workers() == 0) {
    return absl::InvalidArgumentError(
        "workers: must be >= 1 (use `gradstream cancel` to stop a job)");
  }
  if (request.workers() > kMaxJobWorkers) {
    return absl::InvalidArgumentError(
        absl::StrCat("workers: ", request.workers(), " too many (max ", kMaxJobWorkers, ")"));
  }
  if (request.workers_min() > request.workers()) {
    return absl::InvalidArgumentError(absl::StrCat("workers_min: ", request.workers_min(),
                                                   " is above workers ", request.workers(),
                                                   " (a range MIN:MAX wants 1 <= MIN <= MAX)"));
  }
  GS_ASSIGN_OR_RETURN(JobStatus job,
                      core_->ScaleJob(request.job_id(), request.workers(), request.workers_min()));
  v1::ScaleJobResponse response;
  *response.mutable_job() = JobStatusToProto(job);
  return response;
}

absl::StatusOr<v1::CancelJobResponse> CoordinatorApi::CancelJob(
    const v1::CancelJobRequest& request) {
  GS_ASSIGN_OR_RETURN(JobStatus job, core_->CancelJob(request.job_id()));
  v1::CancelJobResponse response;
  *response.mutable_job() = JobStatusToProto(job);
  return response;
}

v1::ClusterStatus CoordinatorApi::GetCluster() { return ClusterToProto(core_->GetCluster()); }

}  // namespace gradstream::coordinator
