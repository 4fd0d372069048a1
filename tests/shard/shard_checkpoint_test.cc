// Checkpoint / restore with a real gs_shard: kill -9 after a checkpoint,
// restart on the same directory, and the job comes back with exactly the
// checkpointed parameters and AdaGrad state; training then continues. A
// corrupted checkpoint is refused with DATA_LOSS.
#include <signal.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/shard/shard_testing.h"

namespace gradstream::testing {
namespace {

const std::vector<uint32_t> kSizes = {64, 32};

pb::CreateJobRequest JobRequest(uint32_t checkpoint_every) {
  pb::CreateJobRequest req;
  req.set_job_id("ckpt");
  req.set_shard_index(0);
  req.mutable_optimizer()->set_type("adagrad");
  req.mutable_optimizer()->set_learning_rate(0.05f);
  req.mutable_consistency()->set_mode(pb::SYNC);
  for (size_t i = 0; i < kSizes.size(); ++i) {
    req.add_chunks()->set_chunk_id(i);
    req.mutable_chunks(i)->set_num_elems(kSizes[i]);
  }
  req.mutable_membership()->set_epoch(1);
  req.mutable_membership()->add_worker_ids(1);
  req.mutable_membership()->add_worker_ids(2);
  req.set_checkpoint_every(checkpoint_every);
  return req;
}

std::vector<float> Grad(uint64_t worker, uint64_t clock, uint32_t n) {
  std::vector<float> g(n);
  for (uint32_t i = 0; i < n; ++i) {
    g[i] = std::sin(0.1f * static_cast<float>(i + 7 * clock) + static_cast<float>(worker));
  }
  return g;
}

class ShardCheckpointTest : public ::testing::Test {
 protected:
  void StartShard() {
    auto proc = ShardProcess::Start({"--checkpoint_dir=" + dir_.path() + "/ckpt"});
    ASSERT_TRUE(proc.ok()) << proc.status();
    shard_ = std::move(*proc);
  }
  void TearDown() override { shard_.reset(); }

  // checkpoint_every 0: only explicit checkpoints, so the test knows which
  // one a restart finds.
  grpc::Status CreateJob(pb::CreateJobResponse* resp, uint32_t checkpoint_every = 0) {
    auto stub = shard_->Stub();
    return Call(stub.get(), &pb::ParameterServer::Stub::CreateJob, JobRequest(checkpoint_every),
                resp);
  }

  void Connect() {
    for (int w = 0; w < 2; ++w) {
      sess_[w] = std::make_unique<SessionClient>(shard_->Connect());
      ASSERT_TRUE(sess_[w]->Hello("ckpt", w + 1).ok());
    }
  }

  // Both workers push clock `clock` for every chunk and advance.
  void Step(uint64_t clock) {
    for (int w = 0; w < 2; ++w) {
      for (size_t c = 0; c < kSizes.size(); ++c) {
        auto ack = sess_[w]->Push(++seq_, c, clock, RawChunk(Grad(w + 1, clock, kSizes[c])));
        ASSERT_TRUE(ack.ok()) << ack.status();
        ASSERT_EQ(ack->code(), 0) << ack->message();
        ASSERT_FALSE(ack->duplicate());
      }
      sess_[w]->Clock(clock + 1);
    }
  }

  // All parameters at version `clock`, as raw bytes (compared bit for bit).
  std::string Params(uint64_t clock) {
    auto got = sess_[0]->Pull(++seq_, clock, {}, 20000);
    EXPECT_TRUE(got.ok()) << got.status();
    std::string all;
    if (!got.ok()) return all;
    for (const auto& pc : *got) {
      EXPECT_EQ(pc.code(), 0) << pc.message();
      EXPECT_EQ(pc.version(), clock);
      all += pc.values();
    }
    return all;
  }

