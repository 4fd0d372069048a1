// Per-worker Session credentials (see [worker tokens]).
//
// NOTE: [worker tokens]
// A job's token (CreateJobRequest.job_token, minted by the coordinator)
// opens every Session of the job for any worker id, so it stays with the
// coordinator and the shards. A worker gets a token minted for it alone:
//   "w1." + hex(HMAC-SHA256(job token, job id NUL worker id NUL incarnation))
// (Assignment.job_token carries it). The shard recomputes it from Hello's job,
// worker and incarnation, so a member can say Hello only as itself, in the
// incarnation the coordinator assigned: not as another member, nor as a
// later incarnation of itself or of anyone. Nothing changes on the wire: the
// worker presents it as the bearer token, as it presented the job token.
#ifndef GRADSTREAM_COMMON_RPC_WORKER_TOKEN_H_
#define GRADSTREAM_COMMON_RPC_WORKER_TOKEN_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace gradstream::rpc {

// The token of (job_id, worker, incarnation) under `job_token`; "" when
// `job_token` is empty (a job without a token needs none).
std::string WorkerToken(absl::string_view job_token, absl::string_view job_id, uint64_t worker,
                        uint64_t incarnation);

// Whether `presented` is that token (constant-time comparison).
bool IsWorkerToken(absl::string_view presented, absl::string_view job_token,
                   absl::string_view job_id, uint64_t worker, uint64_t incarnation);

}  // namespace gradstream::rpc

#endif  // GRADSTREAM_COMMON_RPC_WORKER_TOKEN_H_
