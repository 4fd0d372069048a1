// The `gradstream` CLI against a live gs_coordinator on loopback: every
// subcommand with --json output parsed back into the protocol's messages,
// the human output, and the error paths with their exit codes.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "coordinator.pb.h"
#include "gtest/gtest.h"
#include "tests/control/control_testing.h"

namespace gradstream::testing {
namespace {

namespace v1 = gradstream::v1;

class CliTest : public ::testing::Test {
 protected:
  void TearDown() override {
    // Stop the processes before their directory goes.
    StopAll();
    RemoveTestDir(dir_);
  }
  void StopAll() { coord_.process.reset(); }
  void SetUp() override {
    dir_ = MakeTempDir("cli_control_test");
    ASSERT_FALSE(dir_.empty());
    auto c = StartCoordinator(dir_, dir_ + "/state");
    ASSERT_TRUE(c.ok()) << c.status();
    coord_ = *std::move(c);
  }

  CommandResult Run(std::vector<std::string> args) {
    return Cli(coord_.address(), std::move(args));
  }

  // Runs a --json command that must succeed and parses its output.
  template <typename T>
  T RunJson(std::vector<std::string> args) {
    args.push_back("--json");
    CommandResult r = Run(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string error;
    T msg = ParseJson<T>(r.out, &error);
    EXPECT_TRUE(error.empty()) << error;
    return msg;
  }

  std::string dir_;
  Server coord_;
};

TEST_F(CliTest, SubmitStatusListScaleCancelWithJson) {
  auto submitted = RunJson<v1::SubmitJobResponse>(
      {"submit", "--name=flags-job", "--workers=2", "--steps=300", "--optimizer=adagrad",
       "--consistency=bounded", "--staleness=2", "--hidden=32,16"});
  ASSERT_FALSE(submitted.job_id().empty());
  EXPECT_EQ(submitted.spec().steps(), 300u);
  EXPECT_EQ(submitted.spec().consistency().staleness(), 2u);
  const std::string id = submitted.job_id();

  auto status = RunJson<v1::JobStatus>({"status", id});
  EXPECT_EQ(status.job_id(), id);
  EXPECT_EQ(status.state(), v1::PENDING);
  EXPECT_EQ(status.spec().name(), "flags-job");
  EXPECT_EQ(status.spec().optimizer().type(), "adagrad");
  EXPECT_EQ(status.spec().model().hidden_size(), 2);
  EXPECT_EQ(status.desired_workers(), 2u);

  // A spec file, JSON and text format, with a flag overriding it.
  const std::string json_path = dir_ + "/spec.json";
  std::ofstream(json_path) << R"({"name": "file-job", "steps": 50, "model": {"type": "softmax"},
                                 "codec": {"defaultCodec": "ternary"}})";
  auto from_json = RunJson<v1::SubmitJobResponse>({"submit", json_path, "--workers=3"});
  EXPECT_EQ(from_json.spec().name(), "file-job");
  EXPECT_EQ(from_json.spec().codec().default_codec(), "ternary");
  EXPECT_EQ(from_json.spec().workers(), 3u);
  const std::string text_path = dir_ + "/spec.txtpb";
  std::ofstream(text_path) << "name: 'text-job'\nsteps: 70\noptimizer { type: 'sgd' }\n";
  auto from_text = RunJson<v1::SubmitJobResponse>({"submit", text_path});
  EXPECT_EQ(from_text.spec().steps(), 70u);

  auto list = RunJson<v1::ListJobsResponse>({"list"});
  ASSERT_EQ(list.jobs_size(), 3);
  EXPECT_EQ(list.jobs(0).job_id(), from_text.job_id());  // newest first
  EXPECT_EQ(list.jobs(2).job_id(), id);
  // A page at a time: the human form says how to get the next one.
  auto first = RunJson<v1::ListJobsResponse>({"list", "--limit=2"});
  ASSERT_EQ(first.jobs_size(), 2);
  EXPECT_EQ(first.next_page_token(), first.jobs(1).job_id());
  auto rest = RunJson<v1::ListJobsResponse>({"list", "--limit=2", "--page_token",
                                             first.next_page_token()});
  ASSERT_EQ(rest.jobs_size(), 1);
  EXPECT_EQ(rest.jobs(0).job_id(), id);
  EXPECT_EQ(rest.next_page_token(), "");
  CommandResult paged = Run({"list", "--limit=2"});
  EXPECT_TRUE(absl::StrContains(paged.out, "more: gradstream list --page_token " +
                                               first.next_page_token() + " --limit 2"))
      << paged.out;

