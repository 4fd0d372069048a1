// GPU workers through the real binaries (LABELS gpu): 2 gs_shard, a
// gs_coordinator and 2 gs_worker sharing one GPU train the CNN on synthetic
// 28x28 images, with gradients encoded on the device (--device_encode), on
// the host (copied as fp32, encoded on the CPU), and on CPU workers; then
// both GPU paths again with the job's default codec. Every GPU job must
// converge like the CPU one. Skips only when no CUDA
// device is present.
//
// Each job prints one line starting with GS_REPORT (accuracy, samples/s
// measured between clock 20 and the end, where gradients were encoded and
// the share of a step spent encoding and copying); scripts/gpu_check.sh
// collects them. GS_BIN_DIR, when set, names the directory holding the
// binaries (a relocated bundle); otherwise the build tree's are used.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/codec/cuda_codec.h"
#include "gtest/gtest.h"
#include "tests/training/cluster.h"

namespace gradstream::testing {
namespace {

ClusterBinaries Binaries() {
  const char* dir = std::getenv("GS_BIN_DIR");
  if (dir != nullptr && *dir != '\0') {
    const std::string d(dir);
    return {d + "/gs_coordinator", d + "/gs_shard", d + "/gs_worker"};
  }
  return {GS_COORDINATOR_BINARY, GS_SHARD_BINARY, GS_WORKER_BINARY};
}

void PutBigEndian32(std::ofstream& f, uint32_t v) {
  const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
  f.write(b, 4);
}

// MNIST-format files (IDX) of 10 classes: each class a fixed random 28x28
// template, each example its template plus pixel noise. Learnable in a few
// hundred steps, and the same bytes everywhere (fixed seeds).
void WriteSyntheticImages(const std::string& dir, int train, int test) {
  std::filesystem::create_directories(dir);
  std::mt19937 rng(2024);
  std::uniform_int_distribution<int> pixel(0, 255);
  std::vector<std::vector<int>> templates(10, std::vector<int>(28 * 28));
  for (auto& t : templates) {
    for (auto& p : t) p = pixel(rng) < 96 ? 220 : 20;
  }
  std::normal_distribution<float> noise(0.0f, 60.0f);
  auto write = [&](const char* images, const char* labels, int n) {
    std::ofstream fi(dir + "/" + images, std::ios::binary);
    std::ofstream fl(dir + "/" + labels, std::ios::binary);
    PutBigEndian32(fi, 0x00000803);
    PutBigEndian32(fi, n);
    PutBigEndian32(fi, 28);
    PutBigEndian32(fi, 28);
    PutBigEndian32(fl, 0x00000801);
    PutBigEndian32(fl, n);
    for (int i = 0; i < n; ++i) {
      const int label = i % 10;
      fl.put(static_cast<char>(label));
      for (int p : templates[label]) {
        const float v = p + noise(rng);
        fi.put(static_cast<char>(v < 0 ? 0 : v > 255 ? 255 : static_cast<int>(v)));
      }
    }
  };
  write("train-images-idx3-ubyte", "train-labels-idx1-ubyte", train);
  write("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", test);
}

struct JobResult {
  bool completed = false;
  double accuracy = 0;
  double samples_per_sec = 0;
  std::string encode_path;
  double encode_share = 0;
};

constexpr uint64_t kSteps = 300;
constexpr uint32_t kBatch = 32;
constexpr uint64_t kWarmup = 20;

// Runs the CNN job on a fresh cluster whose workers get `worker_args`:
// twobit with a fixed threshold, or with `default_codec` the job's defaults
// (ternary512, which the device sends as ternary; guarded pushes).
JobResult RunCnnJob(const std::string& label, const std::string& data_dir,
                    std::vector<std::string> worker_args, bool default_codec = false) {
  JobResult r;
  auto cluster = LocalCluster::Start(Binaries(), {.shards = 2, .workers = 2,
                                                  .worker_args = std::move(worker_args)});
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return r;
  EXPECT_TRUE((*cluster)->WaitForWorkers(2, absl::Seconds(60)).ok());
  v1::JobSpec spec;
  spec.set_name(label);
  spec.mutable_model()->set_type("cnn");
  spec.mutable_dataset()->set_mnist_dir(data_dir);
  spec.set_steps(kSteps);
  spec.set_batch_size(kBatch);
  spec.mutable_optimizer()->set_type("momentum");
  spec.mutable_optimizer()->set_learning_rate(0.02f);
  spec.mutable_optimizer()->set_momentum(0.9f);
  if (!default_codec) {
    spec.mutable_codec()->set_default_codec("twobit");
    spec.mutable_codec()->set_twobit_threshold(0.01f);
    spec.mutable_codec()->set_twobit_min_elems(1);  // twobit everywhere ([layer-wise codec])
  }
  spec.set_workers(2);
  spec.set_seed(7);
  spec.set_eval_every(kSteps);
  auto job = (*cluster)->Submit(spec);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return r;
  // Throughput from clock kWarmup on: model setup and cuDNN's first calls
  // are not training speed.
  EXPECT_TRUE((*cluster)->WaitForClock(*job, kWarmup, absl::Minutes(5)).ok());
  const absl::Time start = absl::Now();
  auto late = (*cluster)->WaitForClock(*job, kSteps - 5, absl::Minutes(10));
  EXPECT_TRUE(late.ok()) << late.status();
  if (late.ok()) {
    for (const auto& m : late->members()) {
      r.encode_path = m.encode_path();
      r.encode_share = std::max<double>(r.encode_share, m.encode_share());
    }
  }
  auto done = (*cluster)->WaitForJob(*job, absl::Minutes(10));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  EXPECT_TRUE(done.ok()) << done.status();
  if (!done.ok()) return r;
  EXPECT_EQ(done->state(), v1::COMPLETED) << done->message();
  r.completed = done->state() == v1::COMPLETED;
  r.accuracy = done->progress().accuracy();
  r.samples_per_sec = seconds > 0 ? (kSteps - kWarmup) * kBatch * 2 / seconds : 0;
  std::printf("GS_REPORT %s accuracy=%.4f samples_per_sec=%.0f encode_path=%s encode_share=%.4f\n",
              label.c_str(), r.accuracy, r.samples_per_sec, r.encode_path.c_str(),
              r.encode_share);
  std::fflush(stdout);
  return r;
}

TEST(GpuTraining, DeviceEncodedCnnConvergesLikeCpu) {
  if (!cuda::DeviceAvailable()) GTEST_SKIP() << "no CUDA device is present";
  const std::string data = ::testing::TempDir() + "/gs_gpu_training_images";
  WriteSyntheticImages(data, 6000, 1000);

  const JobResult cpu = RunCnnJob("cnn-cpu", data, {"--device=cpu"});
  const JobResult device = RunCnnJob("cnn-gpu-device-encode", data,
                                     {"--device=gpu", "--device_encode"});
  const JobResult host = RunCnnJob("cnn-gpu-host-encode", data, {"--device=gpu"});
  // The job's default codec, whose scales are statistics of each chunk.
  const JobResult device_defaults = RunCnnJob("cnn-gpu-device-encode-defaults", data,
                                              {"--device=gpu", "--device_encode"}, true);
  const JobResult host_defaults =
      RunCnnJob("cnn-gpu-host-encode-defaults", data, {"--device=gpu"}, true);
  ASSERT_TRUE(cpu.completed && device.completed && host.completed && device_defaults.completed &&
              host_defaults.completed);
  EXPECT_GE(cpu.accuracy, 0.5) << "the task must be learnable for the comparison to mean much";
  EXPECT_GE(device.accuracy, cpu.accuracy - 0.05);
  EXPECT_GE(host.accuracy, cpu.accuracy - 0.05);
  EXPECT_GE(device_defaults.accuracy, cpu.accuracy - 0.05);
  EXPECT_GE(host_defaults.accuracy, cpu.accuracy - 0.05);
  EXPECT_EQ(device_defaults.encode_path, "device");
  EXPECT_EQ(device.encode_path, "device");
  EXPECT_EQ(host.encode_path, "host-from-cuda");
  EXPECT_EQ(cpu.encode_path, "host");
}

}  // namespace
}  // namespace gradstream::testing
