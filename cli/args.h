// A small command-line parser for `gradstream SUBCOMMAND [args] [--flags]`.
//
// absl flags are process-global and exit(1) on an unknown flag; the CLI needs
// per-subcommand flags and exit code 2 for usage errors, so it parses its own:
// `--name=value`, `--name value`, `--flag` (boolean), and `--` ends flags.
#ifndef GRADSTREAM_CLI_ARGS_H_
#define GRADSTREAM_CLI_ARGS_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gradstream::cli {

// Not thread-safe.
class Args {
 public:
  // `bool_flags` take no value. InvalidArgument for a flag given twice or a
  // value-taking flag without a value.
  static absl::StatusOr<Args> Parse(const std::vector<std::string>& argv,
                                    const std::set<std::string>& bool_flags);

  const std::vector<std::string>& positional() const { return positional_; }
  bool Has(const std::string& name) const;
  bool Bool(const std::string& name) const;
  std::optional<std::string> Get(const std::string& name) const;
  // InvalidArgument naming the flag when the value does not parse.
  absl::StatusOr<std::optional<uint64_t>> GetUint(const std::string& name) const;
  absl::StatusOr<std::optional<double>> GetDouble(const std::string& name) const;
  absl::StatusOr<std::optional<absl::Duration>> GetDuration(const std::string& name) const;

  // InvalidArgument listing the flags not in `known` (marks them all used).
  absl::Status CheckKnown(const std::set<std::string>& known) const;

 private:
  std::vector<std::string> positional_;
  std::map<std::string, std::string> flags_;
};

}  // namespace gradstream::cli

#endif  // GRADSTREAM_CLI_ARGS_H_
