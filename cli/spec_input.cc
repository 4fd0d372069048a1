// See spec_input.h.
#include "cli/spec_input.h"

#include <filesystem>

#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/job/codec_defaults.h"
#include "common/job/job_spec.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

namespace gradstream::cli {

namespace v1 = gradstream::v1;

namespace {

// Collects text-format parse errors with their line and column.
class ErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (!errors.empty()) errors += "; ";
    absl::StrAppend(&errors, "line ", line + 1, ", column ", column + 1, ": ", message);
  }
  std::string errors;
};

struct FlagHelp {
  const char* name;
  const char* help;
};

constexpr FlagHelp kSpecFlags[] = {
    {"name", "job name"},
    {"model", "softmax|mlp|cnn (script with --entrypoint)"},
    {"entrypoint", "a training command run on every worker, e.g. \"python3 train.py\""},
    {"workdir", "the entrypoint's working directory (relative: to this one)"},
    {"hidden", "hidden widths, e.g. 128,64"},
    {"dataset", "synthetic | mnist:DIR | cifar10:DIR"},
    {"classes", "synthetic classes"},
    {"dims", "synthetic input dimensions"},
    {"train_size", "synthetic training samples"},
    {"steps", "clocks per worker"},
    {"batch_size", "per-worker batch size"},
    {"optimizer", "sgd|momentum|nesterov|adagrad|adam"},
    {"lr", "learning rate"},
    {"momentum", "momentum (momentum/nesterov)"},
    {"weight_decay", "L2 weight decay"},
    {"codec", "push codec: none|twobit|ternary|onebit|fp16|int8|int4"},
    {"codec_override", "per-tensor codecs, e.g. fc1.bias=none,fc2.weight=ternary"},
    {"min_compress_elems", "tensors smaller than this travel as fp32"},
    {"twobit_min_elems",
     "twobit and onebit tensors smaller than this travel as ternary (1: none do)"},
    {"twobit_threshold", "2-bit threshold (negative = adaptive: mean |g| of each chunk)"},
    {"ternary_clip", "TernGrad clip in sigmas (negative = none)"},
    {"no_error_feedback", "disable error feedback (an ablation: twobit/onebit lose accuracy)"},
    {"pull_codec", "codec of pulled parameter changes: none|twobit|ternary|onebit|fp16|int8|int4"},
    {"pull_min_elems", "tensors smaller than this are pulled fp32 under a pull codec (1 = none)"},
    {"precision_bound",
     "error bound of compressed pushes, in clocks of signal (pulls: half of it, or "
     "--pull_precision_bound): past it the "
     "next send is exact (negative = measure only)"},
    {"pull_precision_bound",
     "error bound of compressed pulls, in clocks of update (negative = measure only); 2 "
     "raises pulls sooner, which moved the bench's LSTM early in a run, not at its end "
     "(docs/design/precision-control.md)"},
    {"precision_warmup", "clocks every compressed path sends at full precision first"},
    {"precision_max_owed",
     "clocks of descent a compressed path may owe on average before it is raised (negative = "
     "never)"},
    {"link_choice", "on|off: each worker probes exact pushes against its codecs, keeps the faster"},
    {"consistency", "sync|bounded|async"},
    {"staleness", "staleness bound for bounded"},
    {"workers", "worker count N, or an elastic range MIN:MAX (e.g. 1:4)"},
    {"min_workers_timeout",
     "elastic: how long the job may stay below MIN before it fails (default 10m)"},
    {"shards", "shards to spread the model over (0 = all)"},
    {"seed", "model init and rounding seed"},
    {"chunk_elems", "max elements per chunk"},
    {"checkpoint_every", "clocks between shard checkpoints (0 = never)"},
    {"eval_every", "clocks between evaluations"},
};

