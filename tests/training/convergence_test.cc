// Does training still converge when gradients are compressed? The answer
// users ask for first, measured through the real processes: 2 gs_shard,
// gs_coordinator and 4 gs_worker on loopback.
//
// The task is a small reference problem (worker/data/synthetic.h): MLP 20-64-10,
// ReLU, synthetic 10 classes x 3 Gaussian clusters in 20 dims (sigma 1, data
// seed 12345), 20k train / 5k test, 4 workers with strided shards, batch 32,
// 1500 clocks, server momentum 0.9, lr 0.05, every tensor compressed.
// Reference accuracies from a simulator: fp32 0.915, TernGrad clipped 0.910,
// 2-bit + error feedback 0.915, 2-bit without it 0.414.
#include <cstdio>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "tests/training/cluster.h"

namespace gradstream::testing {
namespace {

ClusterBinaries Binaries() {
  return {GS_COORDINATOR_BINARY, GS_SHARD_BINARY, GS_WORKER_BINARY};
}

struct Result {
  double accuracy = 0;
  uint64_t bytes = 0, fp32_bytes = 0;
  uint64_t pulled = 0, fp32_pulled = 0;
  double seconds = 0;
};

class Convergence : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto c = LocalCluster::Start(Binaries(), {.shards = 2, .workers = 4});
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  static v1::JobSpec Reference(const std::string& name) {
    v1::JobSpec s;
    s.set_name(name);
    s.mutable_model()->set_type("mlp");
    s.mutable_model()->add_hidden(64);
    auto* syn = s.mutable_dataset()->mutable_synthetic();
    syn->set_classes(10);
    syn->set_clusters_per_class(3);
    syn->set_dims(20);
    syn->set_noise(1.0f);
    syn->set_seed(12345);
    syn->set_train_size(20000);
    syn->set_test_size(5000);
    s.set_steps(1500);
    s.set_batch_size(32);
    s.mutable_optimizer()->set_type("momentum");
    s.mutable_optimizer()->set_learning_rate(0.05f);
    s.mutable_optimizer()->set_momentum(0.9f);
    s.mutable_codec()->set_default_codec("none");
    // Every tensor of this MLP is under [small tensors exact]'s size: the
    // codecs below compress them all.
    s.mutable_codec()->set_min_compress_elems(1);
    // The codecs alone: the precision guard raises fixed-t twobit as the
    // gradients shrink and this MLP's ternary pulls (docs/design/
    // precision-control.md, "Fixed thresholds"); torch_precision_guard_test
    // covers the guard.
    s.mutable_codec()->set_precision_bound(-1);
    s.set_workers(4);
    s.set_seed(7);
    s.set_eval_every(1500);
    return s;
  }

  // Runs a job to completion and returns its final numbers.
  static Result Run(const v1::JobSpec& spec) {
    Result r;
    const absl::Time start = absl::Now();
    auto job = cluster_->Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return r;
    auto status = cluster_->WaitForJob(*job, absl::Minutes(5));
    EXPECT_TRUE(status.ok()) << status.status();
    if (!status.ok()) return r;
    EXPECT_EQ(status->state(), v1::COMPLETED) << status->message();
    r.accuracy = status->progress().accuracy();
    r.bytes = status->progress().bytes_pushed();
    r.fp32_bytes = status->progress().fp32_bytes_pushed();
    r.pulled = status->progress().bytes_pulled();
    r.fp32_pulled = status->progress().fp32_bytes_pulled();
    r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    std::printf(
        "%-28s accuracy %.4f  pushed %10llu B  fp32 %10llu B  (%.1fx)  pulled %.1fx  %.1f s\n",
        spec.name().c_str(), r.accuracy, static_cast<unsigned long long>(r.bytes),
        static_cast<unsigned long long>(r.fp32_bytes),
        r.bytes ? double(r.fp32_bytes) / r.bytes : 0.0,
        r.pulled ? double(r.fp32_pulled) / r.pulled : 0.0, r.seconds);
    std::fflush(stdout);
    return r;
  }

