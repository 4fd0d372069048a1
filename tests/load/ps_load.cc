// ps_load: many concurrent workers against real gs_shard processes on
// loopback, for a bounded time; the load test of the shard and of the worker
// client library (PsClient). Run under ThreadSanitizer and AddressSanitizer
// by scripts/sanitize.sh, and as the ctests `ps_load_test` and
// `ps_load_sync_test` (label `load`).
//
//   ps_load                                  # 128 workers x 2 shards, bounded(s=4), 20 s
//   ps_load --workers=64 --mode=sync --duration_s=10
//
// Each worker is one PsClient (one Session stream per shard, so 128 workers
// x 2 shards = 256 streams) running the real training loop: pull at its
// clock, push a twobit-coded tensor and a small tensor that travels as
// `none`, advance the clock. It measures push latency (Push() call to the
// handle completing: encode + wire + the shard's decode/apply + ack), pushes
// per second and pulls, the shards' CPU per push (/proc/<pid>/stat over the
// load phase), counts every non-OK status, samples each shard's RSS
// from /proc/<pid>/status and checks it stays bounded, checks the shards'
// own counters (GetStats) against what was pushed, and stops the shards with
// SIGTERM and requires exit code 0 (a sanitizer in a shard that found
// something exits non-zero). Prints a table; exits 1 on any error or
// violated bound.
//
// NOTE: [load stop clock] Workers cannot simply stop at the deadline: under
// bounded staleness (or sync) a fast worker's pull waits for the slowest
// one, and if that one stopped first the pull would hang until its deadline.
// At the deadline the driver sets a stop clock one above the highest clock
// any worker reached; every worker runs until its clock reaches it. A worker
// below the stop clock only ever waits on workers further below, which are
// still running, so everyone gets there.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "worker/client/ps_client.h"
#include "worker/client/testing/shard_process.h"

ABSL_FLAG(std::string, shard_binary, GS_SHARD_BINARY, "gs_shard binary to start.");
ABSL_FLAG(int, shards, 2, "Shard processes to start.");
ABSL_FLAG(int, workers, 128, "Concurrent workers (one PsClient each).");
ABSL_FLAG(double, duration_s, 20.0, "Length of the load phase.");
ABSL_FLAG(std::string, mode, "bounded", "Consistency: sync, bounded or async.");
ABSL_FLAG(uint32_t, staleness, 4, "The bound s of --mode=bounded.");
ABSL_FLAG(uint64_t, model_floats, 4096, "Elements of the twobit-coded tensor.");
ABSL_FLAG(uint64_t, small_floats, 64, "Elements of the small tensor (travels as none).");
ABSL_FLAG(uint32_t, chunk_elems, 1024, "Elements per chunk.");
ABSL_FLAG(std::string, codec, "twobit", "Codec of the large tensor.");
ABSL_FLAG(std::string, shard_args, "", "Extra flags for each gs_shard, comma-separated.");
ABSL_FLAG(double, wait_timeout_s, 60.0, "Deadline of every wait on a push, pull or connect.");
ABSL_FLAG(double, drain_timeout_s, 120.0,
          "Time allowed after the load phase for every worker to reach the stop clock and leave.");
ABSL_FLAG(int, rss_sample_ms, 200, "RSS sampling period.");
ABSL_FLAG(double, rss_growth_pct, 25.0,
          "Bound: a shard's max RSS over the last third of the load phase may exceed its max "
          "over the first third by at most this percentage plus --rss_slack_mb.");
ABSL_FLAG(double, rss_slack_mb, 32.0, "See --rss_growth_pct.");

