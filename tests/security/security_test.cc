// Transport security and authentication against the real binaries on
// loopback: a CA and certificates made by deploy/make_certs.sh, shards and a
// coordinator started with mutual TLS and a cluster token, and every way a
// caller can be refused, each with the code it must get. Then a whole job
// trains over mTLS end to end. See common/rpc/rpc.h [auth tokens].
//
// Figures printed: the code and time of each refusal, and the mTLS job's
// accuracy and wall time.
#include <sqlite3.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rpc/rpc.h"
#include "gtest/gtest.h"
#include "tests/control/control_testing.h"
#include "tests/control/process.h"
#include "tests/shard/shard_testing.h"
#include "tests/training/cluster.h"

namespace gradstream::testing {
namespace {

// The CA, certificates and cluster token of the whole suite.
class Certs {
 public:
  static const Certs& Get() {
    static const Certs* certs = new Certs();
    return *certs;
  }
  std::string File(const std::string& name) const { return dir_ + "/" + name; }
  std::string token() const { return ReadFile(File("auth_token")).substr(0, 32); }
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }

  // Flags that make a daemon serve mutual TLS and require the token.
  std::vector<std::string> DaemonFlags() const {
    return {"--tls_cert=" + File("node.pem"), "--tls_key=" + File("node.key"),
            "--tls_ca=" + File("ca.pem"), "--auth_token_file=" + File("auth_token")};
  }
  // A client config: CA always; the CLI certificate and token when asked.
  rpc::RpcConfig Client(bool certificate, bool token) const {
    rpc::RpcSettings s;
    s.tls_ca = File("ca.pem");
    if (certificate) {
      s.tls_cert = File("client.pem");
      s.tls_key = File("client.key");
    }
    if (token) s.auth_token_file = File("auth_token");
    auto c = rpc::BuildConfig(s);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : rpc::RpcConfig();
  }

 private:
  Certs() : dir_(MakeTempDir("gs-certs")) {
    auto r = RunCommand(GS_MAKE_CERTS, {dir_ + "/pki"}, absl::Seconds(60));
    dir_ += "/pki";
    ok_ = r.ok() && r->exit_code == 0;
    if (!ok_) error_ = r.ok() ? r->err : std::string(r.status().message());
  }
  std::string dir_;
  bool ok_ = false;
  std::string error_;
};

// Job `job`'s token in the coordinator's state database at `path` (the
// `jobs` table of server/coordinator/rpc/state_store.h), "" if none.
std::string JobToken(const std::string& path, const std::string& job) {
  sqlite3* db = nullptr;
  std::string token;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 10000);
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, "SELECT token FROM jobs WHERE id = ?1", -1, &stmt, nullptr) ==
        SQLITE_OK) {
      sqlite3_bind_text(stmt, 1, job.c_str(), -1, SQLITE_TRANSIENT);
      if (sqlite3_step(stmt) == SQLITE_ROW) {
        token = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
      }
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return token;
}

// Runs `call` and prints how it was refused.
template <typename Fn>
grpc::StatusCode Refusal(const std::string& what, Fn call) {
  const absl::Time start = absl::Now();
  const grpc::Status s = call();
  std::printf("refused: %-58s -> %-17s in %5.1f ms  (%s)\n", what.c_str(),
              absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())).c_str(),
              absl::ToDoubleMilliseconds(absl::Now() - start), s.error_message().c_str());
  std::fflush(stdout);
  return s.error_code();
}

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(Certs::Get().ok()) << "make_certs.sh failed: " << Certs::Get().error();
    auto shard = ShardProcess::Start(Certs::Get().DaemonFlags());
    ASSERT_TRUE(shard.ok()) << shard.status();
    shard_ = std::move(*shard);
  }
  static void TearDownTestSuite() { shard_.reset(); }

  static grpc::Status CreateJob(const rpc::RpcConfig& client, const std::string& job,
                                const std::string& job_token) {
    pb::CreateJobRequest req;
    req.set_job_id(job);
    req.set_job_token(job_token);
    req.mutable_optimizer()->set_type("sgd");
    req.mutable_optimizer()->set_learning_rate(0.5f);
    req.add_chunks()->set_chunk_id(0);
    req.mutable_chunks(0)->set_num_elems(4);
    req.mutable_membership()->set_epoch(1);
    req.mutable_membership()->add_worker_ids(1);
    auto stub = pb::ParameterServer::NewStub(rpc::NewChannel(shard_->address(), client));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    rpc::AttachToken(&ctx, client.auth_token);
    pb::CreateJobResponse resp;
    return stub->CreateJob(&ctx, req, &resp);
  }

  static pb::StatsResponse Stats(const std::string& job) {
    auto stub = pb::ParameterServer::NewStub(
        rpc::NewChannel(shard_->address(), Certs::Get().Client(true, true)));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    rpc::AttachToken(&ctx, Certs::Get().token());
    pb::StatsRequest req;
    req.set_job_id(job);
    pb::StatsResponse resp;
    EXPECT_TRUE(stub->GetStats(&ctx, req, &resp).ok());
    return resp;
  }

  // Opens a Session with `token` and says Hello for `job`.
  static grpc::Status Hello(const std::string& job, const std::string& token) {
    SessionClient s(rpc::NewChannel(shard_->address(), Certs::Get().Client(true, false)),
                    absl::Seconds(10), token);
    absl::StatusOr<pb::HelloAck> ack = s.Hello(job, 1);
    if (ack.ok()) return grpc::Status::OK;
    return grpc::Status(static_cast<grpc::StatusCode>(ack.status().code()),
                        std::string(ack.status().message()));
  }

  static std::unique_ptr<ShardProcess> shard_;
};
std::unique_ptr<ShardProcess> SecurityTest::shard_;

