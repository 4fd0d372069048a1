// [C ABI threads]: the session's calls from several threads at once, as
// torch runs them -- pushes from "autograd" threads while the main thread
// reports, reads the membership and the pull's progress, ends clocks, waits
// per tensor from two threads, sees the job scaled and leaves -- against a
// real gs_shard and a real agent (gRPC on a Unix socket, answering as
// gs_worker's does). Asserts the training result; scripts/sanitize.sh runs
// it under ThreadSanitizer, which fails on any data race.
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "agent.grpc.pb.h"
#include "common/job/shard_map_proto.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "worker/capi/gradstream_c.h"
#include "worker/client/testing/shard_process.h"

#ifndef GS_SHARD_BINARY
#error "GS_SHARD_BINARY must name the gs_shard binary"
#endif

namespace gradstream {
namespace {

namespace v1 = gradstream::v1;
constexpr int kTensors = 6;
constexpr int kElems = 3000;
constexpr int kClocks = 12;
constexpr float kLr = 0.1f;

// Answers Sync as gs_worker's agent does: the newest assignment. Scale()
// announces a second epoch with world size 2, as a scale-up would.
class Agent final : public v1::WorkerAgent::Service {
 public:
  explicit Agent(v1::Assignment a) : assignment_(std::move(a)) {}

  grpc::Status Sync(grpc::ServerContext*, const v1::SyncRequest* req,
                    v1::SyncResponse* resp) override {
    absl::MutexLock l(&mu_);
    if (req->has_progress()) {
      last_clock_ = req->progress().clock();
      last_ = req->progress();
    }
    *resp->mutable_assignment() = assignment_;
    resp->set_worker_id(1);
    resp->set_incarnation(1);
    return grpc::Status::OK;
  }
  void Scale() {
    absl::MutexLock l(&mu_);
    assignment_.set_epoch(2);
    assignment_.set_world_size(2);
  }
  uint64_t last_clock() {
    absl::MutexLock l(&mu_);
    return last_clock_;
  }
  v1::WorkerProgress last() {
    absl::MutexLock l(&mu_);
    return last_;
  }

 private:
  absl::Mutex mu_;
  v1::Assignment assignment_ ABSL_GUARDED_BY(mu_);
  uint64_t last_clock_ ABSL_GUARDED_BY(mu_) = 0;
  v1::WorkerProgress last_ ABSL_GUARDED_BY(mu_);
};

TEST(CapiThreads, PushesFromManyThreadsWhileTheMainThreadSteps) {
  auto shard = client::testing::ShardProcess::Start(GS_SHARD_BINARY, {"--executor_threads=2"});
  ASSERT_TRUE(shard.ok()) << shard.status();
  std::vector<TensorSpec> specs;
  v1::JobSpec spec;
  spec.set_seed(7);
  spec.mutable_codec()->set_default_codec("none");
  spec.mutable_model()->set_type("script");
  for (int t = 0; t < kTensors; ++t) {
    specs.push_back(TensorSpec{absl::StrCat("t", t), kElems, {kElems}});
    v1::DeclaredTensor* d = spec.mutable_model()->add_tensors();
    d->set_name(specs.back().name);
    d->add_shape(kElems);
  }
  CodecPolicy fp32;
  fp32.default_codec = "none";
  auto map = SplitModel(specs, {(*shard)->address()}, 1024, fp32);
  ASSERT_TRUE(map.ok()) << map.status();
  client::testing::JobSetup setup;
  setup.optimizer.set_type("sgd");
  setup.optimizer.set_learning_rate(kLr);
  ASSERT_TRUE(client::testing::CreateJob(*map, setup, absl::Seconds(20)).ok());

  v1::Assignment a;
  a.set_job_id(setup.job_id);
  a.set_job_state(v1::RUNNING);
  a.set_world_size(1);
  a.set_epoch(1);
  *a.mutable_spec() = spec;
  *a.mutable_shard_map() = ShardMapToProto(*map);
  Agent agent(a);
  const std::string socket =
      absl::StrCat(::testing::TempDir(), "/capi_threads_", ::getpid(), ".sock");
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
  builder.RegisterService(&agent);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);

  gs_session* s = gs_open(("unix:" + socket).c_str(), 10000);
  ASSERT_NE(s, nullptr) << gs_last_error();
  std::vector<const char*> names;
  std::vector<int32_t> ndims(kTensors, 1);
  std::vector<int64_t> dims(kTensors, kElems);
  for (const TensorSpec& t : specs) names.push_back(t.name.c_str());
  ASSERT_EQ(gs_declare(s, kTensors, names.data(), ndims.data(), dims.data(), nullptr, 10000), 0)
      << gs_last_error();
  std::vector<std::vector<float>> params(kTensors, std::vector<float>(kElems, 1.0f));
  std::vector<float*> ptrs;
  for (auto& p : params) ptrs.push_back(p.data());
  std::vector<const float*> cptrs(ptrs.begin(), ptrs.end());
  ASSERT_EQ(gs_init_params(s, cptrs.data(), 20000), 0) << gs_last_error();
  ASSERT_EQ(gs_pull(s, 0, ptrs.data()), 0) << gs_last_error();

