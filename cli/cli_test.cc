// Unit tests of the CLI's parsing and rendering; the binary itself is tested
// against a live coordinator in tests/control/cli_test.cc.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "cli/args.h"
#include "cli/plot.h"
#include "cli/render.h"
#include "cli/spec_input.h"
#include "common/job/codec_defaults.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gradstream::cli {
namespace {

TEST(HealthJson, QuotesBackslashesAndControlCharactersParseBack) {
  const std::string address = std::string("we\"ird\\host\n\t\x01\x1f\x7f:70") + '\0' + "70";
  const std::string line = HealthJson(address, "SERVING");
  EXPECT_EQ(line.find('\n'), std::string::npos) << "one line: " << line;
  EXPECT_NE(line.find("\\u0001"), std::string::npos) << line;
  const nlohmann::json back = nlohmann::json::parse(line);
  EXPECT_EQ(back.at("address").get<std::string>(), address);
  EXPECT_EQ(back.at("status").get<std::string>(), "SERVING");
  EXPECT_EQ(back.size(), 2u);
}

TEST(HealthJson, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  // nlohmann would throw on them by default; the CLI must print, not abort.
  const std::string line = HealthJson("host\xff\xfe:1", "NOT_SERVING");
  const nlohmann::json back = nlohmann::json::parse(line);
  EXPECT_EQ(back.at("address").get<std::string>(), "host\xEF\xBF\xBD\xEF\xBF\xBD:1");
  EXPECT_EQ(back.at("status").get<std::string>(), "NOT_SERVING");
}

TEST(Args, FlagsAnywhereAndPositionalsInOrder) {
  auto a = Args::Parse({"scale", "--workers", "4", "job-1", "--json", "--timeout=2s"}, {"json"});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->positional(), (std::vector<std::string>{"scale", "job-1"}));
  EXPECT_EQ(*a->Get("workers"), "4");
  EXPECT_TRUE(a->Bool("json"));
  EXPECT_EQ(**a->GetDuration("timeout"), absl::Seconds(2));
  EXPECT_TRUE(a->CheckKnown({"workers", "json", "timeout"}).ok());
  EXPECT_FALSE(a->CheckKnown({"json"}).ok());
}

TEST(Args, Errors) {
  EXPECT_FALSE(Args::Parse({"scale", "--workers"}, {}).ok());
  EXPECT_FALSE(Args::Parse({"--a=1", "--a=2"}, {}).ok());
  auto a = Args::Parse({"--workers=many"}, {});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->GetUint("workers").status().message(),
            "--workers: want a non-negative integer, got 'many'");
}

// Writes `text` to a file removed when the test binary exits.
std::string WriteTemp(const std::string& name, const std::string& text) {
  static std::vector<std::string>* const kFiles = [] {
    auto* files = new std::vector<std::string>();
    std::atexit([] {
      for (const auto& f : *kFiles) std::remove(f.c_str());
    });
    return files;
  }();
  const std::string path = "/tmp/" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path) << text;
  kFiles->push_back(path);
  return path;
}

TEST(SpecInput, JsonAndTextFormat) {
  auto json = LoadSpecFile(WriteTemp("spec.json", R"({"name": "j", "steps": 50,
      "optimizer": {"type": "adagrad", "learningRate": 0.1},
      "consistency": {"mode": "BOUNDED", "staleness": 3}})"));
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->steps(), 50u);
  EXPECT_EQ(json->optimizer().type(), "adagrad");
  EXPECT_EQ(json->consistency().mode(), gradstream::v1::BOUNDED);
  auto text = LoadSpecFile(WriteTemp("spec.txtpb", "name: 't'\nmodel { type: 'softmax' }\n"));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->model().type(), "softmax");
}

