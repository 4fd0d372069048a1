// Client behaviour that needs no shard: validation before any network call,
// and deadlines against endpoints that refuse or never answer.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "worker/client/ps_client.h"

namespace gradstream::client {
namespace {

// A TCP socket on a loopback port. With listen=true the kernel completes TCP
// handshakes into the backlog but nobody ever speaks HTTP/2: a hung peer.
class Socket {
 public:
  explicit Socket(bool listen) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    if (listen) {
      ::listen(fd_, 16);
    } else {
      ::close(fd_);  // the port is now (almost certainly) closed
      fd_ = -1;
    }
  }
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

ShardMap OneShardMap(const std::string& address, const std::string& codec = "none") {
  auto map = SplitModel({{"w", 1000}}, {address}, 256);
  EXPECT_TRUE(map.ok());
  map->tensors[0].codec = codec;
  return *map;
}

ClientOptions FastOptions() {
  ClientOptions o;
  o.job_id = "job";
  o.worker_id = 1;
  o.rpc_deadline = absl::Milliseconds(300);
  o.connect_deadline = absl::Seconds(1);
  o.reconnect.initial_backoff = absl::Milliseconds(20);
  return o;
}

TEST(PsClientDeadline, RefusedPortFailsWithinTheConnectDeadline) {
  Socket closed(/*listen=*/false);
  const absl::Time start = absl::Now();
  auto client = PsClient::Connect(OneShardMap(closed.address()), FastOptions());
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(client.ok());
  EXPECT_TRUE(client.status().code() == absl::StatusCode::kUnavailable ||
              client.status().code() == absl::StatusCode::kDeadlineExceeded)
      << client.status();
  EXPECT_LT(took, absl::Seconds(3));
}

TEST(PsClientDeadline, HungPeerFailsWithDeadlineExceeded) {
  Socket hung(/*listen=*/true);
  const absl::Time start = absl::Now();
  auto client = PsClient::Connect(OneShardMap(hung.address()), FastOptions());
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kDeadlineExceeded) << client.status();
  EXPECT_GE(took, absl::Milliseconds(900));
  EXPECT_LT(took, absl::Seconds(3));
}

TEST(PsClientDeadline, MalformedMapIsInvalidArgument) {
  ShardMap map = OneShardMap("127.0.0.1:1");
  map.chunks[1].offset += 1;
  EXPECT_EQ(PsClient::Connect(map, FastOptions()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PsClientDeadline, UnknownCodecIsNotFoundBeforeDialling) {
  EXPECT_EQ(
      PsClient::Connect(OneShardMap("127.0.0.1:1", "sevenbit"), FastOptions()).status().code(),
      absl::StatusCode::kNotFound);
}

TEST(PsClientDeadline, EmptyJobIsInvalidArgument) {
  ClientOptions o = FastOptions();
  o.job_id.clear();
  EXPECT_EQ(PsClient::Connect(OneShardMap("127.0.0.1:1"), o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A default handle is one for nothing: done, OK, never waited on.
TEST(PsClientDeadline, DefaultHandlesAreDone) {
  EXPECT_FALSE(PushHandle().valid());
  EXPECT_FALSE(PullHandle().valid());
  EXPECT_TRUE(PsClient::Wait(PushHandle(), absl::ZeroDuration()).ok());
  EXPECT_TRUE(PsClient::Wait(PullHandle(), absl::ZeroDuration()).ok());
  const uint32_t tensor = 0;
  EXPECT_TRUE(PsClient::WaitTensors(PullHandle(), {&tensor, 1}, absl::ZeroDuration()).ok());
  EXPECT_TRUE(PsClient::Progress(PullHandle()).settled);
  EXPECT_EQ(PsClient::Progress(PullHandle()).chunks_done, 0u);
}

}  // namespace
}  // namespace gradstream::client