  TempDir dir_;
  std::unique_ptr<ShardProcess> shard_;
  std::unique_ptr<SessionClient> sess_[2];
  uint64_t seq_ = 0;
};

TEST_F(ShardCheckpointTest, KillNineThenRestoreExactlyAndContinue) {
  StartShard();
  pb::CreateJobResponse created;
  ASSERT_TRUE(CreateJob(&created).ok());
  EXPECT_FALSE(created.restored());
  Connect();
  for (size_t c = 0; c < kSizes.size(); ++c) {
    ASSERT_EQ(sess_[0]->Init(++seq_, c, std::vector<float>(kSizes[c], 0.5f))->code(), 0);
  }
  for (uint64_t clock = 0; clock < 3; ++clock) Step(clock);
  const std::string p3 = Params(3);

  pb::CheckpointRequest creq;
  creq.set_job_id("ckpt");
  pb::CheckpointResponse cresp;
  auto stub = shard_->Stub();
  ASSERT_TRUE(Call(stub.get(), &pb::ParameterServer::Stub::Checkpoint, creq, &cresp).ok());
  EXPECT_EQ(cresp.clock(), 3u);
  EXPECT_GT(cresp.bytes(), 96u * 4 * 2);  // params + accumulators at least

  Step(3);  // state moves on past the checkpoint
  const std::string p4 = Params(4);
  ASSERT_NE(p3, p4);

  for (auto& s : sess_) s.reset();
  shard_->Kill(SIGKILL);
  StartShard();
  pb::CreateJobResponse restored;
  ASSERT_TRUE(CreateJob(&restored).ok());
  EXPECT_TRUE(restored.restored());
  EXPECT_EQ(restored.restored_clock(), 3u);
  Connect();
  EXPECT_EQ(Params(3), p3);  // bit-identical parameters

  // Clocks already in the checkpoint are duplicates.
  auto dup = sess_[0]->Push(++seq_, 0, 2, RawChunk(Grad(1, 2, kSizes[0])));
  ASSERT_TRUE(dup.ok());
  EXPECT_TRUE(dup->duplicate());

  // Redoing clock 3 gives exactly the pre-crash result: AdaGrad's
  // accumulators were restored too (the step size depends on them).
  Step(3);
  EXPECT_EQ(Params(4), p4);
  Step(4);  // and training goes on
  const std::string p5 = Params(5);
  EXPECT_EQ(p5.size(), p4.size());
}

TEST_F(ShardCheckpointTest, PeriodicCheckpointEveryNClocks) {
  StartShard();
  pb::CreateJobResponse created;
  ASSERT_TRUE(CreateJob(&created, /*checkpoint_every=*/2).ok());
  Connect();
  for (size_t c = 0; c < kSizes.size(); ++c) {
    ASSERT_EQ(sess_[0]->Init(++seq_, c, std::vector<float>(kSizes[c], 0.5f))->code(), 0);
  }
  const std::string path = dir_.path() + "/ckpt/ckpt.shard0.ckpt";
  FileWaiter waiter(path);  // watching before the writes, so no event is missed
  Step(0);
  Step(1);  // version 2: the shard writes a checkpoint by itself
  const std::string p2 = Params(2);
  ASSERT_TRUE(waiter.Wait(absl::Seconds(20)).ok());
  for (auto& s : sess_) s.reset();
  shard_->Kill(SIGKILL);
  StartShard();
  pb::CreateJobResponse restored;
  ASSERT_TRUE(CreateJob(&restored, 2).ok());
  EXPECT_TRUE(restored.restored());
  EXPECT_EQ(restored.restored_clock(), 2u);
  Connect();
  EXPECT_EQ(Params(2), p2);
}

TEST_F(ShardCheckpointTest, CorruptCheckpointIsAClearError) {
  StartShard();
  pb::CreateJobResponse created;
  ASSERT_TRUE(CreateJob(&created).ok());
  Connect();
  for (size_t c = 0; c < kSizes.size(); ++c) {
    ASSERT_EQ(sess_[0]->Init(++seq_, c, std::vector<float>(kSizes[c], 0.5f))->code(), 0);
  }
  Step(0);
  pb::CheckpointRequest creq;
  creq.set_job_id("ckpt");
  pb::CheckpointResponse cresp;
  auto stub = shard_->Stub();
  ASSERT_TRUE(Call(stub.get(), &pb::ParameterServer::Stub::Checkpoint, creq, &cresp).ok());
  for (auto& s : sess_) s.reset();
  shard_->Kill(SIGKILL);

  {  // flip one bit in the middle of the parameters
    std::fstream f(cresp.path(), std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << cresp.path();
    f.seekg(static_cast<std::streamoff>(cresp.bytes() / 2));
    char ch = 0;
    f.read(&ch, 1);
    ch ^= 0x10;
    f.seekp(static_cast<std::streamoff>(cresp.bytes() / 2));
    f.write(&ch, 1);
  }
  StartShard();
  pb::CreateJobResponse resp;
  grpc::Status st = CreateJob(&resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DATA_LOSS) << st.error_message();
  EXPECT_NE(st.error_message().find("CRC32C"), std::string::npos) << st.error_message();
}

}  // namespace
}  // namespace gradstream::testing