  auto scaled = RunJson<v1::ScaleJobResponse>({"scale", id, "--workers", "4"});
  EXPECT_EQ(scaled.job().desired_workers(), 4u);
  EXPECT_EQ(RunJson<v1::JobStatus>({"status", id}).desired_workers(), 4u);

  auto cancelled = RunJson<v1::CancelJobResponse>({"cancel", id});
  EXPECT_EQ(cancelled.job().state(), v1::CANCELLED);
  EXPECT_EQ(RunJson<v1::JobStatus>({"status", id}).state(), v1::CANCELLED);

  // Cancelling twice or scaling a finished job: exit 1 and the reason.
  CommandResult again = Run({"cancel", id});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(again.err, "already ended")) << again.err;
  CommandResult scale_done = Run({"scale", id, "--workers=2"});
  EXPECT_EQ(scale_done.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(scale_done.err, "only pending or running jobs")) << scale_done.err;
}

TEST_F(CliTest, HumanOutput) {
  CommandResult submit = Run({"submit", "--name=human", "--workers=1", "--steps=10"});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  EXPECT_TRUE(absl::StrContains(submit.out, "submitted job-")) << submit.out;
  CommandResult list = Run({"list"});
  ASSERT_EQ(list.exit_code, 0);
  EXPECT_TRUE(absl::StartsWith(list.out, "JOB ")) << list.out;
  EXPECT_TRUE(absl::StrContains(list.out, "human")) << list.out;
  EXPECT_TRUE(absl::StrContains(list.out, "PENDING")) << list.out;
  CommandResult status = Run({"status", "job-000001"});
  ASSERT_EQ(status.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(status.out, "state:")) << status.out;
  EXPECT_TRUE(absl::StrContains(status.out, "waiting for shards")) << status.out;
  // Nothing measured yet: dashes, not zeros (see [not measured]).
  EXPECT_TRUE(absl::StrContains(status.out, "loss:         -\n")) << status.out;
  EXPECT_TRUE(absl::StrContains(status.out, "throughput:   - samples/s\n")) << status.out;
  EXPECT_TRUE(absl::StrContains(status.out, "pushed:       -\n")) << status.out;
  CommandResult cluster = Run({"cluster"});
  ASSERT_EQ(cluster.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(cluster.out, "no shards registered")) << cluster.out;
}

TEST_F(CliTest, WatchEndsWhenTheJobEnds) {
  auto submitted = RunJson<v1::SubmitJobResponse>({"submit", "--workers=1"});
  const std::string id = submitted.job_id();
  auto watch = Process::Start(
      GS_CLI_BINARY,
      {"--coordinator=" + coord_.address(), "watch", id, "--json", "--interval=50ms"},
      dir_ + "/watch.out");
  ASSERT_TRUE(watch.ok());
  // The watch has printed at least one progress line before the cancel.
  const absl::Time deadline = absl::Now() + kDeadline;
  while ((*watch)->Log().empty() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_FALSE((*watch)->Log().empty());
  ASSERT_EQ(Run({"cancel", id}).exit_code, 0);
  auto code = (*watch)->Wait(kDeadline);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 5);  // ended without completing
  std::vector<std::string> lines = absl::StrSplit((*watch)->Log(), '\n', absl::SkipWhitespace());
  ASSERT_GE(lines.size(), 2u);
  std::string error;
  auto first = ParseJson<v1::JobStatus>(lines.front(), &error);
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_EQ(first.state(), v1::PENDING);
  // What is not measured is left out of the JSON, not printed as 0.
  for (const char* field : {"\"loss\"", "\"samples_per_sec\"", "\"bytes_pushed\"",
                            "\"compression_ratio\"", "\"eta_seconds\""}) {
    EXPECT_FALSE(absl::StrContains(lines.front(), field)) << field << " in " << lines.front();
  }
  EXPECT_TRUE(absl::StrContains(lines.front(), "\"clock\"")) << lines.front();
  auto last = ParseJson<v1::JobStatus>(lines.back(), &error);
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_EQ(last.state(), v1::CANCELLED);
}

