// gradstream: the command-line client of the coordinator.
//
//   gradstream submit [SPEC_FILE] [--workers=N|MIN:MAX ...]   submit a job
//   gradstream status JOB                             one job in detail
//   gradstream watch JOB                              live progress until it ends
//   gradstream scale JOB --workers N|MIN:MAX          change the worker count (or range)
//   gradstream cancel JOB                             stop a job
//   gradstream list [--limit N] [--page_token JOB]     jobs, newest first, a page at a time
//   gradstream cluster                                shards and workers
//   gradstream plot JOB [JOB...] -o FILE.png          loss/accuracy curves (gnuplot)
//   gradstream health [HOST:PORT]                     gRPC health of any server
//
// Exit codes (see kUsage): 0 ok, 1 other error, 2 usage or invalid spec,
// 3 unknown job, 4 coordinator unreachable, 5 `watch`: job ended without
// completing (FAILED / CANCELLED), 6 not authorized (token or certificate).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cli/args.h"
#include "cli/plot.h"
#include "cli/render.h"
#include "cli/spec_input.h"
#include "common/grpc_util.h"
#include "common/job/job_spec.h"
#include "common/job/job_state.h"
#include "common/rpc/rpc.h"
#include "coordinator.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "health.grpc.pb.h"

namespace gradstream::cli {
namespace {

namespace v1 = gradstream::v1;

enum ExitCode {
  kOk = 0,
  kOther = 1,
  kUsage = 2,
  kNotFound = 3,
  kUnreachable = 4,
  kJobFailed = 5,
  kUnauthorized = 6,
};

constexpr char kDefaultCoordinator[] = "localhost:7070";

constexpr char kUsageText[] = R"(usage: gradstream COMMAND [ARGS] [FLAGS]

commands:
  submit [SPEC_FILE] [SPEC FLAGS]   submit a job (JSON or text-format JobSpec file and/or flags)
  status JOB                        show one job in detail
  watch JOB [--interval=1s]         live progress until the job ends
  scale JOB --workers N             change a running job's worker count; on an elastic job
                                    N is its new MAX (MIN lowered to N if above), and
                                    --workers MIN:MAX sets the whole range
  cancel JOB                        stop a job
  list [--limit N] [--page_token J] list jobs, newest first (N a page, default 100)
  cluster                           list shards and workers with their health
  plot JOB [JOB...] -o FILE.png     accuracy and loss against clock and against bytes pushed,
                                    one line per job (needs gnuplot: apt-get install gnuplot-nox)
  health [HOST:PORT]                gRPC health check of a coordinator or shard
                                    (default: the coordinator); exit 0 = SERVING
  help [submit]                     this text / the submit flags

global flags:
  --coordinator=HOST:PORT   coordinator address (default: $GRADSTREAM_COORDINATOR or localhost:7070)
  --json                    machine-readable JSON output (one object; `watch`: one per line)
  --timeout=5s              deadline of each call to the coordinator
  --tls_ca=PEM              use TLS; verify the server with this CA ($GRADSTREAM_TLS_CA)
  --tls_cert=PEM --tls_key=PEM
                            client certificate for mutual TLS ($GRADSTREAM_TLS_CERT/_KEY)
  --auth_token_file=F       the cluster token ($GRADSTREAM_AUTH_TOKEN_FILE)

exit codes:
  0 ok   1 other error   2 usage error or invalid job spec   3 unknown job
  4 coordinator unreachable   5 (watch) the job ended FAILED or CANCELLED
  6 not authorized (missing or wrong token or certificate)
)";

const std::set<std::string> kBoolFlags = {"json", "help", "no_error_feedback", "dry_run"};
const std::set<std::string> kGlobalFlags = {
    "coordinator", "json", "timeout", "help", "tls_ca", "tls_cert", "tls_key", "auth_token_file"};

struct Context {
  std::string address;
  absl::Duration timeout = absl::Seconds(5);
  bool json = false;
  rpc::RpcConfig rpc;
  std::unique_ptr<v1::Coordinator::Stub> stub;
};

int ExitFor(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return kOk;
    case absl::StatusCode::kInvalidArgument:
      return kUsage;
    case absl::StatusCode::kNotFound:
      return kNotFound;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kUnreachable;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kUnauthorized;
    default:
      return kOther;
  }
}

