// Gaussian-cluster generator; the draw order is specified in synthetic.h and
// must not change (golden values in synthetic_test.cc pin it).
#include "worker/data/synthetic.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/data/rng.h"

namespace gradstream {
namespace {

void Sample(const SyntheticConfig& c, const std::vector<double>& centres, int64_t n,
            SplitMix64& rng, Dataset* out) {
  const int num_clusters = c.num_classes * c.clusters_per_class;
  out->num_classes = c.num_classes;
  out->shape = InputShape{c.dims, 1, 1};
  out->features.resize(n * c.dims);
  out->labels.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const int k = static_cast<int>(rng.UniformInt(num_clusters));
    const double* centre = centres.data() + int64_t{k} * c.dims;
    float* x = out->features.data() + i * c.dims;
    for (int j = 0; j < c.dims; ++j) x[j] = static_cast<float>(centre[j] + c.noise * rng.Normal());
    out->labels[i] = k / c.clusters_per_class;
  }
}

}  // namespace

absl::StatusOr<TrainTest> GenerateSynthetic(const SyntheticConfig& c) {
  if (c.num_classes <= 0 || c.clusters_per_class <= 0 || c.dims <= 0 || c.num_train < 0 ||
      c.num_test < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic config needs positive classes/clusters/dims and non-negative sizes; got ",
        c.num_classes, " classes, ", c.clusters_per_class, " clusters/class, ", c.dims, " dims, ",
        c.num_train, " train, ", c.num_test, " test"));
  }
  if (!std::isfinite(c.noise) || c.noise < 0) {
    return absl::InvalidArgumentError(absl::StrCat("noise must be finite and >= 0, got ", c.noise));
  }
  SplitMix64 rng(c.seed);
  const int num_clusters = c.num_classes * c.clusters_per_class;
  // Centres stay in double: rounding them to float before adding noise would
  // be a second, easy-to-miss step for anyone reproducing the data.
  std::vector<double> centres(int64_t{num_clusters} * c.dims);
  for (double& v : centres) v = rng.Normal();
  TrainTest out;
  Sample(c, centres, c.num_train, rng, &out.train);
  Sample(c, centres, c.num_test, rng, &out.test);
  return out;
}

}  // namespace gradstream
