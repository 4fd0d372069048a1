// gRPC implementation of ShardClient; see shard_client.h.
#include "server/coordinator/rpc/shard_client.h"

#include <chrono>
#include <map>

#include "absl/synchronization/mutex.h"
#include "common/grpc_util.h"
#include "grpcpp/grpcpp.h"
#include "ps.grpc.pb.h"
#include "server/coordinator/rpc/shard_convert.h"

namespace gradstream::coordinator {

namespace {

namespace v1 = gradstream::v1;

class GrpcShardClient final : public ShardClient {
 public:
  GrpcShardClient(absl::Duration deadline, rpc::RpcConfig config)
      : deadline_(deadline), config_(std::move(config)) {}

  absl::StatusOr<ShardJobCreated> CreateJob(const std::string& address,
                                            const ShardJob& job) override {
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    v1::CreateJobResponse response;
    grpc::Status s = Stub(address)->CreateJob(&ctx, CreateJobToProto(job), &response);
    if (!s.ok()) return FromGrpcStatus(s);
    return CreatedFromProto(response);
  }

  absl::Status UpdateMembership(const std::string& address, const std::string& job_id,
                                const MembershipEpoch& epoch) override {
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    v1::MembershipAck ack;
    return FromGrpcStatus(
        Stub(address)->UpdateMembership(&ctx, UpdateToProto(job_id, epoch), &ack));
  }

  absl::Status DropJob(const std::string& address, const std::string& job_id) override {
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    v1::DropJobRequest request;
    request.set_job_id(job_id);
    v1::DropJobResponse response;
    return FromGrpcStatus(Stub(address)->DropJob(&ctx, request, &response));
  }

  absl::StatusOr<ShardJobStats> GetStats(const std::string& address,
                                         const std::string& job_id) override {
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    v1::StatsRequest request;
    request.set_job_id(job_id);
    v1::StatsResponse response;
    grpc::Status s = Stub(address)->GetStats(&ctx, request, &response);
    if (!s.ok()) return FromGrpcStatus(s);
    return StatsFromProto(response);
  }

 private:
  void SetDeadline(grpc::ClientContext& ctx) const {
    ctx.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline_));
    rpc::AttachToken(&ctx, config_.auth_token);
  }

  v1::ParameterServer::Stub* Stub(const std::string& address) {
    absl::MutexLock lock(&mu_);
    auto& stub = stubs_[address];
    if (!stub) {
      stub = v1::ParameterServer::NewStub(rpc::NewChannel(address, config_));
    }
    return stub.get();
  }

  const absl::Duration deadline_;
  const rpc::RpcConfig config_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<v1::ParameterServer::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<ShardClient> NewGrpcShardClient(absl::Duration deadline,
                                                const rpc::RpcConfig& config) {
  return std::make_unique<GrpcShardClient>(deadline, config);
}

}  // namespace gradstream::coordinator