template <typename Setter>
absl::Status WithUint(const Args& args, const std::string& flag, Setter set) {
  auto v = args.GetUint(flag);
  if (!v.ok()) return v.status();
  if (*v) {
    if (**v > UINT32_MAX)
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": too large"));
    set(static_cast<uint32_t>(**v));
  }
  return absl::OkStatus();
}

template <typename Setter>
absl::Status WithFloat(const Args& args, const std::string& flag, Setter set) {
  auto v = args.GetDouble(flag);
  if (!v.ok()) return v.status();
  if (*v) set(static_cast<float>(**v));
  return absl::OkStatus();
}

// The default a codec flag's help states, read from the one home of the
// codec defaults ([codec defaults] in common/job/codec_defaults.h); "" for a
// flag whose help states none.
std::string CodecFlagDefault(std::string_view flag) {
  if (flag == "codec") return kDefaultPushCodec;
  if (flag == "twobit_min_elems") return absl::StrCat(kDefaultTwobitMinElems);
  if (flag == "twobit_threshold") {
    return kDefaultTwobitThreshold > 0 ? absl::StrCat(kDefaultTwobitThreshold) : "adaptive";
  }
  if (flag == "ternary_clip") return absl::StrCat(kDefaultTernaryClip);
  if (flag == "pull_codec") {
    return absl::StrCat(kDefaultPullCodec, " when --codec is not given, else none");
  }
  if (flag == "pull_min_elems") return absl::StrCat(kDefaultPullMinElems);
  if (flag == "min_compress_elems") {
    return absl::StrCat(kDefaultMinCompressElems, "; 1: every tensor compressed");
  }
  if (flag == "precision_bound") return absl::StrCat(kDefaultPrecisionBound);
  if (flag == "pull_precision_bound") return "half of --precision_bound";
  if (flag == "precision_warmup") return absl::StrCat(kDefaultPrecisionWarmup);
  if (flag == "precision_max_owed") return absl::StrCat(kDefaultPrecisionMaxOwed);
  if (flag == "link_choice") return kDefaultLinkChoice ? "on" : "off";
  return "";
}

}  // namespace

absl::StatusOr<WorkerRange> ParseWorkerRange(const std::string& text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("--workers: ", why, ", got '", text, "'"));
  };
  const std::vector<std::string> parts = absl::StrSplit(text, ':');
  if (parts.size() > 2) return bad("want N or MIN:MAX");
  std::vector<uint64_t> n;
  for (const std::string& p : parts) {
    uint64_t v = 0;
    if (!absl::SimpleAtoi(p, &v)) return bad("want N or MIN:MAX with non-negative integers");
    n.push_back(v);
  }
  const uint64_t max = n.back();
  if (max > kMaxJobWorkers) return bad(absl::StrCat("at most ", kMaxJobWorkers, " workers"));
  if (n.size() == 1) {
    if (max == 0) return bad("want at least 1 worker (`gradstream cancel` stops a job)");
    return WorkerRange{0, static_cast<uint32_t>(max)};
  }
  if (n[0] < 1) return bad("MIN must be at least 1");
  if (n[0] > max) return bad("MIN must not be above MAX");
  return WorkerRange{static_cast<uint32_t>(n[0]), static_cast<uint32_t>(max)};
}

const std::set<std::string>& SpecFlagNames() {
  static const std::set<std::string>* const kNames = [] {
    auto* s = new std::set<std::string>();
    for (const auto& f : kSpecFlags) s->insert(f.name);
    return s;
  }();
  return *kNames;
}

std::string SpecFlagsHelp() {
  std::string out;
  for (const auto& f : kSpecFlags) {
    const std::string d = CodecFlagDefault(f.name);
    absl::StrAppend(&out, "    --", f.name, "  ", f.help, d.empty() ? "" : " (default ", d,
                    d.empty() ? "" : ")", "\n");
  }
  return out;
}

