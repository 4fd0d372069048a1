// See render.h.
#include "cli/render.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job/codec_policy.h"
#include "common/job/job_state.h"
#include "common/job/precision.h"
#include "nlohmann/json.hpp"

namespace gradstream::cli {

namespace v1 = gradstream::v1;

namespace {

// A running job's shard clock standing still this long is shown as a stall
// (the coordinator's [shard progress]).
constexpr double kStallShownSeconds = 2;

std::string Age(int64_t then_ms, int64_t now_ms) {
  if (then_ms <= 0) return "never";
  const double s = std::max<int64_t>(0, now_ms - then_ms) / 1000.0;
  if (s < 60) return absl::StrFormat("%.1fs ago", s);
  if (s < 3600) return absl::StrFormat("%.0fm ago", s / 60);
  return absl::StrFormat("%.1fh ago", s / 3600);
}

std::string ModelText(const v1::JobSpec& spec) {
  if (!spec.entrypoint().empty()) {
    int64_t params = 0;
    for (const auto& t : spec.model().tensors()) {
      int64_t n = 1;
      for (int64_t d : t.shape()) n *= d;
      params += n;
    }
    return absl::StrCat("script `", spec.entrypoint(), "` (",
                        spec.model().tensors_size() == 0
                            ? std::string("tensors not declared yet")
                            : absl::StrCat(spec.model().tensors_size(), " tensors, ", params,
                                           " parameters"),
                        ")");
  }
  std::string model = spec.model().type();
  if (spec.model().hidden_size() > 0) {
    absl::StrAppend(&model, " [", absl::StrJoin(spec.model().hidden(), ","), "]");
  }
  const auto& d = spec.dataset();
  if (d.has_mnist_dir()) return absl::StrCat(model, " on mnist:", d.mnist_dir());
  if (d.has_cifar10_dir()) return absl::StrCat(model, " on cifar10:", d.cifar10_dir());
  return absl::StrCat(model, " on synthetic(", d.synthetic().dims(), " dims, ",
                      d.synthetic().classes(), " classes)");
}

// "12.4s", "3m07s", "1h02m".
std::string Duration(double s) {
  if (s < 60) return absl::StrFormat("%.1fs", s);
  const int64_t whole = static_cast<int64_t>(s);
  if (whole < 3600) return absl::StrFormat("%dm%02ds", whole / 60, whole % 60);
  return absl::StrFormat("%dh%02dm", whole / 3600, whole % 3600 / 60);
}

// What the coordinator has not measured yet shows as "-", never as a 0 that
// reads as a measurement (see [not measured] in proto/coordinator.proto).
std::string LossText(const v1::JobProgress& p) {
  return p.has_loss() ? absl::StrFormat("%.4f", p.loss()) : "-";
}

// "20391 samples/s", "-", or once the job ended "20391 samples/s (run
// average)" (see [run average] in server/coordinator/views.h).
std::string RateText(const v1::JobStatus& j) {
  const auto& p = j.progress();
  if (!p.has_samples_per_sec()) return "- samples/s";
  return absl::StrFormat("%.0f samples/s%s", p.samples_per_sec(),
                         IsTerminal(j.state()) ? " (run average)" : "");
}

// "1.4 MiB (x16.0)", with `with_fp32` "1.4 MiB (fp32 22.8 MiB, x16.0)"; the
// ratio is "x-" before the first byte, the whole "-" before any report.
std::string BytesText(uint64_t bytes, uint64_t fp32, bool measured, bool with_fp32) {
  if (!measured) return "-";
  return absl::StrCat(HumanBytes(bytes), " (",
                      with_fp32 ? absl::StrCat("fp32 ", HumanBytes(fp32), ", ") : "",
                      bytes > 0 ? absl::StrFormat("x%.1f", static_cast<double>(fp32) / bytes)
                                : std::string("x-"),
                      ")");
}

// " (ETA 3m07s)" while the coordinator has one, else "".
std::string EtaText(const v1::JobProgress& p) {
  return p.has_eta_seconds() ? absl::StrCat(" (ETA ", Duration(p.eta_seconds()), ")") : "";
}

std::string ConsistencyText(const v1::ConsistencySpec& c) {
  std::string mode = v1::ConsistencyMode_Name(c.mode());
  if (c.mode() == v1::BOUNDED) absl::StrAppend(&mode, " (staleness ", c.staleness(), ")");
  return mode;
}

}  // namespace

std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string HumanBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrCat(bytes, " B") : absl::StrFormat("%.1f %s", v, units[u]);
}