TEST_F(CliTest, ClusterJson) {
  auto cluster = RunJson<v1::ClusterStatus>({"cluster"});
  EXPECT_EQ(cluster.shards_size(), 0);
  EXPECT_EQ(cluster.workers_size(), 0);
  EXPECT_EQ(cluster.heartbeat_timeout_ms(), 10000u);
}

TEST_F(CliTest, UnknownJobExits3) {
  for (const char* cmd : {"status", "watch", "cancel"}) {
    CommandResult r = Run({cmd, "job-424242"});
    EXPECT_EQ(r.exit_code, 3) << cmd << ": " << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "no job 'job-424242'")) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "gradstream list")) << r.err;
  }
  CommandResult scale = Run({"scale", "job-424242", "--workers=2"});
  EXPECT_EQ(scale.exit_code, 3) << scale.err;
}

TEST_F(CliTest, BadSpecExits2AndNamesTheField) {
  CommandResult r = Run({"submit", "--optimizer=adamx"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(
      r.err, "optimizer.type: unknown 'adamx' (want sgd|momentum|nesterov|adagrad|adam)"))
      << r.err;
  const std::string path = dir_ + "/bad.json";
  std::ofstream(path)
      << R"({"workers": 2, "codec": {"defaultCodec": "fourbit"}, "chunkElems": 99999999})";
  CommandResult file = Run({"submit", path});
  EXPECT_EQ(file.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(file.err, "codec.default_codec: unknown 'fourbit'")) << file.err;
  EXPECT_TRUE(absl::StrContains(file.err, "chunk_elems")) << file.err;
  const std::string typo = dir_ + "/typo.txtpb";
  std::ofstream(typo) << "name: 'x'\nstepz: 5\n";
  CommandResult parse = Run({"submit", typo});
  EXPECT_EQ(parse.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(parse.err, "line 2")) << parse.err;
  CommandResult missing = Run({"submit", dir_ + "/nope.json"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(missing.err, "cannot read spec file")) << missing.err;
  // Nothing was submitted.
  EXPECT_EQ(RunJson<v1::ListJobsResponse>({"list"}).jobs_size(), 0);
}

TEST_F(CliTest, UsageErrorsExit2) {
  EXPECT_EQ(Run({}).exit_code, 2);
  EXPECT_EQ(Run({"frobnicate"}).exit_code, 2);
  EXPECT_EQ(Run({"status"}).exit_code, 2);
  EXPECT_EQ(Run({"scale", "job-000001"}).exit_code, 2);  // no --workers
  EXPECT_EQ(Run({"list", "--bogus_flag=1"}).exit_code, 2);
  CommandResult zero = Run({"scale", "job-000001", "--workers=0"});
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(zero.err, "gradstream cancel")) << zero.err;
  CommandResult help = Run({"help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(help.out, "exit codes")) << help.out;
}

// A port nobody listens on: bind one, then close it.
int UnusedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(CliUnreachable, Exits4WithAdvice) {
  const std::string address = absl::StrCat("127.0.0.1:", UnusedPort());
  for (std::vector<std::string> args : {std::vector<std::string>{"list"},
                                        {"status", "job-000001"},
                                        {"cluster"},
                                        {"submit", "--workers=1"}}) {
    CommandResult r = Cli(address, args);
    EXPECT_EQ(r.exit_code, 4) << args[0] << ": " << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "cannot reach the coordinator at " + address)) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "GRADSTREAM_COORDINATOR")) << r.err;
  }
  // The environment variable is honoured when no flag is given.
  CommandResult env = Cli("", {"list"}, {"GRADSTREAM_COORDINATOR=" + address});
  EXPECT_EQ(env.exit_code, 4);
  EXPECT_TRUE(absl::StrContains(env.err, address)) << env.err;
}

}  // namespace
}  // namespace gradstream::testing