TEST_F(SecurityTest, ShardRefusesEachKindOfCallerWithTheRightCode) {
  const Certs& certs = Certs::Get();
  // Transport: a plaintext client, and a TLS client without a certificate,
  // never get past the handshake.
  EXPECT_EQ(Refusal("plaintext client -> mTLS shard",
                    [&] { return CreateJob(rpc::RpcConfig(), "a", "tok-a"); }),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Refusal("TLS client without a certificate -> mTLS shard",
                    [&] { return CreateJob(certs.Client(false, true), "a", "tok-a"); }),
            grpc::StatusCode::UNAVAILABLE);
  // Control calls need the cluster token.
  EXPECT_EQ(Refusal("CreateJob without the cluster token",
                    [&] { return CreateJob(certs.Client(true, false), "a", "tok-a"); }),
            grpc::StatusCode::UNAUTHENTICATED);
  rpc::RpcConfig wrong = certs.Client(true, false);
  wrong.auth_token = "0123456789abcdef0123456789abcdef";
  EXPECT_EQ(Refusal("CreateJob with a wrong cluster token",
                    [&] { return CreateJob(wrong, "a", "tok-a"); }),
            grpc::StatusCode::UNAUTHENTICATED);

  // With it: two jobs, each with its own token.
  const std::string token_a = rpc::NewToken(), token_b = rpc::NewToken();
  ASSERT_TRUE(CreateJob(certs.Client(true, true), "job-a", token_a).ok());
  ASSERT_TRUE(CreateJob(certs.Client(true, true), "job-b", token_b).ok());

  // Sessions need their job's token.
  EXPECT_EQ(Refusal("Session for job-a without a token", [&] { return Hello("job-a", ""); }),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Refusal("Session for job-a with a wrong token",
                    [&] { return Hello("job-a", rpc::NewToken()); }),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Refusal("Session for job-a with the cluster token (not a member)",
                    [&] { return Hello("job-a", certs.token()); }),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Refusal("Session for job-a with job-b's token (a worker of job-b)",
                    [&] { return Hello("job-a", token_b); }),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Refusal("Session for an unknown job with a stranger's token",
                    [&] { return Hello("no-such-job", rpc::NewToken()); }),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Refusal("Session for an unknown job with job-b's token",
                    [&] { return Hello("no-such-job", token_b); }),
            grpc::StatusCode::NOT_FOUND);

  // The member of job-a, with its token, pushes and pulls.
  SessionClient member(rpc::NewChannel(shard_->address(), certs.Client(true, false)),
                       absl::Seconds(10), token_a);
  ASSERT_TRUE(member.Hello("job-a", 1).ok());
  ASSERT_EQ(member.Init(1, 0, {1, 1, 1, 1})->code(), 0);
  ASSERT_EQ(member.Push(2, 0, 0, RawChunk({2, 2, 2, 2}))->code(), 0);
  auto pulled = member.Pull(3, 1, {0}, 10000);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  ASSERT_EQ(pulled->back().code(), 0) << pulled->back().message();
  EXPECT_EQ(BytesFloats(pulled->back().values()), (std::vector<float>{0, 0, 0, 0}));
  // job-b saw none of it, and the refused streams changed nothing.
  EXPECT_EQ(Stats("job-a").pushes_applied(), 1u);
  EXPECT_EQ(Stats("job-b").pushes_applied(), 0u);
  EXPECT_EQ(Stats("job-b").max_version(), 0u);
}