namespace gradstream::load {
namespace {

using client::PsClient;
using gradstream::ShardMap;
using client::testing::ShardProcess;

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

double Percentile(std::vector<float>& v, double p) {
  if (v.empty()) return 0.0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

// VmRSS of `pid` in KiB; 0 when it cannot be read (the process is gone).
uint64_t RssKb(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
  }
  return 0;
}

// utime + stime of `pid` in seconds; 0 when it cannot be read.
double CpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  // Fields after the command name, from field 3 (state): utime is the 14th.
  std::vector<std::string> f = absl::StrSplit(stat.substr(paren + 2), ' ');
  if (f.size() < 13) return 0;
  return (std::strtod(f[11].c_str(), nullptr) + std::strtod(f[12].c_str(), nullptr)) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A shard that died (a sanitizer that halts, a crash) is a zombie until we
// reap it: no VmRSS line. Returns its index, or -1 while all live.
int DeadShard(const std::vector<std::unique_ptr<ShardProcess>>& shards) {
  for (size_t i = 0; i < shards.size(); ++i) {
    if (RssKb(shards[i]->pid()) == 0) return static_cast<int>(i);
  }
  return -1;
}

// Fails the run at once when a shard died: the workers' waits on it would
// only time out, minutes later. Reaps it for its exit code, kills the rest.
[[noreturn]] void AbortOnDeadShard(std::vector<std::unique_ptr<ShardProcess>>& shards, int dead,
                                   const char* phase) {
  absl::StatusOr<int> code = shards[dead]->Stop(absl::Seconds(5));
  std::printf("ps_load: shard %d died during %s (%s); see its stderr and any sanitizer report\n",
              dead, phase,
              code.ok() ? absl::StrCat("exit code ", *code).c_str()
                        : code.status().ToString().c_str());
  std::printf("ps_load: FAIL\n");
  std::fflush(stdout);
  for (auto& p : shards) p->Kill();
  std::_Exit(1);
}

// Every error of the run: counted, the first few kept for the report.
class Errors {
 public:
  void Add(const std::string& what) {
    absl::MutexLock l(&mu_);
    ++count_;
    if (first_.size() < 10) first_.push_back(what);
  }
  uint64_t count() const {
    absl::MutexLock l(&mu_);
    return count_;
  }
  std::vector<std::string> first() const {
    absl::MutexLock l(&mu_);
    return first_;
  }

