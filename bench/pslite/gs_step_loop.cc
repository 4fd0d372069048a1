// gs_step_loop: one gradstream worker and one loopback gs_shard child that
// run one communication step per "step" line read from stdin, so that an
// outside driver (bench/pslite/pair.py) can interleave it, step by step, with
// another system's step of the same size (ps-lite's, or another gs_shard
// build's) and pair their times.
//
//   gs_step_loop --codec=none --model_floats=16777216 [--shard_binary=...]
//
// Protocol (one line each): it prints "ready <shard pid>" once the job is
// open and initialized; each "step" line gets "<push ms> <pull ms> <shard
// page faults during the push> <shard CPU ms during the push>" (minor + major
// faults from /proc/<pid>/stat; CPU time of all its threads from
// /proc/<pid>/task/*/schedstat, which other load on the host disturbs less
// than the wall time); "quit" or EOF ends it. A step pushes the whole model as
// one tensor (chunks of --chunk_elems), waits for every ack, advances the
// clock and pulls it back (--pull=false: push only, pull ms 0). The shard
// runs the job in --mode (ASYNC by default) with SGD, as ps_bench does.
#include <unistd.h>

#include <filesystem>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/codec/codec.h"
#include "worker/client/ps_client.h"
#include "worker/client/testing/shard_process.h"

ABSL_FLAG(uint64_t, model_floats, uint64_t{16} << 20, "Model size in floats (default 64 MiB).");
ABSL_FLAG(uint32_t, chunk_elems, 262144, "Elements per chunk (<= 262144, 1 MiB of fp32).");
ABSL_FLAG(std::string, codec, "none", "Push codec (none, twobit, ternary, onebit).");
ABSL_FLAG(std::string, pull_codec, "none", "Pull codec (see [pull codec]).");
ABSL_FLAG(std::string, mode, "async", "Consistency mode: async or sync.");
ABSL_FLAG(bool, pull, true, "Pull the model back after each push.");
ABSL_FLAG(std::string, shard_binary, GS_SHARD_BINARY, "gs_shard binary to start.");
ABSL_FLAG(std::string, shard_args, "", "Extra flags for gs_shard, comma-separated.");
ABSL_FLAG(int, encode_threads, 1, "ClientOptions::encode_threads.");

namespace gradstream::bench {
namespace {

// Minor + major page faults of `pid` so far (fields 10 and 12 of
// /proc/<pid>/stat; the command name in field 2 may hold spaces, so the
// fields are counted after its closing parenthesis).
uint64_t PageFaults(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(in, line);
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  uint64_t minflt = 0, majflt = 0;
  for (int i = 3; rest >> field; ++i) {
    if (i == 10) minflt = std::stoull(field);
    if (i == 12) {
      majflt = std::stoull(field);
      break;
    }
  }
  return minflt + majflt;
}

// CPU time of all threads of `pid` so far (schedstat: ns on a CPU).
uint64_t CpuNanos(pid_t pid) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"), ec)) {
    std::ifstream in(task.path() / "schedstat");
    uint64_t ns = 0;
    if (in >> ns) total += ns;
  }
  return total;
}

