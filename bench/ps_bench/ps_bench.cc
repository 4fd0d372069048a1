// ps_bench: push/pull throughput of one worker against N shards, beside a raw
// gRPC stream of the same message size measured in the same run (the shape of
// LevelDB's db_bench: flags in, one table out).
//
//   ps_bench                          # loopback: starts gs_shard children and a raw sink
//   ps_bench --codecs=none,twobit --shards=1 --reps=5 --model_floats=4194304
//   ps_bench --codecs=twobit --pull_codecs=none,twobit   # compressed vs fp32 pulls
//   ps_bench --workers=4 --shards=2 --codecs=none,twobit   # 4 workers stepping at once
//   ps_bench --shard_addresses=10.77.0.1:7001 --raw_address=10.77.0.1:7000   # remote
//   ps_bench --serve_raw --port=7000  # only the raw sink (for bench/netns_shaped.sh)
//
// Each case is one job with a push codec and a pull codec (--codecs,
// --pull_codecs) and --workers workers (one client each, stepping at once on
// threads of this process). A step pushes the whole model as one tensor
// (chunks of --chunk_elems on the shard map's shards) and pulls it back at the
// next clock; each repetition times one serial step (push, wait for every ack,
// advance the clock, pull: the "push" and "pull" rows and their sum,
// "serial") and one overlapped step (the pull asked for with the push:
// before it in sync mode, right after it in async; see [overlapped pull] in
// worker/client/ps_client.h: the "step" row). Times
// are medians over --reps after --warmup, the slowest worker's; ratios are
// paired (see [paired baseline]). The jobs run in --mode (sync: a chunk's
// pull is answered when its round closed; async: nothing waits on a clock)
// with SGD. "caller ms" is how long the Push call itself took (encoding every
// chunk and queueing it); the rest of a push's time is the wire and the
// shard's decode + apply before it acknowledges.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "common/rpc/malloc_tuning.h"
#include "common/status.h"
#include "raw.grpc.pb.h"
#include "worker/client/channel_factory.h"
#include "worker/client/ps_client.h"
#include "worker/client/testing/shard_process.h"

ABSL_FLAG(uint64_t, model_floats, uint64_t{16} << 20, "Model size in floats (default 64 MiB).");
ABSL_FLAG(uint32_t, chunk_elems, 262144, "Elements per chunk (<= 262144, 1 MiB of fp32).");
ABSL_FLAG(std::string, codecs, "none,twobit,ternary", "Push codecs to measure.");
ABSL_FLAG(std::string, pull_codecs, "same",
          "Pull codec of each case: \"same\" (= its push codec), or a comma-separated list "
          "(every push codec is measured with each).");
ABSL_FLAG(std::string, shards, "1,2", "Shard counts to measure (loopback mode).");
ABSL_FLAG(int, reps, 5, "Timed repetitions per case (median reported).");
ABSL_FLAG(int, warmup, 1, "Untimed repetitions per case.");
ABSL_FLAG(double, time_budget_s, 45.0, "Stop starting new repetitions after this many seconds.");
ABSL_FLAG(std::string, shard_binary, GS_SHARD_BINARY, "gs_shard binary for loopback mode.");
ABSL_FLAG(std::string, shard_args, "", "Extra flags for each gs_shard, comma-separated.");
ABSL_FLAG(std::string, shard_addresses, "",
          "Use these running shards (host:port, comma-separated) instead of starting any.");
ABSL_FLAG(std::string, raw_address, "", "Use this running raw sink instead of starting one.");
ABSL_FLAG(int, encode_threads, 1,
          "ClientOptions::encode_threads: helpers beside the pushing thread (0 = caller only).");
ABSL_FLAG(bool, skip_raw, false, "Do not measure the raw gRPC baseline.");
ABSL_FLAG(int, workers, 1, "Workers (one client each, all in one job) stepping at once.");
ABSL_FLAG(std::string, mode, "sync", "Consistency mode of the jobs: sync or async.");
ABSL_FLAG(bool, skip_pull, false, "Measure pushes only.");
ABSL_FLAG(bool, pull_first, true,
          "Overlapped step in sync mode: ask for the pull before the pushes (false: right "
          "after them, as async must).");
