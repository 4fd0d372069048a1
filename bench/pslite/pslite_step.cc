// pslite_step: ps-lite's side of the comparison with gradstream (run.sh
// builds it against ps-lite under /tmp; it is not part of the CMake build).
// One key holding the whole model (--floats, default 16 Mi = 64 MiB fp32).
// The server keeps the key's values and adds every push into them (the work
// of an SGD apply, as gradstream's shard does); a pull returns them.
//
// Roles come from ps-lite's environment (DMLC_ROLE, DMLC_PS_ROOT_URI, ...).
// The worker speaks gs_step_loop's protocol on stdin/stdout: "ready 0", then
// one "<push ms> <pull ms> 0" line per "step" line; "quit" or EOF ends it.
// Pushes and pulls use ZPush/ZPull (ps-lite's zero-copy calls) and are
// waited for one at a time.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "ps/ps.h"

namespace {

size_t Floats() {
  const char* f = std::getenv("PSLITE_STEP_FLOATS");
  return f != nullptr ? std::strtoull(f, nullptr, 10) : size_t{16} << 20;
}

// Sums pushes into the stored values; answers pulls with them.
class Store {
 public:
  void operator()(const ps::KVMeta& meta, const ps::KVPairs<float>& req,
                  ps::KVServer<float>* server) {
    ps::KVPairs<float> res;
    if (meta.push) {
      if (values_.size() != req.vals.size()) values_.resize(req.vals.size(), 0.0f);
      float* v = values_.data();
      const float* g = req.vals.data();
      for (size_t i = 0; i < req.vals.size(); ++i) v[i] += g[i];
    }
    if (meta.pull) {
      res.keys = req.keys;
      res.vals = values_;  // shares the buffer: no copy
      res.lens = ps::SArray<int>(1, static_cast<int>(values_.size()));
    }
    server->Response(meta, res);
  }

 private:
  ps::SArray<float> values_;
};

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

void RunWorker() {
  ps::KVWorker<float> kv(0, 0);
  const size_t n = Floats();
  ps::SArray<ps::Key> keys(1, 0);
  ps::SArray<int> lens(1, static_cast<int>(n));
  ps::SArray<float> grad(n);
  for (size_t i = 0; i < n; ++i) grad[i] = static_cast<float>(i % 1000) * 1e-3f;
  ps::SArray<float> params;
  ps::SArray<int> got_lens;
  std::printf("ready 0\n");
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line) && line != "quit") {
    if (line != "step") continue;
    const auto t0 = std::chrono::steady_clock::now();
    kv.Wait(kv.ZPush(keys, grad, lens));
    const auto t1 = std::chrono::steady_clock::now();
    kv.Wait(kv.ZPull(keys, &params, &got_lens));
    const auto t2 = std::chrono::steady_clock::now();
    if (params.size() != n) {
      std::fprintf(stderr, "pslite_step: pulled %zu floats, want %zu\n", params.size(), n);
      std::exit(1);
    }
    std::printf("%.3f %.3f 0\n", Ms(t1 - t0), Ms(t2 - t1));
    std::fflush(stdout);
  }
}

}  // namespace

int main() {
  ps::Start(0);
  ps::KVServer<float>* server = nullptr;
  if (ps::IsServer()) {
    server = new ps::KVServer<float>(0);
    server->set_request_handle(Store());
  }
  if (ps::IsWorker()) RunWorker();
  ps::Finalize(0, true);
  delete server;
  return 0;
}