 private:
  mutable absl::Mutex mu_;
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> first_ ABSL_GUARDED_BY(mu_);
};

// What all workers share. Thread-safe.
struct Shared {
  const ShardMap* map = nullptr;
  std::string job_id;
  CodecPolicy policy;
  absl::Duration wait;
  Errors errors;
  absl::Mutex mu;
  int connected ABSL_GUARDED_BY(mu) = 0;
  bool go ABSL_GUARDED_BY(mu) = false;      // the load phase started
  std::atomic<uint64_t> max_clock{0};
  std::atomic<uint64_t> stop_clock{std::numeric_limits<uint64_t>::max()};  // [load stop clock]
  std::atomic<uint64_t> pushes{0};          // completed push handles
  std::atomic<uint64_t> pulls{0};
  std::atomic<uint64_t> chunks_pushed{0};   // acked chunks, inits included
  std::atomic<uint64_t> init_acks{0};       // rank 0's InitChunk acks
};

struct WorkerResult {
  std::vector<float> push_ms;
  std::vector<float> pull_ms;
  uint64_t final_clock = 0;
};

void RunWorker(int rank, Shared* sh, WorkerResult* out) {
  const ShardMap& map = *sh->map;
  client::ClientOptions o;
  o.job_id = sh->job_id;
  o.worker_id = static_cast<uint64_t>(rank) + 1;
  o.epoch = 1;
  o.seed = 7;
  o.codec = sh->policy;
  o.rpc_deadline = sh->wait;
  o.connect_deadline = sh->wait;
  o.pull_timeout = sh->wait;
  o.buffer_pool_bytes = 1 << 20;  // 128 clients: keep the idle pools small
  auto fail = [&](const std::string& what, const absl::Status& s) {
    sh->errors.Add(absl::StrCat("worker ", rank, ": ", what, ": ", s.ToString()));
  };
  absl::StatusOr<std::unique_ptr<PsClient>> connected = PsClient::Connect(map, o);
  {
    absl::MutexLock l(&sh->mu);
    ++sh->connected;
    // Every wait has a deadline: the driver gives up on a stuck start too.
    if (!sh->mu.AwaitWithTimeout(absl::Condition(&sh->go), sh->wait)) {
      sh->errors.Add(absl::StrCat("worker ", rank, ": the load phase never started"));
      return;
    }
  }
  if (!connected.ok()) return fail("Connect", connected.status());
  PsClient& c = **connected;

  std::vector<std::vector<float>> params(map.tensors.size());
  std::vector<std::vector<float>> grads(map.tensors.size());
  std::mt19937 rng(rank);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  for (size_t t = 0; t < map.tensors.size(); ++t) {
    params[t].assign(map.tensors[t].num_elems, 0.0f);
    grads[t].resize(map.tensors[t].num_elems);
  }
  if (rank == 0) {
    std::vector<absl::Span<const float>> init;
    for (const auto& p : params) init.push_back(p);
    if (absl::Status s = c.InitParams(init, sh->wait); !s.ok()) return fail("InitParams", s);
    sh->init_acks.store(map.chunks.size());
  }

  uint64_t clock = 0;
  bool ok = true;
  while (ok && clock < sh->stop_clock.load()) {
    std::vector<absl::Span<float>> views;
    for (auto& p : params) views.push_back(absl::MakeSpan(p));
    const absl::Time t0 = absl::Now();
    if (absl::Status s = PsClient::Wait(c.Pull(clock, views), sh->wait); !s.ok()) {
      fail(absl::StrCat("Pull at clock ", clock), s);
      break;
    }
    out->pull_ms.push_back(Ms(absl::Now() - t0));
    sh->pulls.fetch_add(1);
    // The "gradient": noise plus a pull towards zero, so values stay sane.
    for (size_t t = 0; t < grads.size(); ++t) {
      for (size_t i = 0; i < grads[t].size(); ++i) grads[t][i] = 0.1f * params[t][i] + noise(rng);
    }
    // Both tensors in flight at once, as backward produces them; each handle
    // is timed from its Push() call to its completion.
    std::vector<client::PushHandle> handles;
    std::vector<absl::Time> starts;
    for (uint32_t t = 0; t < grads.size(); ++t) {
      starts.push_back(absl::Now());
      handles.push_back(c.Push(t, grads[t], clock));
    }
    for (size_t t = 0; t < handles.size(); ++t) {
      if (absl::Status s = PsClient::Wait(handles[t], sh->wait); !s.ok()) {
        fail(absl::StrCat("Push of tensor ", t, " at clock ", clock), s);
        ok = false;
        break;
      }
      out->push_ms.push_back(Ms(absl::Now() - starts[t]));
      sh->pushes.fetch_add(1);
    }
    if (!ok) break;
    if (absl::Status s = c.AdvanceClock(clock + 1); !s.ok()) {
      fail("AdvanceClock", s);
      break;
    }
    ++clock;
    uint64_t m = sh->max_clock.load();
    while (m < clock && !sh->max_clock.compare_exchange_weak(m, clock)) {
    }
  }
  out->final_clock = clock;
  const client::ClientStats stats = c.stats();
  sh->chunks_pushed.fetch_add(stats.chunks_acked);
  if (stats.reconnects > 0) {
    // Loopback with live shards: a reconnect means a stream broke.
    sh->errors.Add(absl::StrCat("worker ", rank, ": ", stats.reconnects, " reconnects"));
  }
  if (absl::Status s = c.Leave(sh->wait); !s.ok()) fail("Leave", s);
}

struct RssSeries {
  std::vector<std::pair<double, uint64_t>> samples;  // (seconds since start, KiB)
};

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  for (absl::string_view p : absl::StrSplit(s, ',', absl::SkipEmpty())) out.emplace_back(p);
  return out;
}

int Run() {
  const int num_shards = absl::GetFlag(FLAGS_shards);
  const int num_workers = absl::GetFlag(FLAGS_workers);
  const double duration = absl::GetFlag(FLAGS_duration_s);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  const uint32_t staleness = absl::GetFlag(FLAGS_staleness);
  Errors setup_errors;

  std::vector<std::unique_ptr<ShardProcess>> shards;
  std::vector<std::string> addresses;
  for (int i = 0; i < num_shards; ++i) {
    std::vector<std::string> args = Split(absl::GetFlag(FLAGS_shard_args));
    args.push_back(absl::StrCat("--shard_index=", i));
    // Sanitized shards start slowly on a busy 2-core machine.
    auto p = ShardProcess::Start(absl::GetFlag(FLAGS_shard_binary), args, 0, absl::Seconds(60));
    if (!p.ok()) {
      std::fprintf(stderr, "ps_load: cannot start shard %d: %s\n", i,
                   p.status().ToString().c_str());
      return 1;
    }
    addresses.push_back((*p)->address());
    shards.push_back(*std::move(p));
  }

  Shared sh;
  sh.job_id = absl::StrCat("ps_load-", ::getpid());
  sh.wait = absl::Seconds(absl::GetFlag(FLAGS_wait_timeout_s));
  sh.policy.default_codec = absl::GetFlag(FLAGS_codec);
  // The small tensor travels uncompressed (TernGrad's size_to_binarize).
  sh.policy.min_compress_elems = absl::GetFlag(FLAGS_small_floats) + 1;
  auto map = SplitModel(
      {{"weights", static_cast<int64_t>(absl::GetFlag(FLAGS_model_floats))},
       {"bias", static_cast<int64_t>(absl::GetFlag(FLAGS_small_floats))}},
      addresses, absl::GetFlag(FLAGS_chunk_elems), sh.policy);
  if (!map.ok()) {
    std::fprintf(stderr, "ps_load: %s\n", map.status().ToString().c_str());
    return 1;
  }
  sh.map = &*map;

  client::testing::JobSetup setup;
  setup.job_id = sh.job_id;
  setup.optimizer.set_type("momentum");
  setup.optimizer.set_learning_rate(0.01f);
  if (mode == "sync") {
    setup.consistency.set_mode(v1::SYNC);
  } else if (mode == "bounded") {
    setup.consistency.set_mode(v1::BOUNDED);
    setup.consistency.set_staleness(staleness);
  } else if (mode == "async") {
    setup.consistency.set_mode(v1::ASYNC);
  } else {
    std::fprintf(stderr, "ps_load: unknown --mode=%s\n", mode.c_str());
    return 1;
  }
  setup.workers.clear();
  for (int w = 1; w <= num_workers; ++w) setup.workers.push_back(w);
  if (auto created = client::testing::CreateJob(*map, setup, absl::Seconds(30)); !created.ok()) {
    std::fprintf(stderr, "ps_load: CreateJob: %s\n", created.status().ToString().c_str());
    return 1;
  }

  std::printf("ps_load: %d workers x %d shards (%d Session streams), %s%s, tensors %" PRIu64
              " floats %s + %" PRIu64 " floats none, chunks of %u, load phase %.1f s\n",
              num_workers, num_shards, num_workers * num_shards, mode.c_str(),
              mode == "bounded" ? absl::StrCat("(s=", staleness, ")").c_str() : "",
              absl::GetFlag(FLAGS_model_floats), sh.policy.default_codec.c_str(),
              absl::GetFlag(FLAGS_small_floats), absl::GetFlag(FLAGS_chunk_elems), duration);
  std::fflush(stdout);

  std::vector<WorkerResult> results(num_workers);
  std::vector<std::thread> threads;
  threads.reserve(num_workers);
  const absl::Time connect_start = absl::Now();
  for (int w = 0; w < num_workers; ++w) {
    threads.emplace_back(RunWorker, w, &sh, &results[w]);
  }
  {
    const absl::Time connect_end = absl::Now() + sh.wait + absl::Seconds(10);
    absl::MutexLock l(&sh.mu);
    auto all = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sh.mu) { return sh.connected == num_workers; };
    while (!sh.mu.AwaitWithTimeout(absl::Condition(&all), absl::Milliseconds(200))) {
      if (const int dead = DeadShard(shards); dead >= 0) AbortOnDeadShard(shards, dead, "connect");
      if (absl::Now() >= connect_end) {
        setup_errors.Add("not every worker finished connecting");
        break;
      }
    }
    sh.go = true;
  }
  const double connect_s = absl::ToDoubleSeconds(absl::Now() - connect_start);