ABSL_FLAG(bool, serve_raw, false, "Only serve the raw sink on --port (see raw.proto).");
ABSL_FLAG(int, port, 0, "--serve_raw: port to listen on (0 = any).");
ABSL_FLAG(std::string, port_file, "", "--serve_raw: write the bound port here.");
ABSL_FLAG(std::string, bind, "0.0.0.0", "--serve_raw: host to bind.");

namespace gradstream::bench {
namespace {

using client::ClientOptions;
using client::PsClient;
using gradstream::ShardMap;

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

void PrintRatio(const std::string& what, double value, std::string_view target) {
  if (value <= 0) return;
  std::printf("  %-64s %7.2f   %s\n", what.c_str(), value, std::string(target).c_str());
  std::fflush(stdout);
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) out.emplace_back(part);
  return out;
}

// ---- the raw baseline ------------------------------------------------------

class RawService final : public RawStream::Service {
  grpc::Status Sink(grpc::ServerContext*,
                    grpc::ServerReaderWriter<BlobAck, Blob>* stream) override {
    Blob blob;
    BlobAck ack;
    while (stream->Read(&blob)) {
      ack.set_seq(blob.seq());
      if (!stream->Write(ack)) break;
    }
    return grpc::Status::OK;
  }
  grpc::Status Source(grpc::ServerContext*, const SourceRequest* req,
                      grpc::ServerWriter<Blob>* writer) override {
    Blob blob;
    blob.mutable_data()->resize(req->bytes(), 'x');
    for (uint64_t i = 0; i < req->count(); ++i) {
      blob.set_seq(i);
      if (!writer->Write(blob)) break;
    }
    return grpc::Status::OK;
  }
};

int ServeRaw() {
  RawService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::StrCat(absl::GetFlag(FLAGS_bind), ":", absl::GetFlag(FLAGS_port)),
                           grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(8 << 20);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "ps_bench --serve_raw: cannot listen\n");
    return 1;
  }
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    const std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << port << "\n";
    std::rename(tmp.c_str(), port_file.c_str());
  }
  std::printf("raw sink listening on port %d\n", port);
  std::fflush(stdout);
  server->Wait();
  return 0;
}

// Sends `count` blobs of `bytes` on one Sink stream, waits for every ack.
absl::StatusOr<absl::Duration> RawUp(RawStream::Stub* stub, uint64_t count, uint32_t bytes) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  const absl::Time start = absl::Now();
  auto stream = stub->Sink(&ctx);
  std::thread writer([&] {
    Blob blob;
    blob.mutable_data()->resize(bytes, 'x');
    for (uint64_t i = 0; i < count; ++i) {
      blob.set_seq(i);
      if (!stream->Write(blob)) break;
    }
    stream->WritesDone();
  });
  BlobAck ack;
  uint64_t acks = 0;
  while (acks < count && stream->Read(&ack)) ++acks;
  const absl::Duration took = absl::Now() - start;
  writer.join();
  grpc::Status st = stream->Finish();
  if (acks < count) return absl::UnavailableError("raw sink: " + st.error_message());
  return took;
}

absl::StatusOr<absl::Duration> RawDown(RawStream::Stub* stub, uint64_t count, uint32_t bytes) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  SourceRequest req;
  req.set_count(count);
  req.set_bytes(bytes);
  const absl::Time start = absl::Now();
  auto reader = stub->Source(&ctx, req);
  Blob blob;
  uint64_t got = 0;
  while (reader->Read(&blob)) ++got;
  const absl::Duration took = absl::Now() - start;
  grpc::Status st = reader->Finish();
  if (got < count) return absl::UnavailableError("raw source: " + st.error_message());
  return took;
}

// ---- the table -------------------------------------------------------------

struct Row {
  std::string name;
  int shards = 1;
  std::string op;
  double wire_bytes = 0;  // per operation
  double fp32_bytes = 0;
  double seconds = 0;     // median per operation
  int reps = 0;
  double caller_seconds = -1;  // median time the Push call itself took (encode + enqueue)
  double wire_gbps() const { return seconds > 0 ? wire_bytes / seconds / 1e9 : 0; }
  double fp32_gbps() const { return seconds > 0 ? fp32_bytes / seconds / 1e9 : 0; }
};

