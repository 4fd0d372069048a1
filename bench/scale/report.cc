// The scale benchmark's output; see report.h.
#include "bench/scale/report.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace gradstream::bench {

absl::StatusOr<ProcSample> SampleProcess(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return absl::NotFoundError(absl::StrCat("no process ", pid));
  // The command name may hold spaces: fields count from after its ')'.
  const std::vector<std::string> f =
      absl::StrSplit(line.substr(line.rfind(')') + 2), ' ', absl::SkipEmpty());
  // f[0] is field 3 (state): utime and stime are fields 14 and 15.
  uint64_t utime = 0, stime = 0;
  if (f.size() < 13 || !absl::SimpleAtoi(f[11], &utime) || !absl::SimpleAtoi(f[12], &stime)) {
    return absl::DataLossError(absl::StrCat("/proc/", pid, "/stat: ", line));
  }
  ProcSample s;
  s.cpu_s = static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  while (std::getline(status, line)) {
    double kb = 0;
    if (line.rfind("VmRSS:", 0) == 0 &&
        absl::SimpleAtod(absl::StripAsciiWhitespace(line.substr(6, line.size() - 9)), &kb)) {
      s.rss_mb = kb / 1024;
    }
  }
  return s;
}

void PrintHeader(std::FILE* out) {
  constexpr char kFormat[] =
      "%7s %4s %5s %4s | %5s %6s | %7s %7s | %7s %7s %4s | %7s %7s %5s | %8s %7s %6s | "
      "%7s %10s %7s %5s\n";
  std::fprintf(out, kFormat, "workers", "jobs", "w/job", "run", "coord", "RSS", "hb p50",
               "hb p99", "submit", "submit", "", "scale", "scale", "", "state", "writes", "ms/",
               "pushers", "chunk push", "push", "shard");
  std::fprintf(out, kFormat, "", "", "", "", "cores", "MB", "ms", "ms", "p50 ms", "p99 ms", "n",
               "p50 ms", "p99 ms", "n/to", "KB", "/s", "write", "", "/s/shard", "p99 ms", "cores");
  std::fprintf(out, "%s\n", std::string(168, '-').c_str());
}

void PrintRow(std::FILE* out, const PointResult& p) {
  if (!p.error.empty()) {
    std::fprintf(out, "%7d %4d  failed: %s\n", p.workers, p.jobs, p.error.c_str());
    return;
  }
  std::fprintf(out,
               "%7d %4d %5d %4d | %5.2f %6.0f | %7.1f %7.1f | %7.0f %7.0f %4d | %7.0f %7.0f "
               "%2d/%-2d | %8.0f %7.1f %6.1f | %7d %10.0f %7.1f %5.2f\n",
               p.workers, p.jobs, p.workers_per_job, p.running_jobs, p.coord_cores,
               p.coord_rss_mb, p.hb_p50, p.hb_p99, p.submit_p50, p.submit_p99, p.submits,
               p.scale_p50, p.scale_p99, p.scales, p.scale_timeouts, p.state_kb, p.writes_per_s,
               p.write_ms_mean, p.pushers, p.chunk_pushes_per_shard_s, p.push_p99, p.shard_cores);
  std::fflush(out);
}

