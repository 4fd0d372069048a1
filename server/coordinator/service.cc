// gRPC adapter over Coordinator; see service.h.
#include "server/coordinator/service.h"

#include "common/grpc_util.h"

namespace gradstream::coordinator {

namespace {

namespace v1 = gradstream::v1;

class CoordinatorService final : public v1::Coordinator::Service {
 public:
  CoordinatorService(Coordinator* c, metrics::Registry* m) : c_(c), metrics_(m) {}

  grpc::Status RegisterShard(grpc::ServerContext*, const v1::RegisterShardRequest* req,
                             v1::RegisterShardResponse* resp) override {
    return Reply("RegisterShard", c_->RegisterShard(*req), resp);
  }
  grpc::Status RegisterWorker(grpc::ServerContext*, const v1::RegisterWorkerRequest* req,
                              v1::RegisterWorkerResponse* resp) override {
    return Reply("RegisterWorker", c_->RegisterWorker(*req), resp);
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    return Reply("Heartbeat", c_->Heartbeat(*req), resp);
  }
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override {
    return Reply("SubmitJob", c_->SubmitJob(*req), resp);
  }
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* req,
                      v1::JobStatus* resp) override {
    return Reply("GetJob", c_->GetJob(*req), resp);
  }
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                        v1::ListJobsResponse* resp) override {
    return Reply("ListJobs", absl::StatusOr<v1::ListJobsResponse>(c_->ListJobs()), resp);
  }
  grpc::Status ScaleJob(grpc::ServerContext*, const v1::ScaleJobRequest* req,
                        v1::ScaleJobResponse* resp) override {
    return Reply("ScaleJob", c_->ScaleJob(*req), resp);
  }
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* req,
                         v1::CancelJobResponse* resp) override {
    return Reply("CancelJob", c_->CancelJob(*req), resp);
  }
  grpc::Status GetCluster(grpc::ServerContext*, const v1::GetClusterRequest*,
                          v1::ClusterStatus* resp) override {
    return Reply("GetCluster", absl::StatusOr<v1::ClusterStatus>(c_->GetCluster()), resp);
  }

 private:
  template <typename T>
  grpc::Status Reply(const char* method, absl::StatusOr<T> result, T* out) {
    const absl::Status status = result.status();
    metrics_
        ->GetCounter("gs_coordinator_rpcs_total", "Coordinator RPCs by method and status.",
                     {{"method", method}, {"code", absl::StatusCodeToString(status.code())}})
        ->Increment();
    if (!status.ok()) return ToGrpcStatus(status);
    *out = *std::move(result);
    return grpc::Status::OK;
  }

  Coordinator* const c_;
  metrics::Registry* const metrics_;
};

}  // namespace

std::unique_ptr<v1::Coordinator::Service> NewCoordinatorService(Coordinator* coordinator,
                                                                metrics::Registry* metrics) {
  return std::make_unique<CoordinatorService>(coordinator, metrics);
}

}  // namespace gradstream::coordinator