// Prints `s` with advice on what to do, returns the exit code.
int Fail(const Context& ctx, const absl::Status& s) {
  std::string advice;
  switch (ExitFor(s)) {
    case kUnreachable:
      advice =
          absl::StrCat("\n  cannot reach the coordinator at ", ctx.address,
                       ": is gs_coordinator running there? Pass --coordinator=HOST:PORT or set "
                       "GRADSTREAM_COORDINATOR. If it serves TLS, pass --tls_ca (and --tls_cert/"
                       "--tls_key when it requires client certificates).");
      break;
    case kUsage:
      advice = "\n  fix the field(s) named above; `gradstream help submit` lists the spec flags.";
      break;
    case kUnauthorized:
      advice =
          "\n  the coordinator requires its cluster token: pass --auth_token_file=FILE or set "
          "GRADSTREAM_AUTH_TOKEN_FILE.";
      break;
    default:
      break;
  }
  std::cerr << "gradstream: " << absl::StatusCodeToString(s.code()) << ": " << s.message() << advice
            << "\n";
  return ExitFor(s);
}

int Usage(const std::string& message) {
  std::cerr << "gradstream: " << message << "\n\n" << kUsageText;
  return kUsage;
}

// Every call carries a deadline; fail fast when the coordinator is down.
template <typename Req, typename Resp, typename Method>
absl::Status Call(const Context& ctx, Method method, const Req& req, Resp* resp) {
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(ctx.timeout));
  rpc::AttachToken(&c, ctx.rpc.auth_token);
  return FromGrpcStatus((ctx.stub.get()->*method)(&c, req, resp));
}

void PrintJson(const google::protobuf::Message& m, bool one_line = false) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = !one_line;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  std::cout << out << (one_line || out.empty() || out.back() != '\n' ? "\n" : "");
  std::cout.flush();
}

int CmdSubmit(const Context& ctx, const Args& args) {
  if (args.positional().size() > 2) return Usage("submit takes at most one SPEC_FILE");
  v1::SubmitJobRequest req;
  if (args.positional().size() == 2) {
    auto spec = LoadSpecFile(args.positional()[1]);
    if (!spec.ok()) return Fail(ctx, absl::InvalidArgumentError(spec.status().message()));
    *req.mutable_spec() = *std::move(spec);
  }
  if (absl::Status s = ApplySpecFlags(args, req.mutable_spec()); !s.ok()) return Fail(ctx, s);
  // Validate here too, so a bad spec is reported without a coordinator.
  auto normalized = NormalizeJobSpec(req.spec());
  if (!normalized.ok()) return Fail(ctx, normalized.status());
  if (args.Bool("dry_run")) {
    ctx.json ? PrintJson(*normalized) : (void)(std::cout << normalized->DebugString());
    return kOk;
  }
  v1::SubmitJobResponse resp;
  if (absl::Status s = Call(ctx, &v1::Coordinator::Stub::SubmitJob, req, &resp); !s.ok()) {
    return Fail(ctx, s);
  }
  if (ctx.json) {
    PrintJson(resp);
  } else {
    std::cout << "submitted " << resp.job_id() << "\n  follow it with: gradstream watch "
              << resp.job_id() << "\n";
  }
  return kOk;
}

absl::StatusOr<v1::JobStatus> GetJob(const Context& ctx, const std::string& id,
                                     bool with_shard_map = false) {
  v1::GetJobRequest req;
  req.set_job_id(id);
  req.set_include_shard_map(with_shard_map);
  v1::JobStatus job;
  absl::Status s = Call(ctx, &v1::Coordinator::Stub::GetJob, req, &job);
  if (!s.ok()) return s;
  return job;
}

