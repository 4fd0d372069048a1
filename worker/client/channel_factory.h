// Channel creation as an injectable environment (LevelDB's Env shape): the
// client asks the factory for a channel on every connection attempt, so tests
// can redirect addresses or inject unreachable endpoints, and embedders can
// add TLS credentials without touching the client.
#ifndef GRADSTREAM_WORKER_CLIENT_CHANNEL_FACTORY_H_
#define GRADSTREAM_WORKER_CLIENT_CHANNEL_FACTORY_H_

#include <memory>
#include <string>

#include "common/rpc/rpc.h"
#include "grpcpp/channel.h"

namespace gradstream::client {

// Thread-safe: the client calls it from one thread per shard.
class ChannelFactory {
 public:
  virtual ~ChannelFactory() = default;

  // A channel to `address` (host:port). Called once per connection attempt,
  // so a reconnect after a failure starts from a fresh channel.
  virtual std::shared_ptr<grpc::Channel> NewChannel(const std::string& address) = 0;

  // Channels with `config`'s credentials, keepalive and message limits, a
  // private subchannel pool (a restarted shard is dialled at once instead of
  // after gRPC's shared reconnect backoff) and short reconnect backoff.
  static std::unique_ptr<ChannelFactory> ForConfig(const rpc::RpcConfig& config);

  // ForConfig of the default (insecure) config. Never null; not owned.
  static ChannelFactory* Default();
};

// Forwards every call to another factory (LevelDB's EnvWrapper): subclass it
// and override only what a test needs.
class ChannelFactoryWrapper : public ChannelFactory {
 public:
  explicit ChannelFactoryWrapper(ChannelFactory* target) : target_(target) {}
  std::shared_ptr<grpc::Channel> NewChannel(const std::string& address) override {
    return target_->NewChannel(address);
  }

 private:
  ChannelFactory* const target_;
};

}  // namespace gradstream::client

#endif  // GRADSTREAM_WORKER_CLIENT_CHANNEL_FACTORY_H_