TEST_F(SecurityTest, CliNeedsTheTokenAndTheCertificate) {
  const Certs& c = Certs::Get();
  const std::string dir = MakeTempDir("gs-sec-coord");
  std::vector<std::string> flags = c.DaemonFlags();
  flags.push_back("--shards=" + shard_->address());
  auto coord = StartCoordinator(dir, dir + "/state", flags);
  ASSERT_TRUE(coord.ok()) << coord.status();
  const std::string addr = coord->address();
  const std::vector<std::string> tls = {"--tls_ca=" + c.File("ca.pem"),
                                        "--tls_cert=" + c.File("client.pem"),
                                        "--tls_key=" + c.File("client.key")};
  auto cli = [&](std::vector<std::string> args, const std::string& what) {
    const absl::Time start = absl::Now();
    CommandResult r = Cli(addr, args);
    std::printf("cli: %-52s -> exit %d in %5.1f ms\n", what.c_str(), r.exit_code,
                absl::ToDoubleMilliseconds(absl::Now() - start));
    return r;
  };
  CommandResult plain = cli({"list"}, "plaintext against the mTLS coordinator");
  EXPECT_EQ(plain.exit_code, 4) << plain.err;
  std::vector<std::string> args = tls;
  args.push_back("list");
  CommandResult no_token = cli(args, "mTLS, no token");
  EXPECT_EQ(no_token.exit_code, 6) << no_token.err;
  EXPECT_TRUE(absl::StrContains(no_token.err, "UNAUTHENTICATED")) << no_token.err;
  EXPECT_TRUE(absl::StrContains(no_token.err, "--auth_token_file")) << no_token.err;
  args.insert(args.begin(), "--auth_token_file=" + c.File("auth_token"));
  CommandResult ok = cli(args, "mTLS and the cluster token");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  // The same credentials reach the shard's gRPC health service.
  std::vector<std::string> health = tls;
  health.insert(health.end(), {"health", shard_->address()});
  CommandResult h = cli(health, "health of the mTLS shard");
  EXPECT_EQ(h.exit_code, 0) << h.err;
  EXPECT_TRUE(absl::StrContains(h.out, "SERVING")) << h.out;
  CommandResult h_plain = cli({"health", shard_->address()}, "plaintext health of the mTLS shard");
  EXPECT_EQ(h_plain.exit_code, 4) << h_plain.err;
  RemoveTestDir(dir);
}

TEST(SecureCluster, MutualTlsJobTrainsEndToEnd) {
  const Certs& c = Certs::Get();
  ASSERT_TRUE(c.ok()) << c.error();
  ClusterOptions o;
  o.shards = 2;
  o.workers = 2;
  o.common_args = c.DaemonFlags();
  o.client = c.Client(true, true);
  auto cluster = LocalCluster::Start(
      {GS_COORDINATOR_BINARY, GS_SHARD_BINARY, GS_WORKER_BINARY}, o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  v1::JobSpec spec;
  spec.set_name("mtls");
  spec.mutable_model()->set_type("mlp");
  spec.mutable_model()->add_hidden(32);
  auto* syn = spec.mutable_dataset()->mutable_synthetic();
  syn->set_classes(10);
  syn->set_clusters_per_class(3);
  syn->set_dims(20);
  syn->set_noise(1.0f);
  syn->set_seed(12345);
  syn->set_train_size(8000);
  syn->set_test_size(2000);
  spec.set_steps(400);
  spec.set_batch_size(32);
  spec.mutable_optimizer()->set_type("momentum");
  spec.mutable_optimizer()->set_learning_rate(0.05f);
  spec.mutable_optimizer()->set_momentum(0.9f);
  spec.mutable_codec()->set_default_codec("twobit");
  spec.set_workers(2);
  spec.set_eval_every(400);
  const absl::Time start = absl::Now();
  auto job = (*cluster)->Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  auto status = (*cluster)->WaitForJob(*job, absl::Minutes(3));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->state(), v1::COMPLETED) << status->message();
  std::printf("mTLS job: %s, accuracy %.4f after %llu clocks, 2 workers x 2 shards, %.1f s\n",
              v1::JobState_Name(status->state()).c_str(), status->progress().accuracy(),
              static_cast<unsigned long long>(status->progress().clock()),
              absl::ToDoubleSeconds(absl::Now() - start));
  EXPECT_GE(status->progress().accuracy(), 0.80);
  // Every process said it serves or dials TLS, and none ran insecure.
  const std::string worker_log = (*cluster)->worker(0).Log();
  EXPECT_TRUE(absl::StrContains(worker_log, "(TLS)")) << worker_log;
  const std::string shard_log = (*cluster)->shard(0).Log();
  EXPECT_TRUE(absl::StrContains(shard_log, "client certificates required")) << shard_log;
  EXPECT_FALSE(absl::StrContains(shard_log, "INSECURE")) << shard_log;
  // The job got its own token (kept in the coordinator's state database,
  // read here while the coordinator runs: see [state db lock]), and it
  // never shows in the job's status, which any cluster-token holder can read.
  const std::string token = JobToken((*cluster)->dir() + "/coordinator.state", *job);
  EXPECT_EQ(token.size(), 32u);
  EXPECT_NE(token, c.token());
  auto full = (*cluster)->GetJob(*job, /*shard_map=*/true);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->DebugString().find(token), std::string::npos);
}

}  // namespace
}  // namespace gradstream::testing
