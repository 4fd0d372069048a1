// Building a JobSpec for `gradstream submit` from a file (JSON or protobuf
// text format, parsed by protobuf's own parsers) and/or flags; flags override
// the file's fields.
#ifndef GRADSTREAM_CLI_SPEC_INPUT_H_
#define GRADSTREAM_CLI_SPEC_INPUT_H_

#include <cstdint>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "cli/args.h"
#include "job.pb.h"

namespace gradstream::cli {

// The flags ApplySpecFlags understands (for Args::CheckKnown).
const std::set<std::string>& SpecFlagNames();

// Parses `path`: JSON when it ends in .json or starts with '{', text format
// otherwise. NotFound if unreadable; InvalidArgument with the parser's
// message (line/column) if malformed.
absl::StatusOr<gradstream::v1::JobSpec> LoadSpecFile(const std::string& path);

// Sets the fields given as flags. InvalidArgument naming the flag.
absl::Status ApplySpecFlags(const Args& args, gradstream::v1::JobSpec* spec);

// `--workers` as given: "N" (exactly N, not elastic: min 0) or "MIN:MAX"
// (an elastic range, see [elastic jobs]). InvalidArgument for anything
// else, a MIN below 1, MIN above MAX or MAX above kMaxJobWorkers.
struct WorkerRange {
  uint32_t min = 0;  // 0: a plain count
  uint32_t max = 0;
};
absl::StatusOr<WorkerRange> ParseWorkerRange(const std::string& text);

// One line per flag, for `gradstream help submit`.
std::string SpecFlagsHelp();

}  // namespace gradstream::cli

#endif  // GRADSTREAM_CLI_SPEC_INPUT_H_