  // The load phase: sample RSS until the deadline.
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + absl::Seconds(duration);
  std::vector<RssSeries> rss(num_shards);
  RssSeries self_rss;
  double shard_cpu_s = 0;
  for (const auto& s : shards) shard_cpu_s -= CpuSeconds(s->pid());
  while (absl::Now() < deadline) {
    if (const int dead = DeadShard(shards); dead >= 0) AbortOnDeadShard(shards, dead, "the load");
    const double t = absl::ToDoubleSeconds(absl::Now() - start);
    for (int i = 0; i < num_shards; ++i) rss[i].samples.emplace_back(t, RssKb(shards[i]->pid()));
    self_rss.samples.emplace_back(t, RssKb(::getpid()));
    absl::SleepFor(std::min(absl::Milliseconds(absl::GetFlag(FLAGS_rss_sample_ms)),
                            deadline - absl::Now()));
  }
  const uint64_t pushes_in_phase = sh.pushes.load();
  for (const auto& s : shards) shard_cpu_s += CpuSeconds(s->pid());
  const uint64_t pulls_in_phase = sh.pulls.load();
  const double phase_s = absl::ToDoubleSeconds(absl::Now() - start);
  sh.stop_clock.store(sh.max_clock.load() + 1);  // [load stop clock]

