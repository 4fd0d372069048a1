// `gradstream plot`: loss and accuracy curves of one or more jobs, drawn by
// gnuplot from the progress history the coordinator keeps per job
// (JobStatus.history), so that codecs or consistency modes can be compared at
// a glance: accuracy and loss against clock and against bytes pushed, one
// line per job.
#ifndef GRADSTREAM_CLI_PLOT_H_
#define GRADSTREAM_CLI_PLOT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator.pb.h"

namespace gradstream::cli {

// The gnuplot program that draws `jobs` into the PNG file `output`: a 2x2
// grid (accuracy vs clock, accuracy vs MiB pushed, loss vs clock, loss vs
// MiB pushed), each job a line titled "JOB (codec, mode)", the data inline
// (gnuplot 5 datablocks), so no temporary file is needed. InvalidArgument
// when there is no job, or a job has no history yet (naming it).
absl::StatusOr<std::string> PlotScript(const std::vector<gradstream::v1::JobStatus>& jobs,
                                       const std::string& output);

// Runs `gnuplot` (from $PATH) on `script`. FailedPrecondition naming the
// package when gnuplot is not installed; Internal with gnuplot's exit status
// when it fails.
[[nodiscard]] absl::Status RunGnuplot(const std::string& script);

}  // namespace gradstream::cli

#endif  // GRADSTREAM_CLI_PLOT_H_
