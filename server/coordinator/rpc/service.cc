// gRPC adapter over CoordinatorApi; see service.h.
#include "server/coordinator/rpc/service.h"

#include "common/grpc_util.h"
#include "common/rpc/rpc.h"

namespace gradstream::coordinator {

namespace {

namespace v1 = gradstream::v1;

class CoordinatorService final : public v1::Coordinator::Service {
 public:
  CoordinatorService(CoordinatorApi* c, metrics::Registry* m, std::string auth_token)
      : c_(c), metrics_(m), auth_token_(std::move(auth_token)) {}

  grpc::Status RegisterShard(grpc::ServerContext* ctx, const v1::RegisterShardRequest* req,
                             v1::RegisterShardResponse* resp) override {
    return Call("RegisterShard", ctx, resp, [&] { return c_->RegisterShard(*req); });
  }
  grpc::Status RegisterWorker(grpc::ServerContext* ctx, const v1::RegisterWorkerRequest* req,
                              v1::RegisterWorkerResponse* resp) override {
    return Call("RegisterWorker", ctx, resp, [&] { return c_->RegisterWorker(*req); });
  }
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    return Call("Heartbeat", ctx, resp, [&] { return c_->Heartbeat(*req); });
  }
  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override {
    return Call("SubmitJob", ctx, resp, [&] { return c_->SubmitJob(*req); });
  }
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                      v1::JobStatus* resp) override {
    return Call("GetJob", ctx, resp, [&] { return c_->GetJob(*req); });
  }
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override {
    return Call("ListJobs", ctx, resp, [&] { return c_->ListJobs(*req); });
  }
  grpc::Status ScaleJob(grpc::ServerContext* ctx, const v1::ScaleJobRequest* req,
                        v1::ScaleJobResponse* resp) override {
    return Call("ScaleJob", ctx, resp, [&] { return c_->ScaleJob(*req); });
  }
  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                         v1::CancelJobResponse* resp) override {
    return Call("CancelJob", ctx, resp, [&] { return c_->CancelJob(*req); });
  }
  grpc::Status GetCluster(grpc::ServerContext* ctx, const v1::GetClusterRequest*,
                          v1::ClusterStatus* resp) override {
    return Call("GetCluster", ctx, resp,
                [&] { return absl::StatusOr<v1::ClusterStatus>(c_->GetCluster()); });
  }

 private:
  // Checks the cluster token ([auth tokens] in common/rpc/rpc.h), runs `fn`,
  // counts the call by method and status code.
  template <typename T, typename Fn>
  grpc::Status Call(const char* method, grpc::ServerContext* ctx, T* out, Fn fn) {
    absl::Status auth = rpc::CheckToken(auth_token_, rpc::PresentedToken(*ctx), "the coordinator");
    absl::StatusOr<T> result = auth.ok() ? fn() : absl::StatusOr<T>(auth);
    const absl::Status status = result.status();
    metrics_.RpcDone(method, status.code());
    if (!status.ok()) return ToGrpcStatus(status);
    *out = *std::move(result);
    return grpc::Status::OK;
  }

  CoordinatorApi* const c_;
  CoordinatorMetrics metrics_;
  const std::string auth_token_;
};

}  // namespace

std::unique_ptr<v1::Coordinator::Service> NewCoordinatorService(CoordinatorApi* api,
                                                                metrics::Registry* metrics,
                                                                const std::string& auth_token) {
  return std::make_unique<CoordinatorService>(api, metrics, auth_token);
}

}  // namespace gradstream::coordinator
