#include "tests/shard/shard_testing.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

#ifndef GS_SHARD_BINARY
#error "GS_SHARD_BINARY must name the gs_shard executable"
#endif

extern char** environ;

namespace gradstream::testing {

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "gs_shard_test.XXXXXX").string();
  char* p = ::mkdtemp(tmpl.data());
  path_ = p != nullptr ? std::string(p) : std::string();
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

namespace {

std::optional<int> ReadPort(const std::string& path) {
  std::ifstream in(path);
  int port = 0;
  if (in >> port && port > 0) return port;
  return std::nullopt;
}

}  // namespace

FileWaiter::FileWaiter(std::string path) : path_(std::move(path)) {
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  fd_ = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd_ >= 0) ::inotify_add_watch(fd_, dir.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE);
}

FileWaiter::~FileWaiter() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status FileWaiter::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    if (std::filesystem::exists(path_)) return absl::OkStatus();
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration() || fd_ < 0) {
      return absl::DeadlineExceededError("file did not appear: " + path_);
    }
    pollfd pfd{fd_, POLLIN, 0};
    ::poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(left) + 1));
    char buf[4096];
    while (::read(fd_, buf, sizeof(buf)) > 0) {
    }
  }
}

absl::StatusOr<std::unique_ptr<ShardProcess>> ShardProcess::Start(
    const std::vector<std::string>& flags, absl::Duration timeout) {
  std::unique_ptr<ShardProcess> proc(new ShardProcess());
  std::string tmpl = (std::filesystem::temp_directory_path() / "gs_shard_port.XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) return absl::InternalError("mkdtemp");
  proc->dir_ = tmpl;
  const std::string port_file = proc->dir_ + "/port";

  const int ino = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (ino < 0) return absl::InternalError("inotify_init1");
  ::inotify_add_watch(ino, proc->dir_.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE);

  std::vector<std::string> args = {GS_SHARD_BINARY, "--port=0", "--port_file=" + port_file,
                                   "--address=127.0.0.1"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (int rc = ::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ); rc != 0) {
    ::close(ino);
    return absl::InternalError(absl::StrCat("posix_spawn ", argv[0], ": ", std::strerror(rc)));
  }
  proc->pid_ = pid;

  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    if (auto port = ReadPort(port_file)) {
      proc->port_ = *port;
      break;
    }
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      proc->pid_ = -1;
      ::close(ino);
      return absl::InternalError(
          absl::StrCat("gs_shard exited before listening (status ", status, ")"));
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      ::close(ino);
      return absl::DeadlineExceededError("gs_shard did not write its port file in time");
    }
    // Wake on the rename into the directory; the slice bounds how late we
    // notice a child that died without writing.
    pollfd pfd{ino, POLLIN, 0};
    ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 100)));
    char buf[4096];
    while (::read(ino, buf, sizeof(buf)) > 0) {
    }
  }
  ::close(ino);
  return proc;
}

ShardProcess::~ShardProcess() {
  Kill(SIGKILL);
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

int ShardProcess::Kill(int sig) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, sig);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

std::shared_ptr<grpc::Channel> ShardProcess::Connect(absl::Duration timeout) const {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  auto channel = grpc::CreateCustomChannel(address(), grpc::InsecureChannelCredentials(), args);
  channel->WaitForConnected(absl::ToChronoTime(absl::Now() + timeout));
  return channel;
}

std::unique_ptr<pb::ParameterServer::Stub> ShardProcess::Stub() const {
  return pb::ParameterServer::NewStub(Connect());
}

SessionClient::SessionClient(std::shared_ptr<grpc::Channel> channel, absl::Duration deadline,
                             const std::string& token)
    : stub_(pb::ParameterServer::NewStub(channel)) {
  ctx_.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  if (!token.empty()) ctx_.AddMetadata("authorization", "Bearer " + token);
  stream_ = stub_->Session(&ctx_);
  reader_ = std::thread([this] {
    pb::ServerMessage msg;
    while (stream_->Read(&msg)) {
      absl::MutexLock l(&mu_);
      queue_.push_back(std::move(msg));
      msg.Clear();
      cv_.SignalAll();
    }
    absl::MutexLock l(&mu_);
    closed_ = true;
    cv_.SignalAll();
  });
}

SessionClient::~SessionClient() {
  ctx_.TryCancel();
  if (reader_.joinable()) reader_.join();
  if (!finished_) stream_->Finish();
}

bool SessionClient::Write(const pb::WorkerMessage& msg) { return stream_->Write(msg); }

template <typename Pred>
std::optional<pb::ServerMessage> SessionClient::Await(Pred pred, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock l(&mu_);
  for (;;) {
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (pred(*it)) {
        std::optional<pb::ServerMessage> found = std::move(*it);
        queue_.erase(it);
        return found;
      }
    }
    if (closed_ || absl::Now() >= deadline) return std::nullopt;
    cv_.WaitWithDeadline(&mu_, deadline);
  }
}

std::optional<pb::ServerMessage> SessionClient::Next(absl::Duration timeout) {
  return Await([](const pb::ServerMessage&) { return true; }, timeout);
}

grpc::Status SessionClient::Finish() {
  stream_->WritesDone();
  return WaitClosed();
}

grpc::Status SessionClient::WaitClosed(absl::Duration timeout) {
  {
    absl::MutexLock l(&mu_);
    const absl::Time deadline = absl::Now() + timeout;
    while (!closed_) {
      if (cv_.WaitWithDeadline(&mu_, deadline) && !closed_) {
        return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "stream did not close");
      }
    }
  }
  if (!finished_) {
    reader_.join();
    final_status_ = stream_->Finish();
    finished_ = true;
  }
  return final_status_;
}