int CmdStatus(const Context& ctx, const Args& args) {
  if (args.positional().size() != 2) return Usage("usage: gradstream status JOB");
  // With the map: status shows the codec each tensor travels with.
  auto job = GetJob(ctx, args.positional()[1], /*with_shard_map=*/true);
  if (!job.ok()) return Fail(ctx, job.status());
  ctx.json ? PrintJson(*job)
           : (void)(std::cout << RenderJob(*job, absl::ToUnixMillis(absl::Now())));
  return kOk;
}

int CmdWatch(const Context& ctx, const Args& args) {
  if (args.positional().size() != 2) return Usage("usage: gradstream watch JOB [--interval=1s]");
  auto interval = args.GetDuration("interval");
  if (!interval.ok()) return Fail(ctx, interval.status());
  const absl::Duration every = interval->value_or(absl::Seconds(1));
  auto patience = args.GetDuration("unreachable_timeout");
  if (!patience.ok()) return Fail(ctx, patience.status());
  // A coordinator restart should not end a watch: retry for a while.
  const absl::Duration max_unreachable = patience->value_or(absl::Seconds(30));
  const bool tty = !ctx.json && ::isatty(STDOUT_FILENO);
  std::string last_line;
  absl::Time unreachable_since = absl::InfiniteFuture();
  while (true) {
    auto job = GetJob(ctx, args.positional()[1]);
    if (!job.ok()) {
      if (ExitFor(job.status()) != kUnreachable) return Fail(ctx, job.status());
      const absl::Time now = absl::Now();
      if (unreachable_since == absl::InfiniteFuture()) {
        unreachable_since = now;
        std::cerr << "\ngradstream: coordinator unreachable, retrying for "
                  << absl::FormatDuration(max_unreachable) << "...\n";
      }
      if (now - unreachable_since > max_unreachable) return Fail(ctx, job.status());
      absl::SleepFor(every);
      continue;
    }
    unreachable_since = absl::InfiniteFuture();
    if (ctx.json) {
      job->clear_epochs();
      job->clear_members();
      job->clear_history();
      PrintJson(*job, /*one_line=*/true);
    } else {
      const std::string line = ProgressLine(*job, tty ? 30 : 0);
      if (tty) {
        std::cout << "\r\033[K" << line << std::flush;
      } else if (line != last_line) {
        std::cout << line << "\n" << std::flush;
      }
      last_line = line;
    }
    if (IsTerminal(job->state())) {
      if (tty) std::cout << "\n";
      if (!ctx.json && !job->message().empty()) std::cout << job->message() << "\n";
      return job->state() == v1::COMPLETED ? kOk : kJobFailed;
    }
    absl::SleepFor(every);
  }
}

int CmdScale(const Context& ctx, const Args& args) {
  if (args.positional().size() != 2 || !args.Has("workers")) {
    return Usage("usage: gradstream scale JOB --workers N|MIN:MAX");
  }
  absl::StatusOr<WorkerRange> range = ParseWorkerRange(*args.Get("workers"));
  if (!range.ok()) return Fail(ctx, range.status());
  v1::ScaleJobRequest req;
  req.set_job_id(args.positional()[1]);
  req.set_workers(range->max);
  req.set_workers_min(range->min);
  v1::ScaleJobResponse resp;
  if (absl::Status s = Call(ctx, &v1::Coordinator::Stub::ScaleJob, req, &resp); !s.ok()) {
    return Fail(ctx, s);
  }
  if (ctx.json) {
    PrintJson(resp);
  } else {
    std::cout << resp.job().job_id() << ": desired workers " << resp.job().desired_workers()
              << " (now " << resp.job().active_workers()
              << " active; the change takes effect at a clock about two heartbeats ahead,"
                 " listed under EPOCH in `gradstream status`)\n";
  }
  return kOk;
}