  const std::vector<float> grad(kElems, 1.0f);
  for (uint64_t clock = 0; clock < kClocks; ++clock) {
    // Three "autograd" threads push two tensors each while the main thread
    // reports and reads.
    std::atomic<int> failures{0};
    std::vector<std::thread> pushers;
    for (int th = 0; th < 3; ++th) {
      pushers.emplace_back([&, th] {
        for (int t = th; t < kTensors; t += 3) {
          if (gs_push(s, t, grad.data(), kElems, clock) != 0) ++failures;
        }
      });
    }
    gs_membership m;
    gs_stats st;
    const uint32_t first = 0;
    EXPECT_EQ(gs_record_step(s, static_cast<double>(clock + 1), 10), 0) << gs_last_error();
    EXPECT_EQ(gs_report(s, clock, 0.0f, 0), 0) << gs_last_error();
    EXPECT_EQ(gs_membership_get(s, &m), 0);
    EXPECT_EQ(gs_stats_get(s, &st), 0);
    gs_tensors_ready(s, &first, 1);
    if (clock == kClocks / 2) agent.Scale();
    for (auto& t : pushers) t.join();
    ASSERT_EQ(failures.load(), 0) << gs_last_error();
    if (clock == 1) {
      // Row asks: malformed arrays are refused and end nothing; an ask of a
      // tensor that is not a table is not asked (NULL handle), the clock ends.
      EXPECT_EQ(gs_end_clock_rows(s, clock, ptrs.data(), nullptr, -1, nullptr, nullptr, nullptr,
                                  nullptr, nullptr),
                3);
      EXPECT_EQ(gs_end_clock_rows(s, clock, ptrs.data(), nullptr, 1, nullptr, nullptr, nullptr,
                                  nullptr, nullptr),
                3);
      const uint32_t dense = 0;
      const uint64_t row = 0;
      const uint64_t* row_ids = &row;
      const int64_t count = 1;
      float out[kElems];
      float* outs = out;
      gs_rows* pull = reinterpret_cast<gs_rows*>(&out);
      ASSERT_EQ(gs_end_clock_rows(s, clock, ptrs.data(), nullptr, 1, &dense, &row_ids, &count,
                                  &outs, &pull),
                0)
          << gs_last_error();
      EXPECT_EQ(pull, nullptr);
    } else {
      ASSERT_EQ(gs_end_clock(s, clock, ptrs.data(), nullptr), 0) << gs_last_error();
    }
    // Two threads wait for halves of the model, as two modules' forwards.
    std::vector<std::thread> waiters;
    for (int half = 0; half < 2; ++half) {
      waiters.emplace_back([&, half] {
        const uint32_t mine[] = {static_cast<uint32_t>(3 * half),
                                 static_cast<uint32_t>(3 * half + 1),
                                 static_cast<uint32_t>(3 * half + 2)};
        if (gs_wait_tensors(s, mine, 3) != 0) ++failures;
      });
    }
    for (auto& t : waiters) t.join();
    ASSERT_EQ(failures.load(), 0);
  }
  // Every clock's pushes were applied once: 1 - lr * clocks everywhere.
  for (int t = 0; t < kTensors; ++t) {
    EXPECT_NEAR(params[t][0], 1.0f - kLr * kClocks, 1e-5f) << "tensor " << t;
    EXPECT_NEAR(params[t][kElems - 1], 1.0f - kLr * kClocks, 1e-5f) << "tensor " << t;
  }
  // The reporter thread delivered the newest report and read the scale.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  gs_membership m;
  do {
    ASSERT_EQ(gs_membership_get(s, &m), 0);
  } while ((m.world_size != 2 || agent.last_clock() != kClocks - 1) && absl::Now() < give_up &&
           (absl::SleepFor(absl::Milliseconds(20)), true));
  EXPECT_EQ(m.world_size, 2u);
  EXPECT_EQ(agent.last_clock(), kClocks - 1u);
  // The report is the runtime's meter: the loss averaged 0.9 old + 0.1 new
  // over the steps recorded (losses 1, 2, ..., kClocks), the client's bytes.
  double ema = 1;
  for (int c = 2; c <= kClocks; ++c) ema = 0.9 * ema + 0.1 * c;
  EXPECT_NEAR(agent.last().loss(), ema, 1e-4);
  EXPECT_GT(agent.last().bytes_pushed(), 0u);
  EXPECT_EQ(agent.last().encode_path(), "host");
  // Leave while another thread still reads.
  std::thread reader([&] {
    gs_stats st;
    for (int i = 0; i < 100; ++i) gs_stats_get(s, &st);
  });
  EXPECT_EQ(gs_leave(s, 20000), 0) << gs_last_error();
  reader.join();
  gs_close(s);
  server->Shutdown();
}

}  // namespace
}  // namespace gradstream
