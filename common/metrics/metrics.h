// A small Prometheus metrics registry: counters, gauges and histograms with
// labels, rendered in the Prometheus text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
//   Registry reg;
//   Counter* pushes = reg.GetCounter("gs_shard_pushes_total", "Pushes applied.",
//                                    {{"job", "job-0001"}});
//   pushes->Increment();
//   std::string text = reg.Render();   // served by MetricsServer at /metrics
//
// State that a component already counts (e.g. a shard job's JobStats) need
// not be counted twice: a collector (AddCollector) runs at every Render and
// mirrors it into children with Counter::Set / Gauge::Set / Histogram::Set.
//
// A metric family is identified by its name; each distinct label set is one
// child. Children live as long as the registry, so the returned pointers may
// be cached. Names and label names must match Prometheus' grammar and one
// name must keep one type; violating either is a programmer error (CHECK).
#ifndef GRADSTREAM_COMMON_METRICS_METRICS_H_
#define GRADSTREAM_COMMON_METRICS_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gradstream::metrics {

// Label name/value pairs; order does not matter (they are sorted by name).
using Labels = std::vector<std::pair<std::string, std::string>>;

// A monotonically increasing value. Thread-safe.
class Counter {
 public:
  // `v` must be >= 0; negative increments are ignored.
  void Increment(double v = 1.0) {
    if (v > 0) value_.fetch_add(v, std::memory_order_relaxed);
  }
  // For collectors that mirror a total counted elsewhere: the counter takes
  // that total as is. Keeping it monotonic is the caller's contract.
  void Set(double total) { value_.store(total, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down. Thread-safe.
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Counts observations into cumulative buckets with upper bounds `bounds`
// (sorted ascending; +Inf is implicit). Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);

  const std::vector<double>& bounds() const { return bounds_; }
  // Non-cumulative count of bucket i (i == bounds().size() is the +Inf bucket).
  uint64_t bucket_count(size_t i) const { return counts_[i].load(std::memory_order_relaxed); }
  // Every bucket's non-cumulative count, +Inf last.
  std::vector<uint64_t> bucket_counts() const;
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }

  // For collectors that mirror a distribution kept elsewhere: replaces the
  // state with non-cumulative `counts` (one per bucket, +Inf last: exactly
  // bounds().size() + 1 of them, else CHECK) and `sum`. Not atomic with
  // respect to concurrent Observe() calls; a mirrored histogram has none.
  void Set(const std::vector<uint64_t>& counts, double sum);

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0.0};
};

// Bucket bounds start, start*factor, ... (count of them).
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// Bucket bounds start, start+width, ... (count of them).
std::vector<double> LinearBuckets(double start, double width, int count);

// Owns metric families. Thread-safe; Get* may be called concurrently with
// Render and with updates of existing children.
class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The process-wide registry the binaries serve.
  static Registry* Default();

  Counter* GetCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge* GetGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  // `bounds` of the first call for `name` define the family's buckets.
  Histogram* GetHistogram(const std::string& name, const std::string& help,
                          const std::vector<double>& bounds, const Labels& labels = {});

  // Drops every child of family `name` whose labels include `label`=`value`
  // (e.g. a finished job's series). Pointers to dropped children dangle.
  void RemoveMatching(const std::string& name, const std::string& label, const std::string& value);

  // Registers `collect`, which every Render() runs (before it reads any
  // family) so it can bring children up to date with state kept elsewhere.
  // Collectors run one at a time, on the rendering thread, and may call
  // Get*() and RemoveMatching() but not Render(), AddCollector() or
  // RemoveCollector(). Returns the id for RemoveCollector.
  uint64_t AddCollector(std::function<void()> collect);
  // Unregisters collector `id`; waits for a run of it in progress, so once
  // this returns, what the collector captured may be destroyed.
  void RemoveCollector(uint64_t id);

  // Runs the collectors, then renders every family in name order in the text
  // exposition format.
  std::string Render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Family {
    Type type;
    std::string help;
    std::vector<double> bounds;
    std::map<Labels, std::unique_ptr<Counter>> counters;
    std::map<Labels, std::unique_ptr<Gauge>> gauges;
    std::map<Labels, std::unique_ptr<Histogram>> histograms;
  };
  Family& FamilyLocked(const std::string& name, const std::string& help, Type type)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Lock order: collect_mu_ -> mu_ (collectors call Get*()).
  mutable absl::Mutex collect_mu_;
  std::map<uint64_t, std::function<void()>> collectors_ ABSL_GUARDED_BY(collect_mu_);
  uint64_t next_collector_ ABSL_GUARDED_BY(collect_mu_) = 1;

  mutable absl::Mutex mu_;
  std::map<std::string, Family> families_ ABSL_GUARDED_BY(mu_);
};

namespace internal {
// Exposed for tests.
std::string FormatValue(double v);
std::string EscapeLabelValue(const std::string& v);
bool ValidMetricName(const std::string& name);
bool ValidLabelName(const std::string& name);
}  // namespace internal

}  // namespace gradstream::metrics

#endif  // GRADSTREAM_COMMON_METRICS_METRICS_H_