std::string StateName(v1::JobState state) {
  return state == v1::JOB_STATE_UNSPECIFIED ? "?" : v1::JobState_Name(state);
}

namespace {
// "clock/steps", or the clock alone for a script job (its script decides).
std::string ClockText(uint64_t clock, const v1::JobSpec& spec) {
  return spec.entrypoint().empty() ? absl::StrCat(clock, "/", spec.steps()) : absl::StrCat(clock);
}
// "3/4", or for an elastic job (see [elastic jobs]) "3 of 1:4".
std::string WorkersText(const v1::JobStatus& j) {
  return j.min_workers() > 0 ? absl::StrCat(j.active_workers(), " of ", j.min_workers(), ":",
                                            j.desired_workers())
                             : absl::StrCat(j.active_workers(), "/", j.desired_workers());
}
}  // namespace

std::string RenderJobList(const v1::ListJobsResponse& jobs) {
  if (jobs.jobs().empty()) return "no jobs (submit one with `gradstream submit`)\n";
  std::vector<std::vector<std::string>> rows = {
      {"JOB", "NAME", "STATE", "CLOCK", "WORKERS", "LOSS", "ACCURACY", "MODEL"}};
  for (const auto& j : jobs.jobs()) {
    rows.push_back({j.job_id(), j.spec().name().empty() ? "-" : j.spec().name(),
                    StateName(j.state()), ClockText(j.progress().clock(), j.spec()),
                    WorkersText(j), LossText(j.progress()),
                    j.progress().accuracy_clock()
                        ? absl::StrFormat("%.1f%%", 100 * j.progress().accuracy())
                        : "-",
                    ModelText(j.spec())});
  }
  return Table(rows);
}

std::string Elapsed(const v1::JobStatus& j, int64_t now_ms) {
  if (j.started_unix_ms() <= 0) return "-";
  const int64_t end = j.finished_unix_ms() > 0 ? j.finished_unix_ms() : now_ms;
  return Duration(std::max<int64_t>(0, end - j.started_unix_ms()) / 1000.0);
}

// The codec each tensor travels with, grouped by codec, as the coordinator
// resolved the job's policy into the shard map ([layer-wise codec]), e.g.
// "twobit: fc1.weight (89% of elements); ternary: conv1.weight, ... (7, 11%)".
// Tensors grouped by the codec of their pushes, or of their pulls.
std::string TensorCodecs(const v1::ShardMap& map, bool pulls) {
  constexpr int kNamesShown = 4;
  struct Group {
    std::vector<std::string> names;
    uint64_t elems = 0;
  };
  std::map<std::string, Group> groups;
  uint64_t total = 0;
  for (const auto& t : map.tensors()) {
    if (t.table_rows() > 0) continue;  // rows travel fp32: see TablesText
    Group& g = groups[pulls ? (t.pull_codec().empty() ? "none" : t.pull_codec()) : t.codec()];
    g.names.push_back(t.name());
    g.elems += t.num_elems();
    total += t.num_elems();
  }
  std::vector<std::string> parts;
  for (auto& [codec, g] : groups) {
    const size_t n = g.names.size();
    if (n > kNamesShown) {
      g.names.resize(kNamesShown);
      g.names.push_back(absl::StrCat("+", n - kNamesShown, " more"));
    }
    parts.push_back(absl::StrFormat("%s: %s (%d tensor%s, %.0f%% of elements)", codec,
                                    absl::StrJoin(g.names, ", "), n, n == 1 ? "" : "s",
                                    total ? 100.0 * g.elems / total : 0.0));
  }
  return absl::StrJoin(parts, "; ");
}

