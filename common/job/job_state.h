// Questions about a job's lifecycle state (v1::JobState) that the
// coordinator, the CLI and the tests all ask; answered here once. Header
// only: it needs nothing but the generated coordinator.proto types, which
// gs_job (and so every user of the job description) links.
#ifndef GRADSTREAM_COMMON_JOB_JOB_STATE_H_
#define GRADSTREAM_COMMON_JOB_JOB_STATE_H_

#include "coordinator.pb.h"

namespace gradstream {

// True for the states a job never leaves (COMPLETED, FAILED, CANCELLED):
// its workers are released, its shards drop it, and `gradstream watch`
// stops. PENDING and RUNNING are not terminal.
inline bool IsTerminal(gradstream::v1::JobState state) {
  return state == gradstream::v1::COMPLETED || state == gradstream::v1::FAILED ||
         state == gradstream::v1::CANCELLED;
}

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_JOB_JOB_STATE_H_
