// torch_step_cpp: the C++ side of the torch_step bench (see run.py). Run as
// the entry point of a one-worker script job, it declares the same model as
// step_bench.py (`layers` x Linear(width, width): "i.weight" [width, width]
// and "i.bias" [width]) through libgradstream_c's objects, then makes each
// step directly on the session's C++ PsClient: Push every tensor's gradient,
// wait for the acknowledgements, AdvanceClock, Pull every tensor into the
// parameters -- the calls the package's step makes, without Python.
//
// Steps run in lock-step with step_bench.py (another job on the same shards)
// over two FIFOs in --pair_dir: it reads a line from "to_cpp" ("step", or
// "stop"), makes one step and writes its time in seconds and the page faults
// the process took during it to "to_py"; the package side decides the order
// within each pair.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/capi/gradstream_c.h"
#include "worker/capi/internal/session.h"
#include "worker/client/ps_client.h"

ABSL_FLAG(int, width, 2500, "Width of each Linear layer (as step_bench.py --width).");
ABSL_FLAG(int, layers, 4, "Linear layers (as step_bench.py --layers).");
ABSL_FLAG(std::string, pair_dir, "", "Folder with the FIFOs to_cpp and to_py (run.py makes it).");

namespace {

using gradstream::client::PsClient;
using gradstream::client::PushHandle;

constexpr int64_t kTimeoutMs = 600'000;

absl::Status Check(int rc) {
  if (rc == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(rc), gs_last_error());
}

// One step on the PsClient: what ParameterServer.step() does for a model
// whose gradients are all there (push, wait, advance, pull).
absl::Status Step(PsClient& ps, const std::vector<std::vector<float>>& grads,
                  std::vector<std::vector<float>>& params, uint64_t& clock) {
  std::vector<PushHandle> pushes;
  for (size_t t = 0; t < grads.size(); ++t) {
    pushes.push_back(ps.Push(static_cast<uint32_t>(t), grads[t], clock));
  }
  for (const PushHandle& h : pushes) {
    if (absl::Status st = PsClient::Wait(h, absl::Milliseconds(kTimeoutMs)); !st.ok()) return st;
  }
  ++clock;
  if (absl::Status st = ps.AdvanceClock(clock); !st.ok()) return st;
  std::vector<absl::Span<float>> out;
  for (std::vector<float>& p : params) out.emplace_back(p);
  return PsClient::Wait(ps.Pull(clock, std::move(out)), absl::Milliseconds(kTimeoutMs));
}

// Minor page faults of this process so far (all its threads).
long MinorFaults() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

absl::Status Run() {
  const char* agent = std::getenv("GRADSTREAM_AGENT");
  if (agent == nullptr) {
    return absl::FailedPreconditionError("run me as a script job's entry point (see run.py)");
  }
  gs_session* s = gs_open(agent, kTimeoutMs);
  if (s == nullptr) return absl::UnavailableError(gs_last_error());
  const int width = absl::GetFlag(FLAGS_width);
  std::vector<std::string> names;
  std::vector<int32_t> ndims;
  std::vector<int64_t> dims;
  std::vector<std::vector<float>> params, grads;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  for (int l = 0; l < absl::GetFlag(FLAGS_layers); ++l) {
    for (const bool weight : {true, false}) {
      names.push_back(absl::StrCat(l, weight ? ".weight" : ".bias"));
      ndims.push_back(weight ? 2 : 1);
      dims.push_back(width);
      if (weight) dims.push_back(width);
      const size_t n = weight ? size_t{1} * width * width : width;
      params.emplace_back(n, 0.01f);
      grads.emplace_back(n);
      for (float& g : grads.back()) g = normal(rng);
    }
  }
  std::vector<const char*> cnames;
  for (const std::string& n : names) cnames.push_back(n.c_str());
  if (absl::Status st = Check(gs_declare(s, static_cast<int32_t>(names.size()), cnames.data(),
                                         ndims.data(), dims.data(), nullptr, kTimeoutMs));
      !st.ok()) {
    return st;
  }
  std::vector<const float*> init;
  for (const std::vector<float>& p : params) init.push_back(p.data());
  if (absl::Status st = Check(gs_init_params(s, init.data(), kTimeoutMs)); !st.ok()) return st;
  PsClient& ps = *gradstream::capi::SessionClient(s);
  size_t total = 0;
  for (const std::vector<float>& p : params) total += p.size();
  std::cout << "torch_step_cpp: " << total << " parameters (" << params.size()
            << " tensors), stepping on the C++ PsClient" << std::endl;

  std::ifstream to_cpp(absl::GetFlag(FLAGS_pair_dir) + "/to_cpp");
  std::ofstream to_py(absl::GetFlag(FLAGS_pair_dir) + "/to_py");
  uint64_t clock = 0;
  std::string line;
  absl::Status st;
  while (st.ok() && std::getline(to_cpp, line) && line != "stop") {
    const long faults = MinorFaults();
    const auto start = std::chrono::steady_clock::now();
    st = Step(ps, grads, params, clock);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    to_py << (st.ok() ? took.count() : -1.0) << " " << MinorFaults() - faults << std::endl;
  }
  if (st.ok()) st = Check(gs_leave(s, kTimeoutMs));
  gs_close(s);
  return st;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::Status st = Run(); !st.ok()) {
    std::cerr << "torch_step_cpp: " << st << std::endl;
    return 1;
  }
  return 0;
}