namespace {

// The job's codec policy in one line, with how each codec's threshold or
// scale is set: that rule is part of what a tensor's codec does (see
// [default policy] in common/job/codec_defaults.h).
std::string CodecText(const v1::CodecPolicy& c) {
  const bool layer_wise =
      LayerWiseRuleApplies(c.default_codec(), c.twobit_min_elems(), c.min_compress_elems());
  // Pushes only: pulls take fixed options (PullCodecOptions in
  // common/codec/published.h), and the pull codec's name says the rest.
  auto used = [&](const char* codec) {
    bool any = c.default_codec() == codec || (layer_wise && std::string(codec) == "ternary");
    for (const auto& [name, o] : c.overrides()) any = any || o == codec;
    return any;
  };
  std::string out = c.default_codec();
  if (c.min_compress_elems() > 1 && c.default_codec() != "none") {
    absl::StrAppend(&out, " (fp32 below ", c.min_compress_elems(), " elements)");
  }
  if (layer_wise) absl::StrAppend(&out, " (ternary below ", c.twobit_min_elems(), " elements)");
  if (!c.overrides().empty()) absl::StrAppend(&out, " (+", c.overrides_size(), " overrides)");
  if (used("twobit")) {
    absl::StrAppend(&out, c.twobit_threshold() > 0
                              ? absl::StrCat(", twobit t = ", c.twobit_threshold())
                              : std::string(", twobit t = mean |g| per chunk"));
  }
  const bool per_chunk = used("ternary");
  const bool per_block = used("ternary512");
  if (per_chunk || per_block) {
    absl::StrAppend(&out, ", ternary scale per ",
                    per_chunk && per_block ? "chunk (ternary512: per 512 elements)"
                    : per_chunk            ? "chunk"
                                           : "512 elements",
                    c.ternary_clip() > 0 ? absl::StrCat(" (clip ", c.ternary_clip(), " sigma)")
                                         : "");
  }
  if (!c.pull_codec().empty() && c.pull_codec() != "none") {
    absl::StrAppend(&out, ", pulls ", c.pull_codec(),
                    c.pull_min_elems() > 1
                        ? absl::StrCat(" (fp32 below ", c.pull_min_elems(), " elements)")
                        : "");
  }
  if (c.link_choice() == "on") absl::StrAppend(&out, ", link choice on (probes fp32 sends)");
  return out;
}

// Per row-sparse table: its shape, the rows its partitions hold and their
// bytes, the rows pushed and pulled per clock (docs/design/sparse-tables.md).
std::string TablesText(const v1::JobStatus& j) {
  std::vector<std::string> parts;
  const uint64_t clock = std::max<uint64_t>(1, j.progress().clock());
  for (const auto& t : j.tables()) {
    std::string shape;
    for (const auto& info : j.shard_map().tensors()) {
      if (info.name() == t.tensor()) {
        // How the rows travel ([fp16 rows] in common/job/shard_map.cc).
        auto precision = [](const std::string& codec) { return codec == "fp16" ? "fp16" : "fp32"; };
        const std::string push = precision(info.codec()), pull = precision(info.pull_codec());
        shape = absl::StrCat(" ", info.table_rows(), " x ", info.table_dim(),
                             push == pull ? absl::StrCat(" (rows ", push, ")")
                                          : absl::StrCat(" (rows pushed ", push, ", pulled ",
                                                         pull, ")"));
        break;
      }
    }
    std::string lost;
    if (t.rows().lost() > 0) {
      lost = absl::StrFormat(
          "; the rows of %d partition(s) were LOST (a shard restarted without a checkpoint) and "
          "started again from the initializer",
          t.rows().lost());
    }
    parts.push_back(
        absl::StrFormat("%s%s: %d rows held (%s), %.0f rows pushed and %.0f pulled per clock%s",
                        t.tensor(), shape, t.rows().held(), HumanBytes(t.rows().bytes()),
                        static_cast<double>(t.rows().pushed()) / clock,
                        static_cast<double>(t.rows().pulled()) / clock, lost));
  }
  return absl::StrJoin(parts, "; ");
}

// The link choice's newest decisions ([link choice] in
// common/job/precision.h), a row each: every member's for its pushes, every
// shard's for its pulls.
std::vector<std::vector<std::string>> LinkRows(const v1::JobStatus& j) {
  auto row = [](std::string who, const char* path, const v1::LinkDecision& d) {
    return std::vector<std::string>{
        std::move(who), path,
        absl::StrCat(d.exact() ? "exact" : "the codecs", " from clock ", d.clock() + 1),
        absl::StrFormat("median step %.3g ms exact, %.3g ms with the codecs",
                        1e3 * d.exact_seconds(), 1e3 * d.codec_seconds())};
  };
  std::vector<std::vector<std::string>> rows;
  for (const auto& m : j.members()) {
    if (m.has_push_link()) rows.push_back(row(absl::StrCat("worker ", m.worker_id()), "push",
                                              m.push_link()));
  }
  for (const auto& l : j.pull_links()) {
    rows.push_back(row(absl::StrCat("shard ", l.shard()), "pull", l.decision()));
  }
  return rows;
}

// One path's error control over the job's tensors in one line: the largest
// error, the exact sends the bound asked for, the tensors raised, by level
// (common/job/precision.h).
std::string PrecisionText(const v1::JobStatus& j, bool pulls) {
  double worst = 0;
  uint64_t flushes = 0;
  int tensors = 0;
  // By level, fp32 last: {is fp32, level} -> tensors.
  std::map<std::pair<bool, std::string>, std::vector<std::string>> raised;
  for (const auto& t : j.precision()) {
    if (pulls ? !t.has_pull() : !t.has_push()) continue;
    const v1::PathPrecision& p = pulls ? t.pull() : t.push();
    ++tensors;
    worst = std::max(worst, p.ratio());
    flushes += p.flushes();
    if (p.raised()) raised[{p.codec() == "none", p.codec()}].push_back(t.tensor());
  }
  if (tensors == 0) return "";
  std::string out = absl::StrFormat("%s error <= %.2g clocks of %s over %d tensor%s",
                                    pulls ? "pull" : "push", worst,
                                    pulls ? "update" : "gradient", tensors,
                                    tensors == 1 ? "" : "s");
  const float job_bound = j.spec().codec().precision_bound();
  const double bound =
      pulls ? PullBound(job_bound, j.spec().codec().pull_precision_bound()) : job_bound;
  absl::StrAppend(&out, bound > 0 ? absl::StrFormat(" (bound %g)", bound) : " (measured only)");
  absl::StrAppend(&out, ", ", flushes, " exact send", flushes == 1 ? "" : "s");
  for (const auto& [level, tensors] : raised) {
    absl::StrAppend(&out, "; ", level.first ? "fp32" : level.second, ": ",
                    absl::StrJoin(tensors, ", "));
  }
  return out;
}

}  // namespace