TEST(SpecInput, MalformedFilesSayWhere) {
  auto bad = LoadSpecFile(WriteTemp("bad.txtpb", "name: 't'\nstepz: 4\n"));
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "line 2")) << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "stepz")) << bad.status();
  auto bad_json = LoadSpecFile(WriteTemp("bad.json", R"({"stepz": 4})"));
  EXPECT_EQ(bad_json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadSpecFile("/nonexistent/spec.json").status().code(), absl::StatusCode::kNotFound);
}

TEST(SpecInput, FlagsOverride) {
  auto a = Args::Parse(
      {"submit", "--workers=4", "--hidden=128,64", "--consistency=bounded", "--staleness=2",
       "--dataset=mnist:/data", "--lr=0.5", "--codec_override=fc1.b=none",
       "--pull_precision_bound=2"},
      {});
  ASSERT_TRUE(a.ok());
  gradstream::v1::JobSpec spec;
  spec.set_workers(2);
  ASSERT_TRUE(ApplySpecFlags(*a, &spec).ok());
  EXPECT_EQ(spec.workers(), 4u);
  EXPECT_EQ(spec.model().hidden_size(), 2);
  EXPECT_EQ(spec.consistency().mode(), gradstream::v1::BOUNDED);
  EXPECT_EQ(spec.consistency().staleness(), 2u);
  EXPECT_EQ(spec.dataset().mnist_dir(), "/data");
  EXPECT_FLOAT_EQ(spec.optimizer().learning_rate(), 0.5f);
  EXPECT_EQ(spec.codec().overrides().at("fc1.b"), "none");
  EXPECT_FLOAT_EQ(spec.codec().pull_precision_bound(), 2.0f);
  auto bad = Args::Parse({"submit", "--consistency=eventual"}, {});
  EXPECT_EQ(ApplySpecFlags(*bad, &spec).message(),
            "--consistency: unknown 'eventual' (want sync|bounded|async)");
}

TEST(SpecInput, WorkerRanges) {
  auto range = ParseWorkerRange("1:4");
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(range->min, 1u);
  EXPECT_EQ(range->max, 4u);
  range = ParseWorkerRange("3");
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(range->min, 0u);  // a plain count is not elastic
  EXPECT_EQ(range->max, 3u);
  EXPECT_EQ(ParseWorkerRange("0:0").status().message(),
            "--workers: MIN must be at least 1, got '0:0'");
  EXPECT_EQ(ParseWorkerRange("5:2").status().message(),
            "--workers: MIN must not be above MAX, got '5:2'");
  EXPECT_EQ(ParseWorkerRange("1:1000000").status().message(),
            "--workers: at most 4096 workers, got '1:1000000'");
  EXPECT_EQ(ParseWorkerRange("0").status().message(),
            "--workers: want at least 1 worker (`gradstream cancel` stops a job), got '0'");
  for (const char* bad : {"", "a:4", "1:", ":4", "1:2:3", "-1:4", "1:99999999999999999999"}) {
    EXPECT_FALSE(ParseWorkerRange(bad).ok()) << bad;
  }
  auto a = Args::Parse({"submit", "--workers=2:6", "--min_workers_timeout=90s"}, {});
  ASSERT_TRUE(a.ok());
  gradstream::v1::JobSpec spec;
  ASSERT_TRUE(ApplySpecFlags(*a, &spec).ok());
  EXPECT_EQ(spec.workers_min(), 2u);
  EXPECT_EQ(spec.workers(), 6u);
  EXPECT_EQ(spec.min_workers_timeout_s(), 90u);
  a = Args::Parse({"submit", "--min_workers_timeout=0s"}, {});
  EXPECT_EQ(ApplySpecFlags(*a, &spec).message(),
            "--min_workers_timeout: want 1s to 168h, got 0");
}

