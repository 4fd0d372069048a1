// The default channel factory. See channel_factory.h.
#include "worker/client/channel_factory.h"

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace gradstream::client {
namespace {

class InsecureChannelFactory final : public ChannelFactory {
 public:
  std::shared_ptr<grpc::Channel> NewChannel(const std::string& address) override {
    grpc::ChannelArguments args;
    // A private pool: the process-wide one would hand back a subchannel still
    // in gRPC's own reconnect backoff after a shard restart.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    // Pull answers carry one chunk (<= 1 MiB of fp32) per message.
    args.SetMaxReceiveMessageSize(8 << 20);
    args.SetMaxSendMessageSize(8 << 20);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
};

}  // namespace

ChannelFactory* ChannelFactory::Default() {
  static ChannelFactory* const factory = new InsecureChannelFactory();
  return factory;
}

}  // namespace gradstream::client
