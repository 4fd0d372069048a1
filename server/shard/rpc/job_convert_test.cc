// JobOptionsFromProto: what a CreateJobRequest's error control becomes on the
// shard (common/job/precision.h).
#include "server/shard/rpc/job_convert.h"

#include <limits>

#include "gtest/gtest.h"

namespace gradstream::shard {
namespace {

v1::CreateJobRequest TernaryPulls() {
  v1::CreateJobRequest req;
  req.set_job_id("j");
  req.mutable_optimizer()->set_type("sgd");
  req.set_pull_codec(v1::CODEC_TERNARY);
  req.set_precision_bound(8);
  return req;
}

// Without a pull bound of its own a pull is held to half the job's bound (a
// coordinator that predates the field sends none); with one, to that one.
TEST(JobOptionsFromProto, PullsTakeTheirOwnBoundOrHalfTheJobs) {
  v1::CreateJobRequest req = TernaryPulls();
  absl::StatusOr<JobOptions> o = JobOptionsFromProto(req, ShardServerOptions{});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_DOUBLE_EQ(o->pull_precision.bound, 4.0);

  req.set_pull_precision_bound(2);
  o = JobOptionsFromProto(req, ShardServerOptions{});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_DOUBLE_EQ(o->pull_precision.bound, 2.0);

  req.set_pull_precision_bound(std::numeric_limits<float>::infinity());
  o = JobOptionsFromProto(req, ShardServerOptions{});
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(o.status().message(), "pull_precision_bound is not finite");
}

}  // namespace
}  // namespace gradstream::shard
