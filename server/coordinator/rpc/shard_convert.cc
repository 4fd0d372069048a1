// See shard_convert.h.
#include "server/coordinator/rpc/shard_convert.h"

#include "common/job/job_spec.h"
#include "common/job/precision_proto.h"
#include "common/job/shard_map_proto.h"
#include "server/coordinator/rpc/coordinator_convert.h"

namespace gradstream::coordinator {

namespace v1 = gradstream::v1;

namespace {

void MembershipToProto(const MembershipEpoch& e, v1::Membership* proto) {
  proto->set_epoch(e.epoch);
  proto->set_effective_clock(e.effective_clock);
  for (uint64_t w : e.worker_ids) proto->add_worker_ids(w);
  for (uint64_t w : e.departed) proto->add_departed(w);
}

}  // namespace

v1::CreateJobRequest CreateJobToProto(const ShardJob& job) {
  const v1::JobSpec spec = JobSpecToProto(job.spec);
  v1::CreateJobRequest req;
  req.set_job_id(job.job_id);
  *req.mutable_optimizer() = spec.optimizer();
  *req.mutable_consistency() = spec.consistency();
  for (const ChunkInfo& c : job.chunks) {
    v1::ChunkInfo* chunk = req.add_chunks();
    *chunk = ChunkInfoToProto(c);
    // A table's rows start from the job's seed (docs/design/sparse-tables.md).
    if (chunk->has_rows()) chunk->mutable_rows()->set_seed(spec.seed());
  }
  MembershipToProto(job.membership, req.mutable_membership());
  req.set_checkpoint_every(spec.checkpoint_every());
  req.set_shard_index(job.shard_index);
  req.set_job_token(job.job_token);
  req.set_pull_codec(PullCodecForJob(spec));
  req.set_precision_bound(spec.codec().precision_bound());
  req.set_pull_precision_bound(spec.codec().pull_precision_bound());
  req.set_precision_warmup(spec.codec().precision_warmup());
  req.set_precision_max_owed(spec.codec().precision_max_owed());
  req.set_link_choice(CodecPolicyFromProto(spec.codec()).link_choice);
  for (const MembershipEpoch& e : job.epochs) MembershipToProto(e, req.add_epochs());
  req.set_resume(job.resume);
  req.set_resume_clock(job.resume_clock);
  return req;
}

ShardJobCreated CreatedFromProto(const v1::CreateJobResponse& proto) {
  return ShardJobCreated{proto.restored(), proto.restored_clock()};
}

v1::MembershipUpdate UpdateToProto(const std::string& job_id, const MembershipEpoch& epoch) {
  v1::MembershipUpdate update;
  update.set_job_id(job_id);
  MembershipToProto(epoch, update.mutable_membership());
  return update;
}

ShardJobStats StatsFromProto(const v1::StatsResponse& proto) {
  ShardJobStats s;
  s.min_clock = proto.min_clock();
  s.max_version = proto.max_version();
  s.max_clock = proto.max_clock();
  s.min_version = proto.min_version();
  s.checkpoint_failures = proto.checkpoint_failures();
  s.checkpoint_error = proto.checkpoint_error();
  s.max_staleness = proto.max_staleness();
  for (const v1::ChunkPrecision& c : proto.precision()) {
    if (c.has_pull()) s.pull_precision.emplace_back(c.chunk_id(), PathPrecisionFromProto(c.pull()));
    if (c.has_push()) s.push_precision.emplace_back(c.chunk_id(), PathPrecisionFromProto(c.push()));
  }
  if (proto.has_pull_link()) s.pull_link = LinkDecisionFromProto(proto.pull_link());
  for (const v1::TablePartitionStats& t : proto.tables()) {
    s.tables.emplace_back(t.chunk_id(), TableRowStatsFromProto(t.rows()));
  }
  return s;
}

}  // namespace gradstream::coordinator