absl::Status WriteJson(const std::string& path, const std::string& command,
                       const std::vector<PointResult>& points) {
  std::ostringstream o;
  o << "{\n  \"command\": \"" << command << "\",\n  \"points\": [\n";
  for (size_t i = 0; i < points.size(); ++i) {
    const PointResult& p = points[i];
    const std::vector<std::pair<const char*, double>> fields = {
        {"workers", p.workers},
        {"jobs", p.jobs},
        {"workers_per_job", p.workers_per_job},
        {"running_jobs", p.running_jobs},
        {"register_s", p.register_s},
        {"window_s", p.window_s},
        {"coordinator_cores", p.coord_cores},
        {"coordinator_rss_mb", p.coord_rss_mb},
        {"heartbeat_p50_ms", p.hb_p50},
        {"heartbeat_p99_ms", p.hb_p99},
        {"heartbeat_max_ms", p.hb_max},
        {"heartbeats", static_cast<double>(p.heartbeats)},
        {"heartbeat_errors", static_cast<double>(p.heartbeat_errors)},
        {"reregistrations", static_cast<double>(p.reregistrations)},
        {"submit_to_running_p50_ms", p.submit_p50},
        {"submit_to_running_p99_ms", p.submit_p99},
        {"submits", p.submits},
        {"submits_not_started", p.submits_not_started},
        {"scale_to_epoch_p50_ms", p.scale_p50},
        {"scale_to_epoch_p99_ms", p.scale_p99},
        {"scales", p.scales},
        {"scale_timeouts", p.scale_timeouts},
        {"state_kb", p.state_kb},
        {"state_writes_per_s", p.writes_per_s},
        {"state_write_ms_mean", p.write_ms_mean},
        {"pushers", p.pushers},
        {"pushes_per_s", p.pushes_per_s},
        {"chunk_pushes_per_shard_s", p.chunk_pushes_per_shard_s},
        {"push_p50_ms", p.push_p50},
        {"push_p99_ms", p.push_p99},
        {"push_errors", static_cast<double>(p.push_errors)},
        {"shard_cores", p.shard_cores},
    };
    o << "    {";
    for (const auto& [name, value] : fields) o << "\"" << name << "\": " << value << ", ";
    o << "\"error\": \"" << p.error << "\"}" << (i + 1 < points.size() ? "," : "") << "\n";
  }
  o << "  ]\n}\n";
  std::ofstream f(path);
  f << o.str();
  if (!f.good()) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status WritePng(const std::string& png, const std::vector<PointResult>& points) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    return absl::UnavailableError("gnuplot is not installed (apt-get install gnuplot-nox)");
  }
  // One gnuplot data block per job count, one line per worker count.
  std::map<int, std::vector<const PointResult*>> by_jobs;
  for (const PointResult& p : points) {
    if (p.error.empty()) by_jobs[p.jobs].push_back(&p);
  }
  const std::string dat = png + ".dat", gp = png + ".gp";
  std::ofstream d(dat);
  std::string plots[4];
  int block = 0;
  for (const auto& [jobs, rows] : by_jobs) {
    d << "# jobs=" << jobs << "\n# workers hb_p99 coord_cores scale_p99 chunk_pushes_per_shard_s\n";
    // A point without samples (no scale committed, no pusher) is left out.
    auto value = [](double v) { return v > 0 ? absl::StrCat(v) : std::string("NaN"); };
    for (const PointResult* p : rows) {
      d << p->workers << " " << p->hb_p99 << " " << p->coord_cores << " " << value(p->scale_p99)
        << " " << value(p->chunk_pushes_per_shard_s) << "\n";
    }
    d << "\n\n";
    for (int k = 0; k < 4; ++k) {
      absl::StrAppend(&plots[k], block == 0 ? "plot " : ", ", "'", dat, "' index ", block,
                      " using 1:", k + 2, " with linespoints title '", jobs, " jobs'");
    }
    ++block;
  }
  d.close();
  std::ofstream g(gp);
  g << "set terminal pngcairo size 1200,900\nset output '" << png << "'\n"
    << "set multiplot layout 2,2 title 'gradstream control plane at scale (bench/scale)'\n"
    << "set termoption noenhanced\nset logscale x 2\nset xlabel 'simulated workers'\n"
    << "set key top left\nset grid\n"
    << "set title 'coordinator heartbeat p99 (ms; dashed: the 50 ms goal)'\nset logscale y 10\n"
    << "set arrow 1 from graph 0, first 50 to graph 1, first 50 nohead dt 2\n"
    << plots[0] << "\nunset arrow 1\nunset logscale y\n"
    << "set title 'coordinator CPU (cores)'\n" << plots[1] << "\n"
    << "set title 'scale -> committed epoch p99 (ms)'\n" << plots[2] << "\n"
    << "set title 'chunk pushes/s per shard (pushers = min(workers, --max_pushers))'\n"
    << plots[3] << "\nunset multiplot\n";
  g.close();
  if (std::system(absl::StrCat("gnuplot '", gp, "'").c_str()) != 0) {
    return absl::InternalError(absl::StrCat("gnuplot failed on ", gp));
  }
  return absl::OkStatus();
}

}  // namespace gradstream::bench