  // Drain: join with a deadline (a stuck worker fails the run instead of
  // hanging it; the shards are killed and the process exits).
  const absl::Time drain_end = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_drain_timeout_s));
  std::atomic<int> finished{0};
  std::thread joiner([&] {
    for (auto& t : threads) t.join();
    finished.store(1);
  });
  while (finished.load() == 0 && absl::Now() < drain_end) {
    if (const int dead = DeadShard(shards); dead >= 0) AbortOnDeadShard(shards, dead, "the drain");
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (finished.load() == 0) {
    std::fprintf(stderr,
                 "ps_load: workers did not finish within --drain_timeout_s; errors so far:\n");
    for (const std::string& e : sh.errors.first()) std::fprintf(stderr, "  %s\n", e.c_str());
    std::fflush(stderr);
    for (auto& s : shards) s->Kill();
    std::_Exit(1);
  }
  joiner.join();
  const double drain_s = absl::ToDoubleSeconds(absl::Now() - start) - phase_s;

  // The shards' own view: every acked chunk counted once, nothing rejected,
  // the staleness bound held.
  uint64_t applied = 0, duplicate = 0, rejected = 0, max_staleness = 0;
  for (int i = 0; i < num_shards; ++i) {
    auto st = client::testing::GetStats(addresses[i], sh.job_id, absl::Seconds(30));
    if (!st.ok()) {
      setup_errors.Add(absl::StrCat("GetStats on shard ", i, ": ", st.status().ToString()));
      continue;
    }
    applied += st->pushes_applied();
    duplicate += st->pushes_duplicate();
    rejected += st->pushes_rejected();
    max_staleness = std::max<uint64_t>(max_staleness, st->max_staleness());
  }
  if (rejected != 0) setup_errors.Add(absl::StrCat("the shards rejected ", rejected, " pushes"));
  // The clients' ack count includes rank 0's one InitChunk per chunk.
  const uint64_t push_acks = sh.chunks_pushed.load() - sh.init_acks.load();
  if (applied + duplicate != push_acks) {
    setup_errors.Add(absl::StrCat("the shards counted ", applied, " applied + ", duplicate,
                                  " duplicate chunks; the clients got ", push_acks,
                                  " push acks"));
  }
  if (mode == "bounded" && max_staleness > staleness) {
    setup_errors.Add(absl::StrCat("observed staleness ", max_staleness, " > bound ", staleness));
  }

  // Graceful stop: a sanitizer report or a leak makes the exit code non-zero.
  std::vector<std::string> exit_codes;
  for (int i = 0; i < num_shards; ++i) {
    absl::StatusOr<int> code = shards[i]->Stop(absl::Seconds(30));
    if (!code.ok()) {
      setup_errors.Add(absl::StrCat("shard ", i, ": ", code.status().ToString()));
      exit_codes.push_back("?");
    } else {
      if (*code != 0) setup_errors.Add(absl::StrCat("shard ", i, " exited with ", *code));
      exit_codes.push_back(absl::StrCat(*code));
    }
  }

  // ---- the table ----
  std::vector<float> push_ms, pull_ms;
  uint64_t min_clock = std::numeric_limits<uint64_t>::max(), max_clock = 0;
  for (WorkerResult& r : results) {
    push_ms.insert(push_ms.end(), r.push_ms.begin(), r.push_ms.end());
    pull_ms.insert(pull_ms.end(), r.pull_ms.begin(), r.pull_ms.end());
    min_clock = std::min(min_clock, r.final_clock);
    max_clock = std::max(max_clock, r.final_clock);
  }
  const uint64_t errors = sh.errors.count() + setup_errors.count();
  std::printf("%-34s %12s\n", "metric", "value");
  std::printf("%s\n", std::string(47, '-').c_str());
  auto row = [](const char* name, const std::string& value) {
    std::printf("%-34s %12s\n", name, value.c_str());
  };
  row("connect all workers (s)", absl::StrFormat("%.2f", connect_s));
  row("load phase (s)", absl::StrFormat("%.2f", phase_s));
  row("drain to stop clock + leave (s)", absl::StrFormat("%.2f", drain_s));
  row("pushes (tensor handles)", absl::StrCat(push_ms.size()));
  row("pushes/s in load phase", absl::StrFormat("%.0f", pushes_in_phase / phase_s));
  row("shard CPU per push (us, all shards)",
      absl::StrFormat("%.1f", pushes_in_phase ? 1e6 * shard_cpu_s / pushes_in_phase : 0.0));
  row("push latency p50 (ms)", absl::StrFormat("%.2f", Percentile(push_ms, 0.50)));
  row("push latency p99 (ms)", absl::StrFormat("%.2f", Percentile(push_ms, 0.99)));
  row("push latency max (ms)", absl::StrFormat("%.2f", Percentile(push_ms, 1.0)));
  row("pulls/s in load phase", absl::StrFormat("%.0f", pulls_in_phase / phase_s));
  row("pull wait p50 (ms)", absl::StrFormat("%.2f", Percentile(pull_ms, 0.50)));
  row("pull wait p99 (ms)", absl::StrFormat("%.2f", Percentile(pull_ms, 0.99)));
  row("chunk push acks (shards: applied+dup)",
      absl::StrCat(push_acks, " (", applied, "+", duplicate, ")"));
  row("final clocks (min..max)", absl::StrCat(min_clock, "..", max_clock));
  row("max staleness served", absl::StrCat(max_staleness));
  row("shard exit codes", absl::StrJoin(exit_codes, ","));
  row("errors", absl::StrCat(errors));

  // RSS: max over the first and last thirds of the load phase.
  bool rss_ok = true;
  const double pct = absl::GetFlag(FLAGS_rss_growth_pct), slack = absl::GetFlag(FLAGS_rss_slack_mb);
  std::printf("\n%-10s %14s %14s %14s %10s\n", "RSS (MiB)", "first 1/3 max", "last 1/3 max",
              "bound", "verdict");
  auto rss_row = [&](const std::string& name, const RssSeries& s, bool enforce) {
    double first = 0, last = 0;
    for (const auto& [t, kb] : s.samples) {
      if (t < phase_s / 3) first = std::max(first, kb / 1024.0);
      if (t >= 2 * phase_s / 3) last = std::max(last, kb / 1024.0);
    }
    const double bound = first * (1 + pct / 100) + slack;
    const bool ok = last <= bound && first > 0 && last > 0;
    if (enforce && !ok) rss_ok = false;
    std::printf("%-10s %14.1f %14.1f %14.1f %10s\n", name.c_str(), first, last, bound,
                ok ? "ok" : enforce ? "GROWING" : "(info)");
  };
  for (int i = 0; i < num_shards; ++i) rss_row(absl::StrCat("shard ", i), rss[i], true);
  rss_row("ps_load", self_rss, false);

  for (const std::string& e : sh.errors.first()) std::printf("error: %s\n", e.c_str());
  for (const std::string& e : setup_errors.first()) std::printf("error: %s\n", e.c_str());
  const bool pass = errors == 0 && rss_ok && !push_ms.empty();
  std::printf("%s\n", pass ? "ps_load: PASS" : "ps_load: FAIL");
  std::fflush(stdout);
  return pass ? 0 : 1;
}

}  // namespace
}  // namespace gradstream::load

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // A shard that dies must not kill the driver through a broken socket.
  ::signal(SIGPIPE, SIG_IGN);
  return gradstream::load::Run();
}