  static LocalCluster* cluster_;
};

LocalCluster* Convergence::cluster_ = nullptr;

TEST_F(Convergence, CompressedCodecsMatchFp32AndErrorFeedbackIsWhatMakesTwoBitWork) {
  const Result fp32 = Run(Reference("fp32-sync"));
  EXPECT_GE(fp32.accuracy, 0.90) << "fp32 must reach the reference (0.915)";

  v1::JobSpec ternary = Reference("ternary-clipped");
  ternary.mutable_codec()->set_default_codec("ternary");
  ternary.mutable_codec()->set_ternary_clip(2.5f);
  ternary.mutable_codec()->set_disable_error_feedback(true);  // TernGrad: unbiased, no residual
  const Result tern = Run(ternary);
  // 1.5 points: TernGrad without a residual ends about a point under fp32
  // here, and unlike fp32's and twobit's its figure moves from run to run:
  // 0.9126-0.9178 in five runs against fp32's 0.9236 every time (29 Nov
  // 2026; one CI run failed the earlier 1 point).
  EXPECT_GE(tern.accuracy, fp32.accuracy - 0.015);

  v1::JobSpec twobit = Reference("twobit-ef");
  twobit.mutable_codec()->set_default_codec("twobit");
  twobit.mutable_codec()->set_twobit_threshold(0.5f);
  // Twobit on every tensor: this MLP's tensors are all below the layer-wise
  // rule's size (see [layer-wise codec]), which would send them as ternary.
  twobit.mutable_codec()->set_twobit_min_elems(1);
  const Result tb = Run(twobit);
  EXPECT_GE(tb.accuracy, fp32.accuracy - 0.01);
  // Every tensor compressed: 2 bits instead of 32 (header bytes not counted).
  EXPECT_LE(tb.bytes * 15, tb.fp32_bytes);

  v1::JobSpec no_ef = twobit;
  no_ef.set_name("twobit-no-ef");
  no_ef.mutable_codec()->set_disable_error_feedback(true);
  const Result tb_no_ef = Run(no_ef);
  EXPECT_LE(tb_no_ef.accuracy, fp32.accuracy - 0.10)
      << "without error feedback, 2-bit thresholding drops almost every gradient (reference 0.414)";
}

TEST_F(Convergence, BoundedStalenessMatchesSync) {
  v1::JobSpec bsp = Reference("twobit-bsp");
  bsp.mutable_codec()->set_default_codec("twobit");
  bsp.mutable_codec()->set_twobit_min_elems(1);
  const Result sync = Run(bsp);
  v1::JobSpec ssp = bsp;
  ssp.set_name("twobit-ssp-s3");
  ssp.mutable_consistency()->set_mode(v1::BOUNDED);
  ssp.mutable_consistency()->set_staleness(3);
  const Result bounded = Run(ssp);
  EXPECT_GE(sync.accuracy, 0.90);
  EXPECT_GE(bounded.accuracy, sync.accuracy - 0.01);
}

// Compressed pulls (see [pull codec]): the workers train on the shards'
// published copy, which trails the parameters by one codec residual; at the
// same number of steps they stay within 0.5 pt of fp32 pulls.
TEST_F(Convergence, CompressedPullsMatchFp32Pulls) {
  v1::JobSpec fp32_pull = Reference("twobit-push-fp32-pull");
  fp32_pull.mutable_codec()->set_default_codec("twobit");
  fp32_pull.mutable_codec()->set_twobit_min_elems(1);  // twobit on every tensor, as above
  fp32_pull.mutable_codec()->set_pull_codec("none");
  const Result base = Run(fp32_pull);
  EXPECT_GE(base.accuracy, 0.90);
  EXPECT_EQ(base.pulled, base.fp32_pulled);
  for (const char* codec : {"twobit", "ternary"}) {
    v1::JobSpec spec = fp32_pull;
    spec.set_name(absl::StrCat("twobit-push-", codec, "-pull"));
    spec.mutable_codec()->set_pull_codec(codec);
    // Every tensor of this small MLP is under the layer-wise pull rule's
    // size ([layer-wise pull]); compress them all, as twobit pushes above.
    spec.mutable_codec()->set_pull_min_elems(1);
    const Result r = Run(spec);
    EXPECT_GE(r.accuracy, base.accuracy - 0.005) << codec;
    // Mostly 2-bit deltas; each worker's first pull of a chunk is a snapshot.
    EXPECT_LE(r.pulled * 8, r.fp32_pulled) << codec;
  }
}

TEST_F(Convergence, ServerAdagradConverges) {
  v1::JobSpec spec = Reference("twobit-adagrad");
  spec.mutable_codec()->set_default_codec("twobit");
  spec.mutable_codec()->set_twobit_min_elems(1);
  spec.mutable_optimizer()->set_type("adagrad");
  spec.mutable_optimizer()->set_learning_rate(0.05f);
  const Result r = Run(spec);
  EXPECT_GE(r.accuracy, 0.88);
}

}  // namespace
}  // namespace gradstream::testing