TEST(Render, TableAlignsColumns) {
  EXPECT_EQ(Table({{"A", "BB"}, {"ccc", "d"}}), "A    BB\nccc  d\n");
  EXPECT_EQ(HumanBytes(512), "512 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
}

TEST(Render, AWorkerThatSaidItIsStoppingIsNotShownDead) {
  gradstream::v1::ClusterStatus c;
  auto add = [&](uint64_t id, bool healthy, bool stopping) {
    gradstream::v1::WorkerStatus* w = c.add_workers();
    w->set_worker_id(id);
    w->set_healthy(healthy);
    w->set_stopping(stopping);
  };
  add(1, true, false);
  add(2, true, true);
  add(3, false, true);
  add(4, false, false);
  const std::string out = RenderCluster(c, 0);
  auto health = [&](const std::string& worker) {
    for (absl::string_view line : absl::StrSplit(out, '\n')) {
      std::vector<absl::string_view> cells = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (cells.size() > 2 && cells[0] == worker) return std::string(cells[2]);
    }
    return std::string("(no row)");
  };
  EXPECT_EQ(health("1.0"), "ok") << out;
  EXPECT_EQ(health("2.0"), "stopping") << out;
  EXPECT_EQ(health("3.0"), "stopped") << out;
  EXPECT_EQ(health("4.0"), "DEAD") << out;
}

// A running job of 100 steps with 3 of 4 workers.
gradstream::v1::JobStatus RunningJob() {
  gradstream::v1::JobStatus j;
  j.mutable_spec()->set_steps(100);
  j.set_state(gradstream::v1::RUNNING);
  j.set_active_workers(3);
  j.set_desired_workers(4);
  return j;
}

TEST(Render, ProgressLineHasEveryField) {
  gradstream::v1::JobStatus j = RunningJob();
  auto* p = j.mutable_progress();
  p->set_clock(50);
  p->set_loss(0.25f);
  p->set_accuracy(0.9f);
  p->set_accuracy_clock(40);
  p->set_samples_per_sec(1234);
  p->set_bytes_pushed(2048);
  p->set_fp32_bytes_pushed(32563);
  p->set_compression_ratio(15.9);
  p->set_max_staleness(2);
  p->set_eta_seconds(187.4);
  EXPECT_EQ(ProgressLine(j, 10),
            "[#####.....]  50% clock 50/100 (ETA 3m07s) | loss 0.2500 | acc 90.0% | "
            "1234 samples/s | pushed 2.0 KiB (x15.9) | staleness 2 | workers 3/4 | RUNNING");
  EXPECT_TRUE(absl::StrContains(RenderJob(j, 0), "clock:        50/100 (fastest 0), ETA 3m07s\n"))
      << RenderJob(j, 0);
}

// An elastic job shows its range and why it has its size (see [elastic jobs]).
TEST(Render, AnElasticJobShowsItsRangeAndWhy) {
  gradstream::v1::JobStatus j = RunningJob();
  j.set_min_workers(1);
  j.set_size_reason("grew: worker 3 idle");
  EXPECT_TRUE(absl::StrContains(ProgressLine(j, 0), "| workers 3 of 1:4 |")) << ProgressLine(j, 0);
  EXPECT_TRUE(absl::StrContains(RenderJob(j, 0), "workers:      3 of 1:4, grew: worker 3 idle; "))
      << RenderJob(j, 0);
  gradstream::v1::ListJobsResponse list;
  *list.add_jobs() = j;
  EXPECT_TRUE(absl::StrContains(RenderJobList(list), "3 of 1:4")) << RenderJobList(list);
}

// Before the first report nothing reads as measured (see
// [not measured]): loss, rate, bytes and ratio are "-", in watch, status and
// the per-rank table; bytes reported before the first push have no ratio.
TEST(Render, WhatIsNotMeasuredShowsADash) {
  gradstream::v1::JobStatus j;
  j.mutable_spec()->set_steps(100);
  j.set_state(gradstream::v1::RUNNING);
  j.add_members()->set_worker_id(7);
  EXPECT_EQ(ProgressLine(j, 0),
            "clock 0/100 | loss - | acc - | - samples/s | pushed - | staleness 0 | workers 0/0 | "
            "RUNNING");
  const std::string out = RenderJob(j, 0);
  EXPECT_TRUE(absl::StrContains(out, "loss:         -\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "throughput:   - samples/s\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "pushed:       -\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "pulled:       -\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "0     7       0      -     -          -")) << out;
  gradstream::v1::ListJobsResponse list;
  *list.add_jobs() = j;
  EXPECT_TRUE(absl::StrContains(RenderJobList(list), "0/100  0/0      -     "))
      << RenderJobList(list);
  j.mutable_progress()->set_bytes_pushed(0);
  j.mutable_progress()->set_loss(0);
  EXPECT_TRUE(
      absl::StrContains(ProgressLine(j, 0), "loss 0.0000 | acc - | - samples/s | pushed 0 B (x-)"))
      << ProgressLine(j, 0);
}

// A finished job shows its run's average throughput, per job and
// per rank, and says so (see [run average]).
TEST(Render, AFinishedJobShowsItsRunAverage) {
  gradstream::v1::JobStatus j;
  j.mutable_spec()->set_steps(100);
  j.set_state(gradstream::v1::COMPLETED);
  j.mutable_progress()->set_clock(100);
  j.mutable_progress()->set_samples_per_sec(13012.4f);
  auto* m = j.add_members();
  m->set_worker_id(7);
  m->set_clock(100);
  m->set_loss(0.5f);
  m->set_samples_per_sec(6506.2f);
  EXPECT_TRUE(absl::StrContains(ProgressLine(j, 0), "| 13012 samples/s (run average) |"))
      << ProgressLine(j, 0);
  const std::string out = RenderJob(j, 0);
  EXPECT_TRUE(absl::StrContains(out, "throughput:   13012 samples/s (run average)\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "AVG SAMPLES/S")) << out;
  EXPECT_TRUE(absl::StrContains(out, "0     7       100    0.5000  6506 ")) << out;
}

// A table whose partition lost its rows at a shard restart says so on its
// line; one that did not says nothing of it (docs/design/sparse-tables.md).
TEST(Render, ATableSaysWhenAPartitionLostItsRows) {
  gradstream::v1::JobStatus j = RunningJob();
  auto* t = j.add_tables();
  t->set_tensor("emb.table");
  t->mutable_rows()->set_held(40);
  t->mutable_rows()->set_bytes(1280);
  std::string out = RenderJob(j, 0);
  EXPECT_TRUE(absl::StrContains(out, "emb.table: 40 rows held (")) << out;
  EXPECT_FALSE(absl::StrContains(out, "LOST")) << out;
  // How its rows travel, from the shard map ([fp16 rows]).
  auto* info = j.mutable_shard_map()->add_tensors();
  info->set_name("emb.table");
  info->set_table_rows(1000);
  info->set_table_dim(4);
  info->set_codec("fp16");
  info->set_pull_codec("fp16");
  out = RenderJob(j, 0);
  EXPECT_TRUE(absl::StrContains(out, "emb.table 1000 x 4 (rows fp16): 40 rows held (")) << out;
  info->set_pull_codec("none");
  out = RenderJob(j, 0);
  EXPECT_TRUE(absl::StrContains(out, "emb.table 1000 x 4 (rows pushed fp16, pulled fp32): 40"))
      << out;
  t->mutable_rows()->set_lost(1);
  out = RenderJob(j, 0);
  EXPECT_TRUE(absl::StrContains(out, "; the rows of 1 partition(s) were LOST (a shard restarted "
                                     "without a checkpoint) and started again from the "
                                     "initializer"))
      << out;
}

// The push error line names the tensors raised above their codec by level;
// a tensor whose codec is fp16 itself is not raised (common/job/precision.h).
TEST(Render, ThePushErrorLineNamesRaisedTensorsByLevel) {
  gradstream::v1::JobStatus j = RunningJob();
  j.mutable_spec()->mutable_codec()->set_precision_bound(8);
  auto add = [&](const char* tensor, const char* codec, bool raised) {
    auto* t = j.add_precision();
    t->set_tensor(tensor);
    t->mutable_push()->set_codec(codec);
    t->mutable_push()->set_raised(raised);
    t->mutable_push()->set_ratio(1.5);
  };
  add("a", "fp16", true);
  add("b", "none", true);
  add("c", "ternary", false);
  add("d", "fp16", false);  // configured fp16, not raised
  const std::string out = RenderJob(j, 0);
  EXPECT_TRUE(absl::StrContains(out, "over 4 tensors (bound 8), 0 exact sends; fp16: a; fp32: b\n"))
      << out;
}

// The pull error line states the pulls' own bound when the job sets one, else
// half the job's.
TEST(Render, ThePullErrorLineStatesThePullBound) {
  gradstream::v1::JobStatus j = RunningJob();
  j.mutable_spec()->mutable_codec()->set_precision_bound(8);
  auto* t = j.add_precision();
  t->set_tensor("blocks.0.attn.in_proj_weight");
  t->mutable_pull()->set_codec("ternary");
  t->mutable_pull()->set_ratio(1.5);
  EXPECT_TRUE(absl::StrContains(RenderJob(j, 0), "over 1 tensor (bound 4)")) << RenderJob(j, 0);
  j.mutable_spec()->mutable_codec()->set_pull_precision_bound(2);
  EXPECT_TRUE(absl::StrContains(RenderJob(j, 0), "over 1 tensor (bound 2)")) << RenderJob(j, 0);
}

// Each decision says why: an error past the bound too often, owed descent
// ([owed descent] in common/job/precision.h), or the warm-up's end.
TEST(Render, DecisionsSayWhyTheyRaised) {
  gradstream::v1::JobStatus j = RunningJob();
  auto* t = j.add_precision();
  t->set_tensor("fc1.weight");
  t->mutable_push()->set_codec("int8");
  t->mutable_push()->set_raised(true);
  auto* e = t->mutable_push()->add_events();
  e->set_raise(true);
  e->set_clock(24);
  e->set_from("onebit");
  e->set_to("int8");
  e->set_ratio(0.62);
  e->set_owed(true);
  auto* p = j.add_precision();
  p->set_tensor("fc2.weight");
  auto* f = p->mutable_pull()->add_events();
  f->set_raise(true);
  f->set_clock(30);
  f->set_from("ternary");
  f->set_to("int8");
  f->set_ratio(4.5);
  auto* w = p->mutable_pull()->add_events();
  w->set_clock(20);
  w->set_from("none");
  w->set_to("ternary");
  w->set_warmup(true);
  const std::string out = RenderJob(j, 0);
  EXPECT_TRUE(absl::StrContains(out, "onebit -> int8 at clock 24   owed 0.62 clocks of descent"))
      << out;
  EXPECT_TRUE(absl::StrContains(out, "ternary -> int8 at clock 30  error 4.5 clocks, exact sends"))
      << out;
  EXPECT_TRUE(absl::StrContains(out, "none -> ternary at clock 20  warm-up over")) << out;
}

TEST(Render, ProgressLineShowsPullsOnceReported) {
  gradstream::v1::JobStatus j;
  j.mutable_spec()->set_steps(100);
  j.set_state(gradstream::v1::RUNNING);
  auto* p = j.mutable_progress();
  p->set_bytes_pushed(2048);
  p->set_fp32_bytes_pushed(32768);
  p->set_compression_ratio(16);
  p->set_bytes_pulled(4096);
  p->set_fp32_bytes_pulled(40960);
  EXPECT_NE(ProgressLine(j, 0).find("pushed 2.0 KiB (x16.0) | pulled 4.0 KiB (x10.0) | staleness"),
            std::string::npos)
      << ProgressLine(j, 0);
}


v1::JobStatus JobWithHistory(const std::string& id, const std::string& codec, int points) {
  v1::JobStatus job;
  job.set_job_id(id);
  job.mutable_spec()->mutable_codec()->set_default_codec(codec);
  job.mutable_spec()->set_eval_every(100);
  for (int i = 0; i < points; ++i) {
    v1::ProgressPoint* p = job.add_history();
    p->set_clock(100 * (i + 1));
    p->set_accuracy(0.5f + 0.1f * i);
    p->set_loss(1.0f / (i + 1));
    p->set_bytes_pushed(uint64_t{1} << (20 + i));
  }
  return job;
}

TEST(Render, ElapsedOfRunningAndFinishedJobs) {
  v1::JobStatus job;
  EXPECT_EQ(Elapsed(job, 5000), "-");
  job.set_started_unix_ms(1000);
  EXPECT_EQ(Elapsed(job, 13400), "12.4s");
  job.set_finished_unix_ms(1000 + 187000);
  EXPECT_EQ(Elapsed(job, 999999999), "3m07s");
  EXPECT_TRUE(absl::StrContains(RenderJob(job, 0), "elapsed:      3m07s\n"));
}

TEST(Plot, ScriptHasOneDataBlockAndOneLinePerJobInEveryPanel) {
  auto script = PlotScript({JobWithHistory("job-000001", "none", 3),
                            JobWithHistory("job-000002", "twobit", 2)},
                           "/tmp/out.png");
  ASSERT_TRUE(script.ok()) << script.status();
  EXPECT_TRUE(absl::StrContains(*script, "$job0 << EOD\n100 1.000000 50.0000 1.000000\n"))
      << *script;
  EXPECT_TRUE(absl::StrContains(*script, "$job1 << EOD\n"));
  EXPECT_TRUE(absl::StrContains(*script, "set output \"/tmp/out.png\""));
  size_t plots = 0;
  for (size_t at = script->find("\nplot "); at != std::string::npos;
       at = script->find("\nplot ", at + 1)) {
    ++plots;
  }
  EXPECT_EQ(plots, 4u);  // accuracy and loss, against clock and against bytes
  EXPECT_TRUE(absl::StrContains(*script, "title \"job-000002 (twobit, SYNC)\""));
}

TEST(Plot, AJobWithoutHistoryIsNamed) {
  auto script = PlotScript({JobWithHistory("job-000001", "none", 2),
                            JobWithHistory("job-000007", "none", 0)},
                           "x.png");
  EXPECT_EQ(script.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(script.status().message(), "job-000007 has no progress history"));
  EXPECT_FALSE(PlotScript({}, "x.png").ok());
}

TEST(Plot, GnuplotDrawsAPng) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "gnuplot is not installed (apt-get install gnuplot-nox)";
  }
  char dir[] = "/tmp/plot_test.XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string png = std::string(dir) + "/curves.png";
  auto script = PlotScript({JobWithHistory("job-000001", "none", 4)}, png);
  ASSERT_TRUE(script.ok());
  ASSERT_TRUE(RunGnuplot(*script).ok());
  std::ifstream in(png, std::ios::binary);
  std::string magic(8, '\0');
  in.read(magic.data(), 8);
  EXPECT_EQ(magic, std::string("\x89PNG\r\n\x1a\n", 8));
  std::remove(png.c_str());
  ::rmdir(dir);
}

TEST(Render, MembersShowWhereTheyEncodeAndHowLongTheyWait) {
  gradstream::v1::JobStatus j;
  auto* gpu = j.add_members();
  gpu->set_worker_id(7);
  gpu->set_encode_path("device");
  gpu->set_encode_share(0.031f);
  gpu->set_wait_share(0.62f);
  j.add_members()->set_worker_id(8);  // no report yet
  const std::string out = RenderJob(j, 0);
  EXPECT_TRUE(absl::StrContains(out, "ENCODE       WAIT")) << out;
  EXPECT_TRUE(absl::StrContains(out, "device 3.1%  62%")) << out;
  EXPECT_TRUE(absl::StrContains(out, "0     8       0      -     -          -            -"))
      << out;
}

// Pull answers a worker threw away (a pull it gave up on; see [step loop])
// are shown beside what was pulled.
TEST(Render, StatusShowsDiscardedPullBytes) {
  gradstream::v1::JobStatus j;
  j.set_state(gradstream::v1::RUNNING);
  j.mutable_progress()->set_bytes_pulled(8192);
  j.mutable_progress()->set_fp32_bytes_pulled(8192);
  EXPECT_TRUE(absl::StrContains(RenderJob(j, 0), "pulled:       8.0 KiB (fp32 8.0 KiB, x1.0)\n"))
      << RenderJob(j, 0);
  j.mutable_progress()->set_bytes_pulled_discarded(2048);
  EXPECT_TRUE(absl::StrContains(RenderJob(j, 0),
                                "pulled:       8.0 KiB (fp32 8.0 KiB, x1.0), 2.0 KiB of it "
                                "discarded (pulls given up)\n"))
      << RenderJob(j, 0);
}

// The defaults' policy ([default policy]) in status: the push codec with how
// its scale is set, and the pull codec with its size rule.
TEST(Render, StatusShowsTheDefaultPolicyAndItsRules) {
  gradstream::v1::JobStatus j;
  auto* codec = j.mutable_spec()->mutable_codec();  // as ApplyJobDefaults fills it
  codec->set_default_codec(gradstream::kDefaultPushCodec);
  codec->set_twobit_threshold(gradstream::kDefaultTwobitThreshold);
  codec->set_ternary_clip(gradstream::kDefaultTernaryClip);
  codec->set_twobit_min_elems(gradstream::kDefaultTwobitMinElems);
  codec->set_pull_codec(gradstream::kDefaultPullCodec);
  codec->set_pull_min_elems(gradstream::kDefaultPullMinElems);
  codec->set_min_compress_elems(gradstream::kDefaultMinCompressElems);
  const std::string out = RenderJob(j, 0);
  EXPECT_TRUE(absl::StrContains(
      out, absl::StrCat(gradstream::kDefaultPushCodec, " (fp32 below ",
                        gradstream::kDefaultMinCompressElems,
                        " elements), ternary scale per 512 elements (clip ",
                        gradstream::kDefaultTernaryClip, " sigma), pulls ",
                        gradstream::kDefaultPullCodec, " (fp32 below ",
                        gradstream::kDefaultPullMinElems, " elements)")))
      << out;
  codec->set_default_codec("twobit");
  EXPECT_TRUE(absl::StrContains(RenderJob(j, 0),
                                absl::StrCat("twobit t = ", gradstream::kDefaultTwobitThreshold)))
      << RenderJob(j, 0);
  // The push's threshold and clip are not the pulls' (PullCodecOptions).
  codec->set_default_codec("none");
  for (const char* pull : {"ternary", "ternary512", "twobit"}) {
    codec->set_pull_codec(pull);
    const std::string out = RenderJob(j, 0);
    EXPECT_TRUE(absl::StrContains(out, absl::StrCat("codec:        none, pulls ", pull))) << out;
  }
}

TEST(Render, StatusShowsTheCodecOfEveryTensor) {
  gradstream::v1::JobStatus j;
  j.mutable_spec()->mutable_codec()->set_default_codec("twobit");
  j.mutable_spec()->mutable_codec()->set_twobit_min_elems(16384);
  auto add = [&](const char* name, uint64_t elems, const char* codec) {
    auto* t = j.mutable_shard_map()->add_tensors();
    t->set_name(name);
    t->set_num_elems(elems);
    t->set_codec(codec);
  };
  add("conv1.weight", 150, "ternary");
  add("fc1.weight", 30720, "twobit");
  add("fc2.weight", 1200, "ternary");
  add("fc2.bias", 10, "ternary");
  add("conv1.bias", 6, "ternary");
  add("conv2.bias", 16, "ternary");
  const std::string out = RenderJob(j, 0);
  EXPECT_TRUE(absl::StrContains(out, "twobit (ternary below 16384 elements)")) << out;
  EXPECT_TRUE(absl::StrContains(out, "twobit: fc1.weight (1 tensor, 96% of elements)")) << out;
  EXPECT_TRUE(absl::StrContains(
      out, "ternary: conv1.weight, fc2.weight, fc2.bias, conv1.bias, +1 more (5 tensors, 4%"))
      << out;
  // Under [small tensors exact] no tensor is ternary: the rule goes unsaid.
  j.mutable_spec()->mutable_codec()->set_min_compress_elems(16384);
  const std::string exact = RenderJob(j, 0);
  EXPECT_TRUE(absl::StrContains(exact, "codec:        twobit (fp32 below 16384 elements), "))
      << exact;
  EXPECT_FALSE(absl::StrContains(exact, "ternary below")) << exact;
  // onebit has the layer-wise rule too.
  j.mutable_spec()->mutable_codec()->set_default_codec("onebit");
  j.mutable_spec()->mutable_codec()->set_min_compress_elems(1);
  const std::string onebit = RenderJob(j, 0);
  EXPECT_TRUE(absl::StrContains(onebit, "onebit (ternary below 16384 elements)")) << onebit;
}

// [link choice]: each member's and each shard's newest decision, once made.
TEST(Render, StatusShowsTheLinkChoicesDecisions) {
  gradstream::v1::JobStatus j;
  EXPECT_FALSE(absl::StrContains(RenderJob(j, 0), "link choice:")) << "link choice off";
  j.mutable_spec()->mutable_codec()->set_link_choice("on");
  EXPECT_TRUE(absl::StrContains(RenderJob(j, 0), "link choice:  probing, no decision yet"))
      << RenderJob(j, 0);
  auto* m = j.add_members();
  m->set_worker_id(3);
  m->mutable_push_link()->set_clock(43);
  m->mutable_push_link()->set_exact(true);
  m->mutable_push_link()->set_exact_seconds(0.041);
  m->mutable_push_link()->set_codec_seconds(0.055);
  j.add_members()->set_worker_id(4);  // no decision reported yet
  auto* l = j.add_pull_links();
  l->set_shard(1);
  l->mutable_decision()->set_clock(43);
  l->mutable_decision()->set_exact_seconds(0.09);
  l->mutable_decision()->set_codec_seconds(0.055);
  const std::string out = RenderJob(j, 0);
  EXPECT_TRUE(absl::StrContains(out, "link choice:  2 decisions (LINK)")) << out;
  EXPECT_TRUE(absl::StrContains(out, "LINK      PATH  DECISION                  WHY\n"
                                     "worker 3  push  exact from clock 44       median step 41 ms "
                                     "exact, 55 ms with the codecs\n"
                                     "shard 1   pull  the codecs from clock 44  median step 90 ms "
                                     "exact, 55 ms with the codecs"))
      << out;
  EXPECT_FALSE(absl::StrContains(out, "worker 4")) << out;
}

// A stall and failed checkpoints are visible in status and watch.
TEST(Render, AStallAndFailedCheckpointsShow) {
  gradstream::v1::JobStatus j;
  j.set_state(gradstream::v1::RUNNING);
  j.mutable_progress()->set_stalled_seconds(61.2);
  j.mutable_progress()->set_checkpoint_failures(3);
  j.mutable_progress()->set_checkpoint_error("RESOURCE_EXHAUSTED: disk full");
  const std::string out = RenderJob(j, 0);
  EXPECT_TRUE(absl::StrContains(out, "stalled:      stalled for 61 s")) << out;
  EXPECT_TRUE(absl::StrContains(out, "3 failed; last: RESOURCE_EXHAUSTED: disk full")) << out;
  EXPECT_TRUE(absl::StrContains(ProgressLine(j, 0), "| stalled for 61 s"));
  j.mutable_progress()->set_stalled_seconds(0.3);  // a tick between two clocks
  EXPECT_FALSE(absl::StrContains(RenderJob(j, 0), "stalled"));
}

}  // namespace
}  // namespace gradstream::cli
