// The two questions about a job that need its whole spec (model, dataset,
// codec policy), which the coordinator's core never reads (see
// docs/design/coordinator-spec-at-the-edge.md): answered at the edge over
// common/job (rpc/coordinator_api.h).
#ifndef GRADSTREAM_SERVER_COORDINATOR_JOB_MODELS_H_
#define GRADSTREAM_SERVER_COORDINATOR_JOB_MODELS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job/shard_map.h"
#include "server/coordinator/types.h"

namespace gradstream::coordinator {

// Implementations are thread-safe.
class JobModels {
 public:
  virtual ~JobModels() = default;

  // The shard map of `spec`'s model over `shards` (addresses, in order):
  // its tensors cut into chunks, balanced by wire bytes and elements, on at
  // most as many shards as there are chunks. InvalidArgument from the model
  // or the split.
  virtual absl::StatusOr<ShardMap> Place(const JobSpec& spec,
                                         const std::vector<std::string>& shards) const = 0;

  // `spec` with `tensors` as its script's model. InvalidArgument naming the
  // bad tensor (none, a repeated name, a non-positive dimension, too large).
  virtual absl::StatusOr<JobSpec> Declare(const JobSpec& spec,
                                          const std::vector<DeclaredTensor>& tensors) const = 0;
};

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_JOB_MODELS_H_