int Run() {
  const uint64_t floats = absl::GetFlag(FLAGS_model_floats);
  std::vector<std::string> args;
  for (absl::string_view a : absl::StrSplit(absl::GetFlag(FLAGS_shard_args), ',',
                                            absl::SkipEmpty())) {
    args.emplace_back(a);
  }
  auto shard = client::testing::ShardProcess::Start(absl::GetFlag(FLAGS_shard_binary), args);
  if (!shard.ok()) {
    std::fprintf(stderr, "gs_step_loop: cannot start the shard: %s\n",
                 shard.status().ToString().c_str());
    return 1;
  }
  CodecPolicy policy;
  policy.default_codec = absl::GetFlag(FLAGS_codec);
  policy.pull_codec = absl::GetFlag(FLAGS_pull_codec);
  auto map = SplitModel({{"model", static_cast<int64_t>(floats)}}, {(*shard)->address()},
                        absl::GetFlag(FLAGS_chunk_elems), policy);
  if (!map.ok()) {
    std::fprintf(stderr, "gs_step_loop: %s\n", map.status().ToString().c_str());
    return 1;
  }
  client::testing::JobSetup setup;
  setup.job_id = absl::StrCat("gs_step_loop-", ::getpid());
  setup.optimizer.set_type("sgd");
  setup.optimizer.set_learning_rate(1e-6f);
  absl::StatusOr<CodecType> pull_codec = CodecTypeFromName(policy.pull_codec);
  if (!pull_codec.ok()) {
    std::fprintf(stderr, "gs_step_loop: %s\n", pull_codec.status().ToString().c_str());
    return 1;
  }
  setup.pull_codec = static_cast<v1::Codec>(static_cast<int>(*pull_codec));
  setup.consistency.set_mode(absl::GetFlag(FLAGS_mode) == "sync" ? v1::SYNC : v1::ASYNC);
  if (auto created = client::testing::CreateJob(*map, setup, absl::Seconds(30)); !created.ok()) {
    std::fprintf(stderr, "gs_step_loop: %s\n", created.status().ToString().c_str());
    return 1;
  }
  client::ClientOptions options;
  options.job_id = setup.job_id;
  options.worker_id = 1;
  options.epoch = setup.epoch;
  options.codec = policy;
  options.rpc_deadline = absl::Seconds(30);
  options.encode_threads = absl::GetFlag(FLAGS_encode_threads);
  auto client = client::PsClient::Connect(*map, options);
  if (!client.ok()) {
    std::fprintf(stderr, "gs_step_loop: %s\n", client.status().ToString().c_str());
    return 1;
  }
  std::vector<float> params(floats, 0.0f), grad(floats);
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 0.5f);
  for (float& x : grad) x = d(rng);
  if (absl::Status s = (*client)->InitParams({absl::MakeConstSpan(params)}, absl::Seconds(60));
      !s.ok()) {
    std::fprintf(stderr, "gs_step_loop: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("ready %d\n", static_cast<int>((*shard)->pid()));
  std::fflush(stdout);
  uint64_t clock = 0;
  std::string line;
  while (std::getline(std::cin, line) && line != "quit") {
    if (line != "step") continue;
    const uint64_t faults = PageFaults((*shard)->pid());
    const uint64_t cpu = CpuNanos((*shard)->pid());
    const absl::Time t0 = absl::Now();
    absl::Status s = client::PsClient::Wait((*client)->Push(0, grad, clock), absl::Seconds(60));
    const absl::Duration push = absl::Now() - t0;
    const uint64_t push_faults = PageFaults((*shard)->pid()) - faults;
    const double push_cpu_ms = static_cast<double>(CpuNanos((*shard)->pid()) - cpu) / 1e6;
    if (s.ok()) s = (*client)->AdvanceClock(++clock);
    absl::Duration pull;
    if (s.ok() && absl::GetFlag(FLAGS_pull)) {
      const absl::Time t1 = absl::Now();
      s = client::PsClient::Wait((*client)->Pull(clock, {absl::MakeSpan(params)}),
                                 absl::Seconds(60));
      pull = absl::Now() - t1;
    }
    if (!s.ok()) {
      std::fprintf(stderr, "gs_step_loop: %s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("%.3f %.3f %llu %.3f\n", absl::ToDoubleMilliseconds(push),
                absl::ToDoubleMilliseconds(pull), static_cast<unsigned long long>(push_faults),
                push_cpu_ms);
    std::fflush(stdout);
  }
  if (absl::Status s = (*client)->Leave(absl::Seconds(10)); !s.ok()) {
    std::fprintf(stderr, "gs_step_loop: leave: %s\n", s.ToString().c_str());
  }
  return 0;
}

}  // namespace
}  // namespace gradstream::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gradstream::bench::Run();
}