void PrintRow(const Row& r) {
  std::printf("%-30s %6d  %-5s %9.2f %9.1f %9.3f %12.3f %5d %s\n", r.name.c_str(), r.shards,
              r.op.c_str(), r.wire_bytes / (1 << 20), r.seconds * 1e3, r.wire_gbps(),
              r.fp32_gbps(), r.reps,
              r.caller_seconds >= 0 ? absl::StrFormat("%9.1f", r.caller_seconds * 1e3).c_str()
                                    : "");
  std::fflush(stdout);
}

class Bench {
 public:
  Bench() : start_(absl::Now()) {}

  bool OutOfTime() const {
    return Seconds(absl::Now() - start_) > absl::GetFlag(FLAGS_time_budget_s);
  }

  // Runs `op` warmup + reps times (fewer when the budget is spent).
  template <typename Fn>
  absl::StatusOr<std::pair<double, int>> Time(Fn op) {
    for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) {
      auto d = op();
      if (!d.ok()) return d.status();
    }
    std::vector<double> samples;
    for (int i = 0; i < absl::GetFlag(FLAGS_reps); ++i) {
      if (i > 0 && OutOfTime()) break;
      auto d = op();
      if (!d.ok()) return d.status();
      samples.push_back(Seconds(*d));
    }
    return std::make_pair(Median(samples), static_cast<int>(samples.size()));
  }

  absl::Status RunRaw(std::map<std::string, Row>* rows) {
    std::string address = absl::GetFlag(FLAGS_raw_address);
    if (address.empty()) {
      // The sink runs as a separate process like the shards do.
      auto p = client::testing::ShardProcess::Start("/proc/self/exe", {"--serve_raw"});
      if (!p.ok()) return p.status();
      raw_server_ = *std::move(p);
      address = raw_server_->address();
    }
    raw_ = RawStream::NewStub(client::ChannelFactory::Default()->NewChannel(address));
    RawStream::Stub* stub = raw_.get();
    const uint32_t bytes = absl::GetFlag(FLAGS_chunk_elems) * 4;
    const uint64_t count = absl::GetFlag(FLAGS_model_floats) * 4 / bytes;
    const double total = double(count) * bytes;
    auto up = Time([&] { return RawUp(stub, count, bytes); });
    if (!up.ok()) return up.status();
    Row r{"raw gRPC bidi (sink, acked)", 1, "up", total, total, up->first, up->second};
    PrintRow(r);
    (*rows)["raw_up"] = r;
    auto down = Time([&] { return RawDown(stub, count, bytes); });
    if (!down.ok()) return down.status();
    r = Row{"raw gRPC stream (source)", 1, "down", total, total, down->first, down->second};
    PrintRow(r);
    (*rows)["raw_down"] = r;
    return absl::OkStatus();
  }

  // One job and its workers' clients: a push codec and a pull codec on the
  // same shards.
  struct Case {
    std::string codec, pull_codec;
    std::string job_id;
    std::vector<std::unique_ptr<PsClient>> clients;  // worker i + 1
    std::vector<std::vector<float>> params;          // by worker
    uint64_t clock = 0;
    uint64_t steps = 0;  // recorded steps of either kind (bytes per step)
    // Serial steps (push, then pull) and overlapped ones ([overlapped pull]).
    std::vector<double> push_s, pull_s, caller_s, overlapped_s;
    client::ClientStats before;
    std::string name() const {
      return absl::StrCat("gradstream ", codec, pull_codec == codec ? "" : "/pull " + pull_codec);
    }
  };

  absl::StatusOr<std::unique_ptr<Case>> OpenCase(const std::vector<std::string>& addresses,
                                                 const std::string& codec,
                                                 const std::string& pull_codec, size_t floats) {
    auto c = std::make_unique<Case>();
    c->codec = codec;
    c->pull_codec = pull_codec;
    CodecPolicy policy;
    policy.default_codec = codec;
    // The map says per tensor what its pulls carry (see [layer-wise pull]);
    // the job's pull codec alone would leave every chunk pulled fp32.
    policy.pull_codec = pull_codec;
    auto map = SplitModel({{"model", static_cast<int64_t>(floats)}}, addresses,
                          absl::GetFlag(FLAGS_chunk_elems), policy);
    if (!map.ok()) return map.status();
    absl::StatusOr<CodecType> pull = CodecTypeFromName(pull_codec);
    if (!pull.ok()) return pull.status();
    const int workers = absl::GetFlag(FLAGS_workers);
    client::testing::JobSetup setup;
    setup.job_id = absl::StrCat("ps_bench-", ::getpid(), "-", addresses.size(), "-", codec, "-",
                                pull_codec, "-", job_counter_++);
    setup.optimizer.set_type("sgd");
    setup.optimizer.set_learning_rate(1e-6f);
    const std::string mode = absl::GetFlag(FLAGS_mode);
    if (mode == "sync") {
      setup.consistency.set_mode(v1::SYNC);
    } else if (mode == "async") {
      setup.consistency.set_mode(v1::ASYNC);
    } else {
      return absl::InvalidArgumentError("--mode: sync or async");
    }
    setup.workers.clear();
    for (int w = 1; w <= workers; ++w) setup.workers.push_back(w);
    setup.pull_codec = static_cast<v1::Codec>(static_cast<int>(*pull));
    auto created = client::testing::CreateJob(*map, setup, absl::Seconds(30));
    if (!created.ok()) return created.status();
    c->job_id = setup.job_id;
    for (int w = 1; w <= workers; ++w) {
      ClientOptions options;
      options.job_id = setup.job_id;
      options.worker_id = w;
      options.epoch = setup.epoch;
      options.codec = policy;
      options.rpc_deadline = absl::Seconds(30);
      options.encode_threads = absl::GetFlag(FLAGS_encode_threads);
      auto client = PsClient::Connect(*map, options);
      if (!client.ok()) return client.status();
      c->clients.push_back(*std::move(client));
      c->params.emplace_back(floats, 0.0f);
    }
    std::vector<absl::Span<const float>> init = {absl::MakeConstSpan(c->params[0])};
    if (absl::Status s = c->clients[0]->InitParams(init, absl::Seconds(60)); !s.ok()) return s;
    return c;
  }

  // Times of one worker's step.
  struct StepTimes {
    double push = 0, pull = 0, caller = 0;
  };

  // One worker's communication of one step at c.clock: serial (push, wait,
  // advance the clock, pull) or overlapped (pull the next clock and push at once,
  // advance, wait for both: see [overlapped pull]). `pull` is the time from
  // the push to the pulled parameters when overlapped.
  static absl::StatusOr<StepTimes> WorkerStep(PsClient& ps, std::vector<float>& params,
                                              const std::vector<float>& grad, uint64_t clock,
                                              bool overlapped) {
    StepTimes t;
    const bool pull = !absl::GetFlag(FLAGS_skip_pull);
    // In sync mode the overlapped pull goes out first, so that its requests
    // are not queued in the transport behind the whole push; under async it
    // must follow the pushes to read them (see [overlapped pull]).
    const bool pull_first = absl::GetFlag(FLAGS_mode) == "sync" && absl::GetFlag(FLAGS_pull_first);
    const absl::Time t0 = absl::Now();
    client::PullHandle p;
    if (overlapped && pull && pull_first) p = ps.Pull(clock + 1, {absl::MakeSpan(params)});
    client::PushHandle h = ps.Push(0, grad, clock);
    t.caller = Seconds(absl::Now() - t0);
    if (overlapped && pull && !pull_first) p = ps.Pull(clock + 1, {absl::MakeSpan(params)});
    if (overlapped) GS_RETURN_IF_ERROR(ps.AdvanceClock(clock + 1));
    GS_RETURN_IF_ERROR(PsClient::Wait(h, absl::Seconds(60)));
    t.push = Seconds(absl::Now() - t0);
    if (!overlapped) {
      GS_RETURN_IF_ERROR(ps.AdvanceClock(clock + 1));
      if (!pull) return t;
      const absl::Time t1 = absl::Now();
      GS_RETURN_IF_ERROR(PsClient::Wait(ps.Pull(clock + 1, {absl::MakeSpan(params)}),
                                        absl::Seconds(60)));
      t.pull = Seconds(absl::Now() - t1);
      return t;
    }
    GS_RETURN_IF_ERROR(PsClient::Wait(p, absl::Seconds(60)));
    t.pull = Seconds(absl::Now() - t0);
    return t;
  }

  // One training step's communication on `c`, every worker at once (the
  // slowest worker's times count).
  absl::StatusOr<StepTimes> AllWorkersStep(Case& c, const std::vector<float>& grad,
                                           bool overlapped) {
    const size_t n = c.clients.size();
    std::vector<absl::StatusOr<StepTimes>> times(n, StepTimes{});
    std::vector<std::thread> threads;
    for (size_t w = 1; w < n; ++w) {
      threads.emplace_back([&, w] {
        times[w] = WorkerStep(*c.clients[w], c.params[w], grad, c.clock, overlapped);
      });
    }
    times[0] = WorkerStep(*c.clients[0], c.params[0], grad, c.clock, overlapped);
    for (auto& t : threads) t.join();
    ++c.clock;
    StepTimes out;
    for (const auto& t : times) {
      if (!t.ok()) return t.status();
      out.push = std::max(out.push, t->push);
      out.pull = std::max(out.pull, t->pull);
      out.caller = std::max(out.caller, t->caller);
    }
    return out;
  }

  // One serial and one overlapped step on `c`; the serial one gives the push
  // and pull columns, the overlapped one the step column.
  absl::Status Step(Case& c, const std::vector<float>& grad, bool record, bool with_raw) {
    const uint32_t raw_bytes = absl::GetFlag(FLAGS_chunk_elems) * 4;
    const uint64_t raw_count = grad.size() * 4 / raw_bytes;
    absl::Duration raw_up, raw_down;
    if (with_raw && raw_ != nullptr) {
      auto r = RawUp(raw_.get(), raw_count, raw_bytes);
      if (!r.ok()) return r.status();
      raw_up = *r;
      if (!absl::GetFlag(FLAGS_skip_pull)) {
        auto d = RawDown(raw_.get(), raw_count, raw_bytes);
        if (!d.ok()) return d.status();
        raw_down = *d;
      }
    }
    GS_ASSIGN_OR_RETURN(const StepTimes serial, AllWorkersStep(c, grad, /*overlapped=*/false));
    GS_ASSIGN_OR_RETURN(const StepTimes overlapped, AllWorkersStep(c, grad, /*overlapped=*/true));
    if (!record) return absl::OkStatus();
    c.steps += 2;
    c.push_s.push_back(serial.push);
    c.pull_s.push_back(serial.pull);
    c.caller_s.push_back(serial.caller);
    c.overlapped_s.push_back(overlapped.pull > 0 ? overlapped.pull : overlapped.push);
    if (with_raw && raw_ != nullptr) {
      pairs_["push_up"].push_back(Seconds(raw_up) / serial.push);
      if (serial.pull > 0) pairs_["pull_down"].push_back(Seconds(raw_down) / serial.pull);
    }
    return absl::OkStatus();
  }

  // NOTE: [paired baseline] The host (or the shaped link) is shared, so its
  // load drifts within a run. Every compared case therefore runs each
  // repetition right after a repetition of its baseline (fp32 push + fp32
  // pull on the same shards), and every ratio printed is the median over
  // repetitions of baseline time / case time of one such adjacent pair; the
  // fp32 baseline's own steps are likewise preceded by one raw-stream
  // transfer of the same bytes in each direction. A repetition is one serial
  // step (push, then pull: the push and pull columns, and "serial") and one
  // overlapped step ([overlapped pull]: the step column).
  absl::Status RunSet(const std::vector<std::string>& addresses,
                      const std::vector<std::pair<std::string, std::string>>& cases,
                      const std::vector<float>& grad) {
    const int n = static_cast<int>(addresses.size());
    auto base = OpenCase(addresses, "none", "none", grad.size());
    if (!base.ok()) return base.status();
    std::vector<std::unique_ptr<Case>> open;
    for (const auto& [codec, pull] : cases) {
      if (codec == "none" && pull == "none") continue;
      auto c = OpenCase(addresses, codec, pull, grad.size());
      if (!c.ok()) return c.status();
      open.push_back(*std::move(c));
    }
    for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) {
      GS_RETURN_IF_ERROR(Step(**base, grad, false, false));
      for (auto& c : open) GS_RETURN_IF_ERROR(Step(*c, grad, false, false));
    }
    (*base)->before = (*base)->clients[0]->stats();
    for (auto& c : open) c->before = c->clients[0]->stats();
    // "<case>|push|pull|serial|step", and "<case>|step/serial fp32".
    std::map<std::string, std::vector<double>> ratios;
    const bool with_raw = absl::GetFlag(FLAGS_workers) == 1;
    for (int rep = 0; rep < absl::GetFlag(FLAGS_reps); ++rep) {
      if (rep > 0 && OutOfTime()) break;
      if (open.empty()) GS_RETURN_IF_ERROR(Step(**base, grad, true, with_raw));
      for (auto& c : open) {
        GS_RETURN_IF_ERROR(Step(**base, grad, true, with_raw));
        GS_RETURN_IF_ERROR(Step(*c, grad, true, false));
        const Case& b = **base;
        const double bp = b.push_s.back(), bl = b.pull_s.back(), bo = b.overlapped_s.back(),
                     cp = c->push_s.back(), cl = c->pull_s.back(), co = c->overlapped_s.back();
        ratios[c->name() + "|push"].push_back(bp / cp);
        if (cl > 0) ratios[c->name() + "|pull"].push_back(bl / cl);
        ratios[c->name() + "|serial"].push_back((bp + bl) / (cp + cl));
        ratios[c->name() + "|step"].push_back(bo / co);
        ratios[c->name() + "|step vs fp32 serial"].push_back((bp + bl) / co);
      }
    }
    auto report = [&](Case& c) {
      const client::ClientStats after = c.clients[0]->stats();
      const double steps = static_cast<double>(c.steps);
      const int reps = static_cast<int>(c.push_s.size());
      if (steps == 0) return;
      const double push_wire = double(after.bytes_pushed - c.before.bytes_pushed) / steps;
      const double push_fp32 = double(after.fp32_bytes_pushed - c.before.fp32_bytes_pushed) / steps;
      PrintRow(Row{c.name(), n, "push", push_wire, push_fp32, Median(c.push_s), reps,
                   Median(c.caller_s)});
      if (absl::GetFlag(FLAGS_skip_pull)) return;
      const double pull_wire = double(after.bytes_pulled - c.before.bytes_pulled) / steps;
      const double pull_fp32 = double(after.fp32_bytes_pulled - c.before.fp32_bytes_pulled) / steps;
      PrintRow(Row{c.name(), n, "pull", pull_wire, pull_fp32, Median(c.pull_s), reps});
      std::vector<double> serial;
      for (size_t i = 0; i < c.push_s.size(); ++i) serial.push_back(c.push_s[i] + c.pull_s[i]);
      PrintRow(Row{c.name(), n, "serial", push_wire + pull_wire, push_fp32 + pull_fp32,
                   Median(serial), reps});
      PrintRow(Row{c.name(), n, "step", push_wire + pull_wire, push_fp32 + pull_fp32,
                   Median(c.overlapped_s), reps});
    };
    report(**base);
    for (auto& c : open) report(*c);
    const int workers = absl::GetFlag(FLAGS_workers);
    const std::string tag = absl::StrCat(" [", workers, " worker", workers > 1 ? "s, " : ", ", n,
                                         " shard", n > 1 ? "s" : "", "]");
    for (const auto& [key, v] : pairs_) {
      PrintRatio(absl::StrCat(key == "push_up" ? "fp32 push / raw up" : "fp32 pull / raw down",
                              ", paired", tag).c_str(),
                 Median(v), key == "push_up" ? ">= 0.8" : "(same direction)");
    }
    for (auto& c : open) {
      for (const char* op : {"push", "pull", "serial", "step", "step vs fp32 serial"}) {
        auto it = ratios.find(c->name() + "|" + op);
        if (it == ratios.end()) continue;
        PrintRatio(absl::StrCat(c->name(), " ", op, " speed-up over fp32, paired", tag).c_str(),
                   Median(it->second),
                   std::string_view(op) == "step" ? "(issue 12: >= 10 on 1 Gbit/s)" : "");
      }
    }
    pairs_.clear();
    absl::Status status;
    auto close = [&](Case& c) {
      for (auto& client : c.clients) status.Update(client->Leave(absl::Seconds(30)));
      // Free the shards' copy of the model before the next set.
      for (const std::string& a : addresses) {
        status.Update(client::testing::DropJob(a, c.job_id, absl::Seconds(30)));
      }
    };
    close(**base);
    for (auto& c : open) close(*c);
    return status;
  }

 private:
  std::unique_ptr<client::testing::ShardProcess> raw_server_;
  std::unique_ptr<RawStream::Stub> raw_;
  std::map<std::string, std::vector<double>> pairs_;  // raw-paired ratios of the set running
  const absl::Time start_;
  int job_counter_ = 0;
};

