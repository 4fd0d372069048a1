// Does a real model still learn on real data when its gradients are
// compressed with the default codec policy? Fashion-MNIST as Debian's
// dataset-fashion-mnist installs it (gzip-compressed IDX), the built-in CNN,
// through the real processes: 2 gs_shard, gs_coordinator and 2 gs_worker on
// loopback.
//
// The recipe is bench/fashion_mnist.sh's (bench/README.md, "Fashion-MNIST"):
// 2 workers, sync, batch 32, server momentum 0.9, lr 0.02, 3000 clocks (about
// 3.2 epochs), seed 1. Sync training is deterministic (stochastic rounding
// draws are keyed by seed, worker, clock and chunk), so the accuracies below
// repeat exactly; the margins: every codec within 0.5 point of fp32, twobit
// pushes and pulls within 0.5 point of fp32. Bounded staleness depends on
// timing and is held to a wider margin (see the SSP check below). The whole
// suite takes about four minutes on 2 cores.
#include <sys/stat.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/training/cluster.h"

namespace gradstream::testing {
namespace {

constexpr char kData[] = "/usr/share/datasets/fashion-mnist";
constexpr double kMargin = 0.005;  // half a point of test accuracy

bool HaveFashionMnist() {
  struct stat st;
  return ::stat((std::string(kData) + "/train-images-idx3-ubyte.gz").c_str(), &st) == 0;
}

struct Result {
  double accuracy = 0;
  double ratio = 0;       // fp32 bytes / bytes pushed
  double pull_ratio = 0;  // fp32 bytes / bytes pulled
};

class FashionMnist : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!HaveFashionMnist()) return;
    auto c = LocalCluster::Start({GS_COORDINATOR_BINARY, GS_SHARD_BINARY, GS_WORKER_BINARY},
                                 {.shards = 2, .workers = 2});
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (!HaveFashionMnist()) {
      GTEST_SKIP() << "Fashion-MNIST is not installed in " << kData
                   << " (apt-get install dataset-fashion-mnist)";
    }
    ASSERT_NE(cluster_, nullptr);
  }

  static v1::JobSpec Spec(const std::string& name, const std::string& codec) {
    v1::JobSpec s;
    s.set_name(name);
    s.mutable_model()->set_type("cnn");
    s.mutable_dataset()->set_mnist_dir(kData);  // read gzip-compressed, as installed
    s.set_steps(3000);
    s.set_batch_size(32);
    s.mutable_optimizer()->set_type("momentum");
    s.mutable_optimizer()->set_learning_rate(0.02f);
    s.mutable_optimizer()->set_momentum(0.9f);
    s.mutable_codec()->set_default_codec(codec);  // the rest of the policy: defaults
    // ...but the codecs alone: the guard raises fixed-t twobit as the
    // gradients shrink (docs/design/precision-control.md, "Fixed thresholds");
    // torch_precision_guard_test covers the guard.
    s.mutable_codec()->set_precision_bound(-1);
    s.set_workers(2);
    s.set_eval_every(1000);
    return s;
  }

  static Result Run(const v1::JobSpec& spec) {
    Result r;
    auto job = cluster_->Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return r;
    auto status = cluster_->WaitForJob(*job, absl::Minutes(4));
    EXPECT_TRUE(status.ok()) << status.status();
    if (!status.ok()) return r;
    EXPECT_EQ(status->state(), v1::COMPLETED) << status->message();
    const auto& p = status->progress();
    r.accuracy = p.accuracy();
    r.ratio = p.bytes_pushed() ? double(p.fp32_bytes_pushed()) / p.bytes_pushed() : 0;
    r.pull_ratio = p.bytes_pulled() ? double(p.fp32_bytes_pulled()) / p.bytes_pulled() : 0;
    std::printf("%-26s accuracy %.4f  fp32/pushed %.1fx  fp32/pulled %.1fx\n",
                spec.name().c_str(), r.accuracy, r.ratio, r.pull_ratio);
    std::fflush(stdout);
    return r;
  }

  static LocalCluster* cluster_;
};
LocalCluster* FashionMnist::cluster_ = nullptr;

