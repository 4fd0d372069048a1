// See job_convert.h.
#include "server/shard/rpc/job_convert.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/job/codec_defaults.h"
#include "common/job/job_spec.h"
#include "common/job/precision.h"

namespace gradstream::shard {

namespace pb = ::gradstream::v1;

MembershipEpoch MembershipEpochFromProto(const pb::Membership& m) {
  return MembershipEpoch{m.epoch(),
                         m.effective_clock(),
                         {m.worker_ids().begin(), m.worker_ids().end()},
                         {m.departed().begin(), m.departed().end()}};
}

absl::StatusOr<JobOptions> JobOptionsFromProto(const pb::CreateJobRequest& req,
                                               const ShardServerOptions& server) {
  JobOptions o;
  o.job_id = req.job_id();
  o.shard_index = req.shard_index();
  // The entry point of the optimizer spec into the shard (see [normalized
  // spec]): the coordinator normalized it already, a test or tool may not have.
  pb::OptimizerSpec spec = req.optimizer();
  ApplyOptimizerDefaults(&spec);
  absl::StatusOr<OptimizerType> type = OptimizerTypeFromName(spec.type());
  if (!type.ok()) return type.status();
  OptimizerOptions opt;
  opt.type = *type;
  opt.learning_rate = spec.learning_rate();
  opt.momentum = spec.momentum();
  opt.epsilon = spec.epsilon();
  opt.initial_accumulator = spec.initial_accumulator();
  opt.beta1 = spec.beta1();
  opt.beta2 = spec.beta2();
  opt.weight_decay = spec.weight_decay();
  o.optimizer = opt;
  switch (req.consistency().mode()) {
    case pb::SYNC:
      o.consistency.mode = ConsistencyMode::kSync;
      break;
    case pb::BOUNDED:
      o.consistency.mode = ConsistencyMode::kBounded;
      break;
    case pb::ASYNC:
      o.consistency.mode = ConsistencyMode::kAsync;
      break;
    default:
      return absl::InvalidArgumentError("unknown consistency mode");
  }
  o.consistency.staleness = req.consistency().staleness();
  o.consistency.scale_stale_pushes = req.consistency().scale_stale_pushes();
  const uint64_t max_elems =
      static_cast<uint64_t>(server.max_message_bytes - kMessageOverhead) / sizeof(float);
  for (const pb::ChunkInfo& c : req.chunks()) {
    if (c.num_elems() > max_elems) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", c.chunk_id(), " has ", c.num_elems(),
                       " elements: an fp32 push would not fit the shard's ",
                       server.max_message_bytes, "-byte message limit"));
    }
    ChunkSpec spec{c.chunk_id(), c.num_elems(), c.pull_fp32(), std::nullopt};
    if (c.has_rows()) {
      // Rows travel in messages of up to 6 MiB of rows (kMaxPulledRowBytes
      // in job.cc, kMaxRowPushBytes in worker/client/ps_client.h), sized for
      // the default limit: a smaller one would refuse them mid-job.
      if (server.max_message_bytes < kMinTableMessageBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "table ", c.tensor(), ": a shard holds tables only with --max_message_bytes of at "
            "least ", kMinTableMessageBytes, " (rows travel in messages of up to 6 MiB); this "
            "shard's is ", server.max_message_bytes));
      }
      const pb::TablePartition& t = c.rows();
      if (uint64_t{t.dim()} * sizeof(float) > static_cast<uint64_t>(server.max_message_bytes)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "table ", c.tensor(), " has rows of ", t.dim(), " floats: one row would not fit the"
            " shard's ", server.max_message_bytes, "-byte message limit"));
      }
      spec.table = TableSpec{c.tensor(),     t.table_rows(), t.dim(),  t.partition(),
                             t.partitions(), t.init_std(),   t.seed()};
    }
    o.chunks.push_back(std::move(spec));
  }
  o.membership = MembershipEpochFromProto(req.membership());
  for (const pb::Membership& m : req.epochs()) o.epochs.push_back(MembershipEpochFromProto(m));
  o.resume = req.resume();
  o.resume_clock = req.resume_clock();
  o.checkpoint_every = req.checkpoint_every();
  o.checkpoint_dir = server.checkpoint_dir;
  o.max_pending_rounds = server.max_pending_rounds;
  o.default_pull_timeout = server.default_pull_timeout;
  o.token = req.job_token();
  o.pull_codec = static_cast<CodecType>(req.pull_codec());  // enums tied in common/codec/wire.cc
  if (!IsKnownCodec(o.pull_codec)) return absl::InvalidArgumentError("unknown pull codec");
  // A spec stored before the bound existed has 0: the default applies.
  const double bound =
      req.precision_bound() == 0 ? kDefaultPrecisionBound : req.precision_bound();
  if (!std::isfinite(bound)) return absl::InvalidArgumentError("precision_bound is not finite");
  const double max_owed =
      req.precision_max_owed() == 0 ? kDefaultPrecisionMaxOwed : req.precision_max_owed();
  if (!std::isfinite(max_owed)) {
    return absl::InvalidArgumentError("precision_max_owed is not finite");
  }
  if (!std::isfinite(req.pull_precision_bound())) {
    return absl::InvalidArgumentError("pull_precision_bound is not finite");
  }
  o.pull_precision = PullPrecisionPolicy(o.pull_codec, bound, req.precision_warmup(), max_owed,
                                         req.pull_precision_bound());
  o.pull_link.enabled = req.link_choice();
  return o;
}

}  // namespace gradstream::shard