absl::StatusOr<pb::HelloAck> SessionClient::Hello(const std::string& job, uint64_t worker,
                                                  uint64_t incarnation, uint64_t epoch,
                                                  pb::SessionProtocol protocol) {
  pb::WorkerMessage m;
  m.mutable_hello()->set_job_id(job);
  m.mutable_hello()->set_worker_id(worker);
  m.mutable_hello()->set_incarnation(incarnation);
  m.mutable_hello()->set_epoch(epoch);
  m.mutable_hello()->set_protocol(protocol);
  if (!Write(m)) return absl::UnavailableError("write failed");
  auto r = Await([](const pb::ServerMessage& s) { return s.has_hello_ack() || s.has_error(); },
                 absl::Seconds(20));
  if (!r) return absl::DeadlineExceededError("no HelloAck");
  if (r->has_error()) {
    return absl::Status(static_cast<absl::StatusCode>(r->error().code()), r->error().message());
  }
  return r->hello_ack();
}

absl::StatusOr<pb::Ack> SessionClient::Push(uint64_t seq, uint64_t chunk, uint64_t clock,
                                            const pb::EncodedChunk& encoded) {
  pb::Push push;
  push.set_clock(clock);
  pb::PushedChunk* c = push.add_chunks();
  c->set_chunk_id(chunk);
  *c->mutable_chunk() = encoded;
  return PushMessage(seq, std::move(push));
}

absl::StatusOr<pb::Ack> SessionClient::PushMessage(uint64_t seq, pb::Push push) {
  pb::WorkerMessage m;
  *m.mutable_push() = std::move(push);
  m.mutable_push()->set_seq(seq);
  if (!Write(m)) return absl::UnavailableError("write failed");
  return AwaitAck(seq);
}

absl::StatusOr<pb::Ack> SessionClient::AwaitAck(uint64_t seq, absl::Duration timeout) {
  auto r = Await(
      [seq](const pb::ServerMessage& s) {
        return (s.has_ack() && s.ack().seq() == seq) || s.has_error();
      },
      timeout);
  if (!r) return absl::DeadlineExceededError(absl::StrCat("no ack for seq ", seq));
  if (r->has_error()) {
    return absl::Status(static_cast<absl::StatusCode>(r->error().code()), r->error().message());
  }
  return r->ack();
}

absl::StatusOr<pb::Ack> SessionClient::Init(uint64_t seq, uint64_t chunk,
                                            const std::vector<float>& values) {
  pb::WorkerMessage m;
  m.mutable_init()->set_seq(seq);
  m.mutable_init()->set_chunk_id(chunk);
  m.mutable_init()->set_values(FloatBytes(values));
  if (!Write(m)) return absl::UnavailableError("write failed");
  auto r = Await(
      [seq](const pb::ServerMessage& s) {
        return (s.has_ack() && s.ack().seq() == seq) || s.has_error();
      },
      absl::Seconds(20));
  if (!r) return absl::DeadlineExceededError("no ack for init");
  if (r->has_error()) {
    return absl::Status(static_cast<absl::StatusCode>(r->error().code()), r->error().message());
  }
  return r->ack();
}

bool SessionClient::SendPull(uint64_t request_id, uint64_t clock,
                             const std::vector<uint64_t>& chunks, uint32_t timeout_ms) {
  pb::WorkerMessage m;
  m.mutable_pull()->set_request_id(request_id);
  m.mutable_pull()->set_clock(clock);
  m.mutable_pull()->set_timeout_ms(timeout_ms);
  for (uint64_t c : chunks) m.mutable_pull()->add_chunk_ids(c);
  return Write(m);
}

absl::StatusOr<std::vector<PulledChunkView>> SessionClient::AwaitPull(uint64_t request_id,
                                                                      absl::Duration timeout) {
  std::vector<PulledChunkView> out;
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    auto r = Await(
        [request_id](const pb::ServerMessage& s) {
          return (s.has_pull() && s.pull().request_id() == request_id) || s.has_error();
        },
        deadline - absl::Now());
    if (!r) return absl::DeadlineExceededError(absl::StrCat("pull ", request_id, " unanswered"));
    if (r->has_error()) {
      return absl::Status(static_cast<absl::StatusCode>(r->error().code()), r->error().message());
    }
    auto a = std::make_shared<const pb::PullAnswer>(std::move(*r->mutable_pull()));
    if (a->chunks_size() == 0) out.emplace_back(a, -1, a->last());
    for (int i = 0; i < a->chunks_size(); ++i) {
      out.emplace_back(a, i, a->last() && i + 1 == a->chunks_size());
    }
    if (a->last()) return out;
  }
}

absl::StatusOr<std::vector<PulledChunkView>> SessionClient::Pull(
    uint64_t request_id, uint64_t clock, const std::vector<uint64_t>& chunks, uint32_t timeout_ms) {
  if (!SendPull(request_id, clock, chunks, timeout_ms)) {
    return absl::UnavailableError("write failed");
  }
  return AwaitPull(request_id);
}

bool SessionClient::Clock(uint64_t clock) {
  pb::WorkerMessage m;
  m.mutable_clock()->set_clock(clock);
  return Write(m);
}

std::string FloatBytes(const std::vector<float>& v) {
  std::string s(v.size() * sizeof(float), 0);
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

std::vector<float> BytesFloats(const std::string& s) {
  std::vector<float> v(s.size() / sizeof(float));
  std::memcpy(v.data(), s.data(), v.size() * sizeof(float));
  return v;
}

pb::EncodedChunk RawChunk(const std::vector<float>& g) {
  pb::EncodedChunk c;
  c.set_codec(pb::CODEC_NONE);
  c.set_num_elems(static_cast<uint32_t>(g.size()));
  c.set_payload(FloatBytes(g));
  return c;
}

}  // namespace gradstream::testing