int Run() {
  const uint64_t floats = absl::GetFlag(FLAGS_model_floats);
  const uint32_t chunk = absl::GetFlag(FLAGS_chunk_elems);
  const std::vector<std::string> codecs = SplitList(absl::GetFlag(FLAGS_codecs));
  std::vector<std::vector<std::string>> shard_sets;  // addresses per case
  std::vector<std::unique_ptr<client::testing::ShardProcess>> children;

  std::printf(
      "ps_bench: %d worker(s), %s; model %llu floats (%.1f MiB fp32) as one tensor; chunks of %u "
      "elements (%.2f MiB fp32); encode threads 1+%d; median of %d reps after %d "
      "warmup\n",
      absl::GetFlag(FLAGS_workers), absl::GetFlag(FLAGS_mode).c_str(),
      static_cast<unsigned long long>(floats), floats * 4.0 / (1 << 20), chunk,
      chunk * 4.0 / (1 << 20), absl::GetFlag(FLAGS_encode_threads), absl::GetFlag(FLAGS_reps),
      absl::GetFlag(FLAGS_warmup));
  std::printf("%-30s %6s  %-5s %9s %9s %9s %12s %5s %9s\n", "case", "shards", "op", "wire MiB",
              "ms/op", "GB/s", "fp32-eq GB/s", "reps", "caller ms");
  std::printf("%s\n", std::string(108, '-').c_str());
  std::printf(
      "(serial = push + pull; step = push and pull overlapped. Ratios follow each shard set's "
      "rows; every one is paired: see "
      "[paired baseline])\n");

  Bench bench;
  std::map<std::string, Row> rows;
  if (!absl::GetFlag(FLAGS_skip_raw)) {
    if (absl::Status s = bench.RunRaw(&rows); !s.ok()) {
      std::fprintf(stderr, "raw baseline failed: %s\n", s.ToString().c_str());
      return 1;
    }
  }

  std::vector<float> grad(floats);
  {
    std::mt19937 rng(1);
    std::normal_distribution<float> d(0.0f, 0.5f);
    for (auto& x : grad) x = d(rng);
  }

  std::vector<int> counts;
  const std::string remote = absl::GetFlag(FLAGS_shard_addresses);
  if (!remote.empty()) {
    shard_sets.push_back(SplitList(remote));
  } else {
    for (const std::string& s : SplitList(absl::GetFlag(FLAGS_shards))) {
      int n = 0;
      if (!absl::SimpleAtoi(s, &n) || n <= 0) {
        std::fprintf(stderr, "bad --shards entry '%s'\n", s.c_str());
        return 1;
      }
      counts.push_back(n);
    }
    const int max_shards = counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
    std::vector<std::string> args = SplitList(absl::GetFlag(FLAGS_shard_args));
    for (int i = 0; i < max_shards; ++i) {
      auto p = client::testing::ShardProcess::Start(absl::GetFlag(FLAGS_shard_binary), args);
      if (!p.ok()) {
        std::fprintf(stderr, "cannot start shard: %s\n", p.status().ToString().c_str());
        return 1;
      }
      children.push_back(*std::move(p));
    }
    for (int n : counts) {
      std::vector<std::string> a;
      for (int i = 0; i < n; ++i) a.push_back(children[i]->address());
      shard_sets.push_back(a);
    }
  }

  std::vector<std::pair<std::string, std::string>> cases;
  const std::string pulls = absl::GetFlag(FLAGS_pull_codecs);
  for (const std::string& codec : codecs) {
    if (pulls == "same") {
      cases.emplace_back(codec, codec);
    } else {
      for (const std::string& p : SplitList(pulls)) cases.emplace_back(codec, p);
    }
  }
  for (const auto& addresses : shard_sets) {
    if (bench.OutOfTime()) {
      std::printf("(time budget spent: skipping %zu shards)\n", addresses.size());
      continue;
    }
    if (absl::Status s = bench.RunSet(addresses, cases, grad); !s.ok()) {
      std::fprintf(stderr, "%zu shards failed: %s\n", addresses.size(), s.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace gradstream::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_serve_raw)) {
    // The same allocator settings as gs_shard, so that the raw baseline
    // differs from the shard by the shard's work only ([receive memory]).
    (void)gradstream::rpc::KeepFreedMemoryForReuse();
    return gradstream::bench::ServeRaw();
  }
  return gradstream::bench::Run();
}