int CmdCancel(const Context& ctx, const Args& args) {
  if (args.positional().size() != 2) return Usage("usage: gradstream cancel JOB");
  v1::CancelJobRequest req;
  req.set_job_id(args.positional()[1]);
  v1::CancelJobResponse resp;
  if (absl::Status s = Call(ctx, &v1::Coordinator::Stub::CancelJob, req, &resp); !s.ok()) {
    return Fail(ctx, s);
  }
  ctx.json ? PrintJson(resp) : (void)(std::cout << resp.job().job_id() << ": CANCELLED\n");
  return kOk;
}

int CmdList(const Context& ctx, const Args& args) {
  if (args.positional().size() != 1) {
    return Usage("usage: gradstream list [--limit N] [--page_token JOB]");
  }
  v1::ListJobsRequest req;
  auto limit = args.GetUint("limit");
  if (!limit.ok()) return Fail(ctx, limit.status());
  if (*limit) req.set_page_size(static_cast<uint32_t>(std::min<uint64_t>(**limit, UINT32_MAX)));
  req.set_page_token(args.Get("page_token").value_or(""));
  v1::ListJobsResponse resp;
  if (absl::Status s = Call(ctx, &v1::Coordinator::Stub::ListJobs, req, &resp); !s.ok()) {
    return Fail(ctx, s);
  }
  if (ctx.json) {
    PrintJson(resp);
  } else {
    std::cout << RenderJobList(resp);
    if (!resp.next_page_token().empty()) {
      std::cout << "more: gradstream list --page_token " << resp.next_page_token()
                << (*limit ? absl::StrCat(" --limit ", **limit) : "") << "\n";
    }
  }
  return kOk;
}

int CmdCluster(const Context& ctx, const Args& args) {
  if (args.positional().size() != 1) return Usage("usage: gradstream cluster");
  v1::ClusterStatus resp;
  if (absl::Status s =
          Call(ctx, &v1::Coordinator::Stub::GetCluster, v1::GetClusterRequest(), &resp);
      !s.ok()) {
    return Fail(ctx, s);
  }
  ctx.json ? PrintJson(resp)
           : (void)(std::cout << RenderCluster(resp, absl::ToUnixMillis(absl::Now())));
  return kOk;
}

// grpc.health.v1 Check of any gradstream server, with the same credentials
// as every other call (the containers' HEALTHCHECK and Kubernetes probes).
int CmdPlot(const Context& ctx, const Args& args) {
  const std::optional<std::string> output = args.Has("o") ? args.Get("o") : args.Get("output");
  if (args.positional().size() < 2 || !output.has_value() || output->empty()) {
    return Usage("usage: gradstream plot JOB [JOB...] -o FILE.png");
  }
  std::vector<v1::JobStatus> jobs;
  for (size_t i = 1; i < args.positional().size(); ++i) {
    auto job = GetJob(ctx, args.positional()[i]);
    if (!job.ok()) return Fail(ctx, job.status());
    jobs.push_back(*std::move(job));
  }
  absl::StatusOr<std::string> script = PlotScript(jobs, *output);
  if (!script.ok()) return Fail(ctx, script.status());
  if (absl::Status s = RunGnuplot(*script); !s.ok()) return Fail(ctx, s);
  std::cout << "wrote " << *output << " (" << jobs.size() << " job" << (jobs.size() > 1 ? "s" : "")
            << ")\n";
  return kOk;
}

