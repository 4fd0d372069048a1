// The job's reports <-> their job.proto forms: PathPrecision and
// LinkDecision (precision.h) and TableRowStats (table_rows.h). The one
// converter of each, for the shard's stats and the coordinator's views.
#ifndef GRADSTREAM_COMMON_JOB_PRECISION_PROTO_H_
#define GRADSTREAM_COMMON_JOB_PRECISION_PROTO_H_

#include "common/job/precision.h"
#include "common/job/table_rows.h"
#include "job.pb.h"

namespace gradstream {

void PathPrecisionToProto(const PathPrecision& p, v1::PathPrecision* out);
// Unknown codec names read as kNone (a report, not an instruction).
PathPrecision PathPrecisionFromProto(const v1::PathPrecision& proto);

void TableRowStatsToProto(const TableRowStats& s, v1::TableRows* out);
TableRowStats TableRowStatsFromProto(const v1::TableRows& proto);

void LinkDecisionToProto(const LinkDecision& d, v1::LinkDecision* out);
LinkDecision LinkDecisionFromProto(const v1::LinkDecision& proto);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_JOB_PRECISION_PROTO_H_
