// PathPrecision (precision.h) <-> v1::PathPrecision (job.proto): the one
// converter, for the shard's stats and the coordinator's views.
#ifndef GRADSTREAM_COMMON_JOB_PRECISION_PROTO_H_
#define GRADSTREAM_COMMON_JOB_PRECISION_PROTO_H_

#include "common/job/precision.h"
#include "job.pb.h"

namespace gradstream {

void PathPrecisionToProto(const PathPrecision& p, v1::PathPrecision* out);
// Unknown codec names read as kNone (a report, not an instruction).
PathPrecision PathPrecisionFromProto(const v1::PathPrecision& proto);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_JOB_PRECISION_PROTO_H_
