// The default channel factory. See channel_factory.h.
#include "worker/client/channel_factory.h"

#include "grpcpp/support/channel_arguments.h"

namespace gradstream::client {
namespace {

class ConfiguredChannelFactory final : public ChannelFactory {
 public:
  explicit ConfiguredChannelFactory(rpc::RpcConfig config) : config_(std::move(config)) {}

  std::shared_ptr<grpc::Channel> NewChannel(const std::string& address) override {
    grpc::ChannelArguments args;
    // A private pool: the process-wide one would hand back a subchannel still
    // in gRPC's own reconnect backoff after a shard restart.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
    return rpc::NewChannel(address, config_, std::move(args));
  }

 private:
  const rpc::RpcConfig config_;
};

}  // namespace

std::unique_ptr<ChannelFactory> ChannelFactory::ForConfig(const rpc::RpcConfig& config) {
  return std::make_unique<ConfiguredChannelFactory>(config);
}

ChannelFactory* ChannelFactory::Default() {
  static ChannelFactory* const factory = ForConfig(rpc::RpcConfig()).release();
  return factory;
}

}  // namespace gradstream::client
