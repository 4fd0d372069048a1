// See plot.h.
#include "cli/plot.h"

#include <sys/wait.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "common/job/codec_policy.h"

namespace gradstream::cli {

namespace v1 = gradstream::v1;

namespace {

// A title gnuplot prints as is: no quotes, no enhanced-text markup.
std::string Title(const v1::JobStatus& job) {
  const v1::JobSpec& s = job.spec();
  std::string mode = v1::ConsistencyMode_Name(s.consistency().mode());
  if (s.consistency().mode() == v1::BOUNDED) {
    absl::StrAppend(&mode, " s=", s.consistency().staleness());
  }
  const v1::CodecPolicy& policy = s.codec();
  std::string codec = policy.default_codec();
  if (policy.default_codec() == "twobit" && policy.twobit_threshold() < 0) {
    absl::StrAppend(&codec, " adaptive t");
  }
  // The default layer-wise rule goes unsaid; its absence or another size not.
  const bool layer_wise = LayerWiseRuleApplies(
      policy.default_codec(), policy.twobit_min_elems(), policy.min_compress_elems());
  if (LayerWiseCodec(policy.default_codec()) && policy.twobit_min_elems() == 1 &&
      policy.min_compress_elems() <= 1) {
    absl::StrAppend(&codec, " on every tensor");
  } else if (layer_wise && policy.twobit_min_elems() != kDefaultTwobitMinElems) {
    absl::StrAppend(&codec, ", ternary below ", policy.twobit_min_elems());
  }
  if (policy.disable_error_feedback()) absl::StrAppend(&codec, " no EF");
  if (policy.min_compress_elems() > 0) {
    absl::StrAppend(&codec, ", fp32 below ", policy.min_compress_elems());
  }
  if (!policy.overrides().empty()) {
    absl::StrAppend(&codec, ", ", policy.overrides_size(), " tensor overrides");
  }
  std::string title = absl::StrCat(job.job_id(), s.name().empty() ? "" : " " + s.name(), " (",
                                   codec, ", ", mode, ")");
  return absl::StrReplaceAll(title, {{"\"", "'"}, {"\\", "/"}, {"_", "-"}});
}

}  // namespace

absl::StatusOr<std::string> PlotScript(const std::vector<v1::JobStatus>& jobs,
                                       const std::string& output) {
  if (jobs.empty()) return absl::InvalidArgumentError("plot: no job given");
  std::string script;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const v1::JobStatus& job = jobs[i];
    if (job.history().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plot: job ", job.job_id(), " has no progress history yet (rank 0 records a point at ",
          "every evaluation, every spec.eval_every = ", job.spec().eval_every(), " clocks)"));
    }
    // Columns: clock, MiB pushed, accuracy (%), loss.
    absl::StrAppend(&script, "$job", i, " << EOD\n");
    for (const v1::ProgressPoint& p : job.history()) {
      absl::StrAppend(&script, absl::StrFormat("%d %.6f %.4f %.6f\n", p.clock(),
                                               p.bytes_pushed() / 1048576.0, 100 * p.accuracy(),
                                               p.loss()));
    }
    absl::StrAppend(&script, "EOD\n");
  }
  std::string quoted_output = absl::StrReplaceAll(output, {{"\\", "\\\\"}, {"\"", "\\\""}});
  absl::StrAppend(&script, "set terminal pngcairo size 1400,1000 noenhanced font \"sans,10\"\n",
                  "set output \"", quoted_output, "\"\n",
                  "set grid\nset multiplot layout 2,2\n");
  struct Panel {
    const char* y;
    int column;
    const char* x;
    int x_column;
  };
  const Panel panels[] = {{"test accuracy (%)", 3, "clock", 1},
                          {"test accuracy (%)", 3, "MiB of gradients pushed", 2},
                          {"training loss", 4, "clock", 1},
                          {"training loss", 4, "MiB of gradients pushed", 2}};
  for (const Panel& panel : panels) {
    absl::StrAppend(&script, "set xlabel \"", panel.x, "\"\nset ylabel \"", panel.y, "\"\n");
    absl::StrAppend(&script, panel.x_column == 2 ? "set logscale x\n" : "unset logscale x\n");
    // Accuracy rises and loss falls: keep the key out of the curves' way.
    absl::StrAppend(&script, panel.column == 3 ? "set key bottom right\n" : "set key top right\n");
    absl::StrAppend(&script, "plot ");
    for (size_t i = 0; i < jobs.size(); ++i) {
      absl::StrAppend(&script, i ? ", " : "", "$job", i, " using ", panel.x_column, ":",
                      panel.column, " with linespoints pt 7 ps 0.5 title \"", Title(jobs[i]),
                      "\"");
    }
    absl::StrAppend(&script, "\n");
  }
  absl::StrAppend(&script, "unset multiplot\n");
  return script;
}

absl::Status RunGnuplot(const std::string& script) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    return absl::FailedPreconditionError(
        "plot: gnuplot is not installed (Debian: apt-get install gnuplot-nox)");
  }
  FILE* pipe = ::popen("gnuplot", "w");
  if (pipe == nullptr) return absl::InternalError("plot: cannot start gnuplot");
  const size_t written = std::fwrite(script.data(), 1, script.size(), pipe);
  const int status = ::pclose(pipe);
  if (written != script.size()) return absl::InternalError("plot: could not write to gnuplot");
  if (status != 0) {
    return absl::InternalError(
        absl::StrCat("plot: gnuplot failed (exit status ", WEXITSTATUS(status), ")"));
  }
  return absl::OkStatus();
}

}  // namespace gradstream::cli
