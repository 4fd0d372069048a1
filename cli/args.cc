// See args.h.
#include "cli/args.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gradstream::cli {

absl::StatusOr<Args> Args::Parse(const std::vector<std::string>& argv,
                                 const std::set<std::string>& bool_flags) {
  Args args;
  bool flags_done = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (flags_done || a.size() < 2 || a[0] != '-' || a == "-") {
      args.positional_.push_back(a);
      continue;
    }
    if (a == "--") {
      flags_done = true;
      continue;
    }
    std::string body = a.substr(a[1] == '-' ? 2 : 1);
    std::string name = body, value;
    bool has_value = false;
    if (size_t eq = body.find('='); eq != std::string::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_value = true;
    }
    if (bool_flags.count(name)) {
      if (!has_value) value = "true";
      if (value != "true" && value != "false") {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      }
    } else if (!has_value) {
      if (i + 1 >= argv.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
      value = argv[++i];
    }
    if (!args.flags_.emplace(name, value).second) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " given twice"));
    }
  }
  return args;
}

bool Args::Has(const std::string& name) const { return flags_.count(name) > 0; }

bool Args::Bool(const std::string& name) const {
  auto it = flags_.find(name);
  return it != flags_.end() && it->second == "true";
}

std::optional<std::string> Args::Get(const std::string& name) const {
  auto it = flags_.find(name);
  if (it == flags_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::optional<uint64_t>> Args::GetUint(const std::string& name) const {
  auto v = Get(name);
  if (!v) return std::optional<uint64_t>();
  uint64_t out;
  if (!absl::SimpleAtoi(*v, &out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": want a non-negative integer, got '", *v, "'"));
  }
  return std::optional<uint64_t>(out);
}

absl::StatusOr<std::optional<double>> Args::GetDouble(const std::string& name) const {
  auto v = Get(name);
  if (!v) return std::optional<double>();
  double out;
  if (!absl::SimpleAtod(*v, &out)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": want a number, got '", *v, "'"));
  }
  return std::optional<double>(out);
}

absl::StatusOr<std::optional<absl::Duration>> Args::GetDuration(const std::string& name) const {
  auto v = Get(name);
  if (!v) return std::optional<absl::Duration>();
  absl::Duration out;
  if (!absl::ParseDuration(*v, &out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, ": want a duration like 5s or 500ms, got '", *v, "'"));
  }
  return std::optional<absl::Duration>(out);
}

absl::Status Args::CheckKnown(const std::set<std::string>& known) const {
  std::vector<std::string> unknown;
  for (const auto& [name, value] : flags_) {
    if (!known.count(name)) unknown.push_back("--" + name);
  }
  if (unknown.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown flag(s) ", absl::StrJoin(unknown, ", "), " (see `gradstream help`)"));
}

}  // namespace gradstream::cli