int CmdHealth(const Context& ctx, const Args& args) {
  if (args.positional().size() > 2) return Usage("usage: gradstream health [HOST:PORT]");
  const std::string address = args.positional().size() == 2 ? args.positional()[1] : ctx.address;
  auto stub = grpc::health::v1::Health::NewStub(rpc::NewChannel(address, ctx.rpc));
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(ctx.timeout));
  grpc::health::v1::HealthCheckResponse resp;
  const absl::Status s =
      FromGrpcStatus(stub->Check(&c, grpc::health::v1::HealthCheckRequest(), &resp));
  if (!s.ok()) {
    std::cerr << "gradstream: health of " << address << ": " << absl::StatusCodeToString(s.code())
              << ": " << s.message() << "\n";
    return ExitFor(s);
  }
  const std::string status =
      grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
  std::cout << (ctx.json ? HealthJson(address, status) : absl::StrCat(address, ": ", status))
            << "\n";
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? kOk : kOther;
}

int Main(int argc, char** argv) {
  std::vector<std::string> argv_list(argv + 1, argv + argc);
  auto parsed = Args::Parse(argv_list, kBoolFlags);
  if (!parsed.ok()) return Usage(std::string(parsed.status().message()));
  const Args& args = *parsed;
  if (args.positional().empty() || args.Bool("help") || args.positional()[0] == "help") {
    if (args.positional().size() >= 2 && args.positional()[1] == "submit") {
      std::cout << "usage: gradstream submit [SPEC_FILE] [--dry_run] [flags]\n"
                   "  SPEC_FILE: a JobSpec (proto/job.proto) as JSON (*.json) or text format;\n"
                   "  flags override its fields:\n"
                << SpecFlagsHelp();
      return kOk;
    }
    if (args.positional().empty() && !args.Bool("help")) return Usage("no command given");
    std::cout << kUsageText;
    return kOk;
  }
  const std::string& cmd = args.positional()[0];
  std::set<std::string> known = kGlobalFlags;
  if (cmd == "submit") {
    known.insert(SpecFlagNames().begin(), SpecFlagNames().end());
    known.insert("dry_run");
  } else if (cmd == "watch") {
    known.insert({"interval", "unreachable_timeout"});
  } else if (cmd == "scale") {
    known.insert("workers");
  } else if (cmd == "list") {
    known.insert({"limit", "page_token"});
  } else if (cmd == "plot") {
    known.insert({"o", "output"});
  }
  if (absl::Status s = args.CheckKnown(known); !s.ok()) return Usage(std::string(s.message()));

  Context ctx;
  const char* env = std::getenv("GRADSTREAM_COORDINATOR");
  ctx.address = args.Get("coordinator").value_or(env && *env ? env : kDefaultCoordinator);
  ctx.json = args.Bool("json");
  auto timeout = args.GetDuration("timeout");
  if (!timeout.ok()) return Usage(std::string(timeout.status().message()));
  if (*timeout) ctx.timeout = **timeout;
  rpc::RpcSettings settings;
  settings.tls_ca = args.Get("tls_ca").value_or("");
  settings.tls_cert = args.Get("tls_cert").value_or("");
  settings.tls_key = args.Get("tls_key").value_or("");
  settings.auth_token_file = args.Get("auth_token_file").value_or("");
  absl::StatusOr<rpc::RpcConfig> config = rpc::BuildConfig(settings);
  if (!config.ok()) return Usage(std::string(config.status().message()));
  ctx.rpc = *std::move(config);
  ctx.stub = v1::Coordinator::NewStub(rpc::NewChannel(ctx.address, ctx.rpc));

  if (cmd == "submit") return CmdSubmit(ctx, args);
  if (cmd == "status") return CmdStatus(ctx, args);
  if (cmd == "watch") return CmdWatch(ctx, args);
  if (cmd == "scale") return CmdScale(ctx, args);
  if (cmd == "cancel") return CmdCancel(ctx, args);
  if (cmd == "list") return CmdList(ctx, args);
  if (cmd == "cluster") return CmdCluster(ctx, args);
  if (cmd == "plot") return CmdPlot(ctx, args);
  if (cmd == "health") return CmdHealth(ctx, args);
  return Usage(absl::StrCat("unknown command '", cmd, "'"));
}

}  // namespace
}  // namespace gradstream::cli

int main(int argc, char** argv) { return gradstream::cli::Main(argc, argv); }