std::string RenderJob(const v1::JobStatus& j, int64_t now_ms) {
  const auto& p = j.progress();
  const auto& s = j.spec();
  std::vector<std::vector<std::string>> head = {
      {"job", absl::StrCat(j.job_id(), s.name().empty() ? "" : absl::StrCat(" (", s.name(), ")"))},
      {"state", absl::StrCat(StateName(j.state()), j.message().empty() ? "" : ": " + j.message())},
      {"model", ModelText(s)},
      {"training", absl::StrCat(s.entrypoint().empty()
                                    ? absl::StrCat(s.steps(), " steps, batch ", s.batch_size())
                                    : std::string("steps and batches: the script's"),
                                ", ", s.optimizer().type(), " lr ", s.optimizer().learning_rate())},
      {"codec", CodecText(s.codec())},
      {"tensors", j.shard_map().tensors().empty() ? "-" : TensorCodecs(j.shard_map(), false)},
      {"consistency", ConsistencyText(s.consistency())},
      {"workers",
       j.min_workers() > 0
           ? absl::StrCat(WorkersText(j),
                          j.size_reason().empty() ? "" : absl::StrCat(", ", j.size_reason()),
                          "; epoch ", j.epochs_size(), " (committed ", j.committed_epoch(), ")")
           : absl::StrCat(j.active_workers(), " active / ", j.desired_workers(),
                          " desired, epoch ", j.epochs_size(), " (committed ",
                          j.committed_epoch(), ")")},
      {"clock",
       absl::StrCat(ClockText(p.clock(), s), " (fastest ", p.max_clock(), ")",
                    p.has_eta_seconds() ? absl::StrCat(", ETA ", Duration(p.eta_seconds())) : "")},
      {"loss", LossText(p)},
      {"accuracy", p.accuracy_clock() ? absl::StrFormat("%.2f%% at clock %d", 100 * p.accuracy(),
                                                        p.accuracy_clock())
                                      : "-"},
      {"throughput", RateText(j)},
      {"elapsed", absl::StrCat(Elapsed(j, now_ms), j.finished_unix_ms() > 0 ? "" : " (running)")},
      {"pushed", BytesText(p.bytes_pushed(), p.fp32_bytes_pushed(), p.has_bytes_pushed(), true)},
      {"pulled", absl::StrCat(BytesText(p.bytes_pulled(), p.fp32_bytes_pulled(),
                                        p.has_bytes_pulled(), true),
                              p.bytes_pulled_discarded() > 0
                                  ? absl::StrCat(", ", HumanBytes(p.bytes_pulled_discarded()),
                                                 " of it discarded (pulls given up)")
                                  : "")},
      {"staleness", absl::StrCat("max ", p.max_staleness())},
  };
  if (!s.codec().pull_codec().empty() && s.codec().pull_codec() != "none" &&
      !j.shard_map().tensors().empty()) {
    // Right under "tensors": the pull codec per tensor (see [layer-wise pull]).
    head.insert(head.begin() + 6, {"pulls", TensorCodecs(j.shard_map(), true)});
  }
  // What the shards say: the tables, a job whose clock stands still, and
  // checkpoints that cannot be written.
  if (std::string tables = TablesText(j); !tables.empty()) {
    head.push_back({"tables", std::move(tables)});
  }
  std::vector<std::vector<std::string>> link = LinkRows(j);
  if (j.spec().codec().link_choice() == "on") {
    head.push_back({"link choice", link.empty() ? "probing, no decision yet"
                                                : absl::StrCat(link.size(), " decisions (LINK)")});
  }
  for (bool pulls : {false, true}) {
    std::string text = PrecisionText(j, pulls);
    if (!text.empty()) head.push_back({pulls ? "pull error" : "push error", std::move(text)});
  }
  if (j.state() == v1::RUNNING && p.stalled_seconds() >= kStallShownSeconds) {
    head.push_back(
        {"stalled", absl::StrFormat("stalled for %.0f s (the shards' clock has not moved)",
                                    p.stalled_seconds())});
  }
  if (p.checkpoint_failures() > 0) {
    head.push_back({"checkpoints",
                    absl::StrCat(p.checkpoint_failures(), " failed",
                                 p.checkpoint_error().empty()
                                     ? " (the latest was written)"
                                     : absl::StrCat("; last: ", p.checkpoint_error()))});
  }
  std::string out;
  for (auto& row : head) row[0] += ":";
  out += Table(head);
  if (!j.members().empty()) {
    // A finished job's ranks show their run average (see [run average]).
    std::vector<std::vector<std::string>> rows = {
        {"RANK", "WORKER", "CLOCK", "LOSS", IsTerminal(j.state()) ? "AVG SAMPLES/S" : "SAMPLES/S",
         "ENCODE", "WAIT", "NOTE"}};
    for (const auto& m : j.members()) {
      std::string note = m.join_clock() ? absl::StrCat("joined at ", m.join_clock()) : "";
      if (m.leaving()) note = absl::StrCat("leaving at ", m.leave_clock());
      // Where the member encodes its gradients and the share of its step
      // that encoding and copying take ("-" before its first report).
      const std::string encode =
          m.encode_path().empty()
              ? "-"
              : absl::StrFormat("%s %.1f%%", m.encode_path(), 100 * m.encode_share());
      rows.push_back({m.leaving() ? "-" : absl::StrCat(m.rank()), absl::StrCat(m.worker_id()),
                      absl::StrCat(m.clock()),
                      m.has_loss() ? absl::StrFormat("%.4f", m.loss()) : "-",
                      m.has_samples_per_sec() ? absl::StrFormat("%.0f", m.samples_per_sec()) : "-",
                      encode,
                      // Its step's share spent waiting for the wire and the
                      // shards ("-" before its first report).
                      m.encode_path().empty() ? "-"
                                              : absl::StrFormat("%.0f%%", 100 * m.wait_share()),
                      note});
    }
    out += "\n" + Table(rows);
  }
  // Every precision decision, by clock: "blocks.0.linear1.weight  pull
  // ternary -> none at clock 112 (...)".
  std::vector<std::pair<uint64_t, std::vector<std::string>>> decisions;
  for (const auto& t : j.precision()) {
    for (bool pulls : {false, true}) {
      if (pulls ? !t.has_pull() : !t.has_push()) continue;
      for (const auto& e : (pulls ? t.pull() : t.push()).events()) {
        decisions.push_back(
            {e.clock(),
             {t.tensor(), pulls ? "pull" : "push",
              absl::StrCat(e.from(), " -> ", e.to(), " at clock ", e.clock()),
              e.warmup()   ? "warm-up over"
              : !e.raise() ? "error stayed under half the bound"
              : e.owed()
                  ? absl::StrFormat("owed %.2g clocks of descent on average", e.ratio())
                  : absl::StrFormat("error %.3g clocks, exact sends too close", e.ratio())}});
      }
    }
  }
  if (!decisions.empty()) {
    std::stable_sort(decisions.begin(), decisions.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::vector<std::string>> rows = {{"TENSOR", "PATH", "DECISION", "WHY"}};
    for (auto& d : decisions) rows.push_back(std::move(d.second));
    out += "\n" + Table(rows);
  }
  if (!link.empty()) {
    link.insert(link.begin(), {"LINK", "PATH", "DECISION", "WHY"});
    out += "\n" + Table(link);
  }
  if (!j.epochs().empty()) {
    std::vector<std::vector<std::string>> rows = {{"EPOCH", "FROM CLOCK", "WORKERS", "REASON"}};
    for (const auto& e : j.epochs()) {
      rows.push_back({absl::StrCat(e.epoch()), absl::StrCat(e.effective_clock()),
                      absl::StrJoin(e.worker_ids(), ","), e.reason()});
    }
    out += "\n" + Table(rows);
  }
  return out;
}

std::string RenderCluster(const v1::ClusterStatus& c, int64_t now_ms) {
  std::string out;
  std::vector<std::vector<std::string>> shards = {
      {"SHARD", "ADDRESS", "HEALTH", "JOBS", "LAST SEEN"}};
  for (const auto& s : c.shards()) {
    shards.push_back({absl::StrCat(s.shard_id()), s.address(), s.healthy() ? "ok" : "DOWN",
                      absl::StrCat(s.jobs()), Age(s.last_seen_unix_ms(), now_ms)});
  }
  out += c.shards().empty() ? "no shards registered\n" : Table(shards);
  for (const auto& s : c.shards()) {
    if (!s.healthy() && !s.message().empty()) {
      absl::StrAppend(&out, "  shard ", s.shard_id(), ": ", s.message(), "\n");
    }
  }
  out += "\n";
  std::vector<std::vector<std::string>> workers = {
      {"WORKER", "NAME", "HEALTH", "JOB", "RANK", "STATE", "CLOCK", "LAST HEARTBEAT"}};
  for (const auto& w : c.workers()) {
    std::string state =
        w.state() == v1::WORKER_STATE_UNSPECIFIED ? "-" : v1::WorkerState_Name(w.state());
    // A worker that said it is exiting (SIGTERM) is not a failure once gone.
    const char* health = w.healthy() ? (w.stopping() ? "stopping" : "ok")
                                     : (w.stopping() ? "stopped" : "DEAD");
    workers.push_back({absl::StrCat(w.worker_id(), ".", w.incarnation()),
                       w.name().empty() ? "-" : w.name(), health,
                       w.job_id().empty() ? "-" : w.job_id(),
                       w.job_id().empty() ? "-" : absl::StrCat(w.rank()), state,
                       absl::StrCat(w.clock()), Age(w.last_heartbeat_unix_ms(), now_ms)});
  }
  out += c.workers().empty() ? "no workers registered\n" : Table(workers);
  return out;
}

std::string ProgressLine(const v1::JobStatus& j, int width) {
  const auto& p = j.progress();
  const uint64_t steps = std::max<uint64_t>(1, j.spec().steps());
  const double frac = std::min(1.0, static_cast<double>(p.clock()) / steps);
  std::string bar;
  if (width > 0 && j.spec().entrypoint().empty()) {
    const int done = static_cast<int>(frac * width);
    bar = absl::StrCat("[", std::string(done, '#'), std::string(width - done, '.'), "] ",
                       absl::StrFormat("%3.0f%% ", 100 * frac));
  }
  return absl::StrCat(
      bar, "clock ", ClockText(p.clock(), j.spec()), EtaText(p), " | loss ", LossText(p), " | acc ",
      p.accuracy_clock() ? absl::StrFormat("%.1f%%", 100 * p.accuracy()) : "-", " | ", RateText(j),
      " | pushed ", BytesText(p.bytes_pushed(), p.fp32_bytes_pushed(), p.has_bytes_pushed(), false),
      // Shown once a worker reported pulls (older workers do not).
      p.bytes_pulled() > 0
          ? absl::StrCat(" | pulled ",
                         BytesText(p.bytes_pulled(), p.fp32_bytes_pulled(), true, false))
          : "",
      " | staleness ", p.max_staleness(), " | workers ", WorkersText(j), " | ",
      StateName(j.state()),
      j.state() == v1::RUNNING && p.stalled_seconds() >= kStallShownSeconds
          ? absl::StrFormat(" | stalled for %.0f s", p.stalled_seconds())
          : "");
}

std::string HealthJson(const std::string& address, const std::string& status) {
  const nlohmann::ordered_json out = {{"address", address}, {"status", status}};
  return out.dump(/*indent=*/-1, ' ', /*ensure_ascii=*/false,
                  nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace gradstream::cli
