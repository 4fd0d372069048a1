// pslite_step: ps-lite's side of the comparison with gradstream (run.sh
// builds it against ps-lite under /tmp; it is not part of the CMake build).
// One key holding the whole model (--floats, default 16 Mi = 64 MiB fp32).
// The server keeps the key's values and adds every push into them (the work
// of an SGD apply, as gradstream's shard does); a pull returns them.
//
// Roles come from ps-lite's environment (DMLC_ROLE, DMLC_PS_ROOT_URI, ...).
// The worker speaks gs_step_loop's protocol on stdin/stdout: "ready 0", then
// one "<push ms> <pull ms> <server faults> <server CPU ms>" line per "step"
// line (the last two during the push, read from /proc for the server process
// PSLITE_SERVER_PID names; 0 without it); "quit" or EOF ends it.
// Pushes and pulls use ZPush/ZPull (ps-lite's zero-copy calls) and are
// waited for one at a time.
#include <dirent.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
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

// Minor + major page faults and CPU ns (all threads) of process `pid`.
struct Usage {
  unsigned long long faults = 0, cpu_ns = 0;
};
Usage UsageOf(long pid) {
  Usage u;
  if (pid <= 0) return u;
  const std::string proc = "/proc/" + std::to_string(pid);
  std::ifstream stat(proc + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  if (close != std::string::npos) {
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    for (int i = 3; rest >> field && i <= 12; ++i) {
      if (i == 10 || i == 12) u.faults += std::stoull(field);
    }
  }
  if (DIR* d = opendir((proc + "/task").c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream ss(proc + "/task/" + e->d_name + "/schedstat");
      unsigned long long ns = 0;
      if (ss >> ns) u.cpu_ns += ns;
    }
    closedir(d);
  }
  return u;
}

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
  const char* server_pid = std::getenv("PSLITE_SERVER_PID");
  const long server = server_pid != nullptr ? std::atol(server_pid) : 0;
  std::string line;
  while (std::getline(std::cin, line) && line != "quit") {
    if (line != "step") continue;
    const Usage before = UsageOf(server);
    const auto t0 = std::chrono::steady_clock::now();
    kv.Wait(kv.ZPush(keys, grad, lens));
    const auto t1 = std::chrono::steady_clock::now();
    const Usage after = UsageOf(server);
    kv.Wait(kv.ZPull(keys, &params, &got_lens));
    const auto t2 = std::chrono::steady_clock::now();
    if (params.size() != n) {
      std::fprintf(stderr, "pslite_step: pulled %zu floats, want %zu\n", params.size(), n);
      std::exit(1);
    }
    std::printf("%.3f %.3f %llu %.3f\n", Ms(t1 - t0), Ms(t2 - t1), after.faults - before.faults,
                static_cast<double>(after.cpu_ns - before.cpu_ns) / 1e6);
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
