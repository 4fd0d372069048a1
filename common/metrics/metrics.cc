// Prometheus text exposition; see metrics.h.
#include "common/metrics/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace gradstream::metrics {

namespace internal {

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  // The shortest representation that reads back as the same double.
  char buf[32];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

namespace {
std::string EscapeHelp(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

bool ValidName(const std::string& name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}
}  // namespace

bool ValidMetricName(const std::string& name) { return ValidName(name, true); }
bool ValidLabelName(const std::string& name) {
  return ValidName(name, false) && name.rfind("__", 0) != 0;
}

}  // namespace internal

namespace {

Labels Sorted(Labels labels) {
  std::sort(labels.begin(), labels.end());
  for (const auto& [k, v] : labels) {
    CHECK(internal::ValidLabelName(k) && k != "le") << "bad label name '" << k << "'";
  }
  return labels;
}

// {a="x",b="y"} plus an optional extra label (the histogram's le).
std::string LabelText(const Labels& labels, const std::string& extra_name = "",
                      const std::string& extra_value = "") {
  if (labels.empty() && extra_name.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    absl::StrAppend(&out, first ? "" : ",", k, "=\"", internal::EscapeLabelValue(v), "\"");
    first = false;
  }
  if (!extra_name.empty()) {
    absl::StrAppend(&out, first ? "" : ",", extra_name, "=\"", extra_value, "\"");
  }
  out += "}";
  return out;
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  CHECK(std::is_sorted(bounds_.begin(), bounds_.end())) << "histogram bounds must be sorted";
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::Observe(double v) {
  // Prometheus buckets are "less than or equal": v lands in the first bound >= v.
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::bucket_counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = counts_[i].load(std::memory_order_relaxed);
  return out;
}

void Histogram::Set(const std::vector<uint64_t>& counts, double sum) {
  CHECK_EQ(counts.size(), bounds_.size() + 1) << "one count per bucket, +Inf included";
  uint64_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    counts_[i].store(counts[i], std::memory_order_relaxed);
    total += counts[i];
  }
  count_.store(total, std::memory_order_relaxed);
  sum_.store(sum, std::memory_order_relaxed);
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> out;
  for (int i = 0; i < count; ++i, start *= factor) out.push_back(start);
  return out;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  std::vector<double> out;
  for (int i = 0; i < count; ++i) out.push_back(start + width * i);
  return out;
}

Registry* Registry::Default() {
  static Registry* const kRegistry = new Registry();
  return kRegistry;
}

Registry::Family& Registry::FamilyLocked(const std::string& name, const std::string& help,
                                         Type type) {
  CHECK(internal::ValidMetricName(name)) << "bad metric name '" << name << "'";
  auto [it, inserted] = families_.try_emplace(name);
  if (inserted) {
    it->second.type = type;
    it->second.help = help;
  }
  CHECK(it->second.type == type) << "metric '" << name << "' registered with two types";
  return it->second;
}

Counter* Registry::GetCounter(const std::string& name, const std::string& help,
                              const Labels& labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = FamilyLocked(name, help, Type::kCounter).counters[Sorted(labels)];
  if (!slot) slot = std::make_unique<Counter>();
  return slot.get();
}

Gauge* Registry::GetGauge(const std::string& name, const std::string& help, const Labels& labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = FamilyLocked(name, help, Type::kGauge).gauges[Sorted(labels)];
  if (!slot) slot = std::make_unique<Gauge>();
  return slot.get();
}

Histogram* Registry::GetHistogram(const std::string& name, const std::string& help,
                                  const std::vector<double>& bounds, const Labels& labels) {
  absl::MutexLock lock(&mu_);
  Family& family = FamilyLocked(name, help, Type::kHistogram);
  if (family.histograms.empty() && family.bounds.empty()) family.bounds = bounds;
  auto& slot = family.histograms[Sorted(labels)];
  if (!slot) slot = std::make_unique<Histogram>(family.bounds);
  return slot.get();
}

void Registry::RemoveMatching(const std::string& name, const std::string& label,
                              const std::string& value) {
  absl::MutexLock lock(&mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return;
  auto matches = [&](const Labels& labels) {
    return std::find(labels.begin(), labels.end(), std::make_pair(label, value)) != labels.end();
  };
  std::erase_if(it->second.counters, [&](const auto& kv) { return matches(kv.first); });
  std::erase_if(it->second.gauges, [&](const auto& kv) { return matches(kv.first); });
  std::erase_if(it->second.histograms, [&](const auto& kv) { return matches(kv.first); });
}

uint64_t Registry::AddCollector(std::function<void()> collect) {
  absl::MutexLock lock(&collect_mu_);
  const uint64_t id = next_collector_++;
  collectors_.emplace(id, std::move(collect));
  return id;
}

void Registry::RemoveCollector(uint64_t id) {
  // Taking collect_mu_ waits out a Render that is running the collector.
  absl::MutexLock lock(&collect_mu_);
  collectors_.erase(id);
}

std::string Registry::Render() const {
  {
    // Held across the runs so RemoveCollector() cannot return while one is
    // in progress, and so two scrapes do not mirror the same state at once.
    absl::MutexLock lock(&collect_mu_);
    for (const auto& [id, collect] : collectors_) collect();
  }
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& [name, family] : families_) {
    const char* type = family.type == Type::kCounter ? "counter"
                       : family.type == Type::kGauge ? "gauge"
                                                     : "histogram";
    absl::StrAppend(&out, "# HELP ", name, " ", internal::EscapeHelp(family.help), "\n");
    absl::StrAppend(&out, "# TYPE ", name, " ", type, "\n");
    for (const auto& [labels, c] : family.counters) {
      absl::StrAppend(&out, name, LabelText(labels), " ", internal::FormatValue(c->value()), "\n");
    }
    for (const auto& [labels, g] : family.gauges) {
      absl::StrAppend(&out, name, LabelText(labels), " ", internal::FormatValue(g->value()), "\n");
    }
    for (const auto& [labels, h] : family.histograms) {
      uint64_t cumulative = 0;
      for (size_t i = 0; i <= h->bounds().size(); ++i) {
        cumulative += h->bucket_count(i);
        const std::string le =
            i < h->bounds().size() ? internal::FormatValue(h->bounds()[i]) : "+Inf";
        absl::StrAppend(&out, name, "_bucket", LabelText(labels, "le", le), " ", cumulative, "\n");
      }
      absl::StrAppend(&out, name, "_sum", LabelText(labels), " ", internal::FormatValue(h->sum()),
                      "\n");
      // The +Inf bucket and _count must agree; concurrent Observe()s may land
      // between the reads, so _count repeats the cumulative total.
      absl::StrAppend(&out, name, "_count", LabelText(labels), " ", cumulative, "\n");
    }
  }
  return out;
}

}  // namespace gradstream::metrics