absl::StatusOr<v1::JobSpec> LoadSpecFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read spec file '", path, "'"));
  }
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  v1::JobSpec spec;
  const bool json = absl::EndsWith(path, ".json") ||
                    absl::StartsWith(absl::StripLeadingAsciiWhitespace(text), "{");
  if (json) {
    google::protobuf::util::JsonParseOptions options;
    auto status = google::protobuf::util::JsonStringToMessage(text, &spec, options);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": invalid JSON job spec: ", status.message().as_string()));
    }
    return spec;
  }
  google::protobuf::TextFormat::Parser parser;
  ErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &spec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": invalid text-format job spec: ", errors.errors));
  }
  return spec;
}

absl::Status ApplySpecFlags(const Args& args, v1::JobSpec* spec) {
  if (auto v = args.Get("name")) spec->set_name(*v);
  if (auto v = args.Get("model")) spec->mutable_model()->set_type(*v);
  if (auto v = args.Get("entrypoint")) spec->set_entrypoint(*v);
  if (auto v = args.Get("workdir")) {
    std::error_code ec;
    const std::filesystem::path dir = std::filesystem::absolute(*v, ec);
    spec->set_workdir(ec ? *v : dir.lexically_normal().string());
  }
  if (auto v = args.Get("hidden")) {
    spec->mutable_model()->clear_hidden();
    for (absl::string_view part : absl::StrSplit(*v, ',', absl::SkipEmpty())) {
      uint32_t h;
      if (!absl::SimpleAtoi(part, &h)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--hidden: want widths like 128,64, got '", *v, "'"));
      }
      spec->mutable_model()->add_hidden(h);
    }
  }
  if (auto v = args.Get("dataset")) {
    auto* d = spec->mutable_dataset();
    if (*v == "synthetic") {
      d->mutable_synthetic();
    } else if (absl::StartsWith(*v, "mnist:")) {
      d->set_mnist_dir(v->substr(6));
    } else if (absl::StartsWith(*v, "cifar10:")) {
      d->set_cifar10_dir(v->substr(8));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--dataset: want synthetic, mnist:DIR or cifar10:DIR, got '", *v, "'"));
    }
  }
  for (auto [flag, setter] :
       std::initializer_list<std::pair<const char*, void (*)(v1::JobSpec*, uint32_t)>>{
           {"classes",
            [](v1::JobSpec*s, uint32_t v) {
              s->mutable_dataset()->mutable_synthetic()->set_classes(v);
            }},
           {"dims", [](v1::JobSpec*s,
                       uint32_t v) { s->mutable_dataset()->mutable_synthetic()->set_dims(v); }},
           {"train_size",
            [](v1::JobSpec*s, uint32_t v) {
              s->mutable_dataset()->mutable_synthetic()->set_train_size(v);
            }},
           {"steps", [](v1::JobSpec*s, uint32_t v) { s->set_steps(v); }},
           {"batch_size", [](v1::JobSpec*s, uint32_t v) { s->set_batch_size(v); }},
           {"min_compress_elems",
            [](v1::JobSpec*s, uint32_t v) { s->mutable_codec()->set_min_compress_elems(v); }},
           {"twobit_min_elems",
            [](v1::JobSpec*s, uint32_t v) { s->mutable_codec()->set_twobit_min_elems(v); }},
           {"pull_min_elems",
            [](v1::JobSpec*s, uint32_t v) { s->mutable_codec()->set_pull_min_elems(v); }},
           {"precision_warmup",
            [](v1::JobSpec*s, uint32_t v) { s->mutable_codec()->set_precision_warmup(v); }},
           {"staleness",
            [](v1::JobSpec*s, uint32_t v) { s->mutable_consistency()->set_staleness(v); }},
           {"shards", [](v1::JobSpec*s, uint32_t v) { s->set_shards(v); }},
           {"chunk_elems", [](v1::JobSpec*s, uint32_t v) { s->set_chunk_elems(v); }},
           {"checkpoint_every", [](v1::JobSpec*s, uint32_t v) { s->set_checkpoint_every(v); }},
           {"eval_every", [](v1::JobSpec*s, uint32_t v) { s->set_eval_every(v); }},
       }) {
    absl::Status s = WithUint(args, flag, [&](uint32_t v) { setter(spec, v); });
    if (!s.ok()) return s;
  }
  for (auto [flag, setter] :
       std::initializer_list<std::pair<const char*, void (*)(v1::JobSpec*, float)>>{
           {"lr", [](v1::JobSpec*s, float v) { s->mutable_optimizer()->set_learning_rate(v); }},
           {"momentum", [](v1::JobSpec*s, float v) { s->mutable_optimizer()->set_momentum(v); }},
           {"weight_decay",
            [](v1::JobSpec*s, float v) { s->mutable_optimizer()->set_weight_decay(v); }},
           {"twobit_threshold",
            [](v1::JobSpec*s, float v) { s->mutable_codec()->set_twobit_threshold(v); }},
           {"ternary_clip",
            [](v1::JobSpec*s, float v) { s->mutable_codec()->set_ternary_clip(v); }},
           {"precision_bound",
            [](v1::JobSpec*s, float v) { s->mutable_codec()->set_precision_bound(v); }},
           {"pull_precision_bound",
            [](v1::JobSpec*s, float v) { s->mutable_codec()->set_pull_precision_bound(v); }},
           {"precision_max_owed",
            [](v1::JobSpec*s, float v) { s->mutable_codec()->set_precision_max_owed(v); }},
       }) {
    absl::Status s = WithFloat(args, flag, [&](float v) { setter(spec, v); });
    if (!s.ok()) return s;
  }
  if (auto v = args.Get("workers")) {
    absl::StatusOr<WorkerRange> range = ParseWorkerRange(*v);
    if (!range.ok()) return range.status();
    spec->set_workers(range->max);
    spec->set_workers_min(range->min);
  }
  auto timeout = args.GetDuration("min_workers_timeout");
  if (!timeout.ok()) return timeout.status();
  if (*timeout) {
    const int64_t s = absl::ToInt64Seconds(**timeout);
    if (s < 1 || s > kMaxMinWorkersTimeoutS) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--min_workers_timeout: want 1s to ", kMaxMinWorkersTimeoutS / 3600, "h, got ",
          absl::FormatDuration(**timeout)));
    }
    spec->set_min_workers_timeout_s(static_cast<uint32_t>(s));
  }
  auto seed = args.GetUint("seed");
  if (!seed.ok()) return seed.status();
  if (*seed) spec->set_seed(**seed);
  if (auto v = args.Get("optimizer")) spec->mutable_optimizer()->set_type(*v);
  if (auto v = args.Get("codec")) spec->mutable_codec()->set_default_codec(*v);
  if (auto v = args.Get("pull_codec")) spec->mutable_codec()->set_pull_codec(*v);
  if (auto v = args.Get("link_choice")) spec->mutable_codec()->set_link_choice(*v);
  if (auto v = args.Get("codec_override")) {
    for (absl::string_view kv : absl::StrSplit(*v, ',', absl::SkipEmpty())) {
      std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
      if (p.first.empty() || p.second.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--codec_override: want tensor=codec pairs, got '", kv, "'"));
      }
      (*spec->mutable_codec()->mutable_overrides())[p.first] = p.second;
    }
  }
  if (args.Bool("no_error_feedback")) spec->mutable_codec()->set_disable_error_feedback(true);
  if (auto v = args.Get("consistency")) {
    const std::string mode = absl::AsciiStrToUpper(*v);
    v1::ConsistencyMode m;
    if (!v1::ConsistencyMode_Parse(mode, &m)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--consistency: unknown '", *v, "' (want sync|bounded|async)"));
    }
    spec->mutable_consistency()->set_mode(m);
  }
  return absl::OkStatus();
}

}  // namespace gradstream::cli