// One test, so fp32 runs once and every comparison reads the same baseline.
TEST_F(FashionMnist, DefaultPolicyKeepsEveryCodecWithinHalfAPointOfFp32) {
  const Result fp32 = Run(Spec("fmnist-none", "none"));
  ASSERT_GT(fp32.accuracy, 0.85) << "the CNN itself should learn Fashion-MNIST";

  const Result twobit = Run(Spec("fmnist-twobit", "twobit"));
  EXPECT_GE(twobit.accuracy, fp32.accuracy - kMargin);
  // fc1.weight (89% of elements) at 2 bits, the rest exact ([small tensors
  // exact]): 5.9x. Measured 2 Dec 2026: fp32 0.8774, twobit 0.8757, ternary
  // 0.8729, onebit 0.8747 (0.8781, 0.8773, 0.8758 with the small tensors
  // compressed too, at 16x).
  EXPECT_GT(twobit.ratio, 5.0) << "fc1.weight must be twobit";

  const Result ternary = Run(Spec("fmnist-ternary", "ternary"));
  EXPECT_GE(ternary.accuracy, fp32.accuracy - kMargin);

  const Result onebit = Run(Spec("fmnist-onebit", "onebit"));
  EXPECT_GE(onebit.accuracy, fp32.accuracy - kMargin);

  // Compressed pulls (see [pull codec]): twobit both ways, the small tensors
  // pulled fp32 by the default rule ([layer-wise pull]). Pulling every
  // tensor as twobit measured 0.8672, a point under fp32.
  v1::JobSpec both_ways = Spec("fmnist-twobit-pull-twobit", "twobit");
  both_ways.mutable_codec()->set_pull_codec("twobit");
  const Result pulled = Run(both_ways);
  EXPECT_GE(pulled.accuracy, fp32.accuracy - kMargin);
  // fc1.weight (89% of elements) at 16x, the rest fp32: about 6x.
  EXPECT_GT(pulled.pull_ratio, 5.0) << "pulls must be compressed, not fp32";

  // 1-bit SGD's lesson: without error feedback a biased codec loses what it
  // does not send. Only fc1.weight is twobit (the small tensors are exact),
  // and that alone costs about two points (0.8573 against 0.8757 measured).
  v1::JobSpec no_ef = Spec("fmnist-twobit-no-ef", "twobit");
  no_ef.mutable_codec()->set_disable_error_feedback(true);
  const Result without = Run(no_ef);
  EXPECT_LT(without.accuracy, fp32.accuracy - 0.01);

  // SSP with s = 3 against sync, same codec. Unlike sync, an SSP run depends
  // on timing: 15 runs (12 on the 2-core dev host, 3 in CI; the small tensors
  // ternary then) measured 0.8703 .. 0.8787, mean 0.8741, sd 0.0024, against
  // sync's 0.8781 -- the mean sits 0.4 point under sync, so a 0.5-point bound
  // on the mean of three runs (sd 0.0014) failed CI once in 0.8722; from these
  // runs' mean and spread it would fail about one run in five. With them exact
  // (2 Dec 2026): 0.8787, 0.8725, 0.8781 against sync's 0.8757.
  // The bound here is one point: 4 sd of a three-run mean below what SSP
  // measures, and close enough to catch a change of the size of scaling
  // stale pushes by 1/(1+staleness), whose four runs measured 0.8611 ..
  // 0.8694 (mean 0.8661, under the bound).
  constexpr double kSspMargin = 0.01;
  v1::JobSpec ssp = Spec("fmnist-twobit-ssp3", "twobit");
  ssp.mutable_consistency()->set_mode(v1::BOUNDED);
  ssp.mutable_consistency()->set_staleness(3);
  double bounded = 0;
  for (int run = 0; run < 3; ++run) {
    ssp.set_name(absl::StrCat("fmnist-twobit-ssp3-", run));
    bounded += Run(ssp).accuracy / 3;
  }
  EXPECT_GE(bounded, twobit.accuracy - kSspMargin);
}

}  // namespace
}  // namespace gradstream::testing
