// See precision_proto.h.
#include "common/job/precision_proto.h"

#include <string>

namespace gradstream {
namespace {

CodecType CodecOrNone(const std::string& name) {
  absl::StatusOr<CodecType> c = CodecTypeFromName(name);
  return c.ok() ? *c : CodecType::kNone;
}

}  // namespace

void PathPrecisionToProto(const PathPrecision& p, v1::PathPrecision* out) {
  out->set_codec(std::string(CodecTypeName(p.codec)));
  out->set_ratio(p.ratio);
  out->set_relative(p.relative);
  out->set_flushes(p.flushes);
  out->set_raised(p.raised);
  for (const PrecisionEvent& e : p.events) {
    v1::PrecisionEvent* pe = out->add_events();
    pe->set_raise(e.kind == PrecisionEvent::Kind::kRaise);
    pe->set_clock(e.clock);
    pe->set_from(std::string(CodecTypeName(e.from)));
    pe->set_to(std::string(CodecTypeName(e.to)));
    pe->set_ratio(e.ratio);
    pe->set_owed(e.owed);
    pe->set_warmup(e.warmup);
  }
}

PathPrecision PathPrecisionFromProto(const v1::PathPrecision& proto) {
  PathPrecision p;
  p.codec = CodecOrNone(proto.codec());
  p.ratio = proto.ratio();
  p.relative = proto.relative();
  p.flushes = proto.flushes();
  p.raised = proto.raised();
  for (const v1::PrecisionEvent& e : proto.events()) {
    p.events.push_back(PrecisionEvent{
        e.raise() ? PrecisionEvent::Kind::kRaise : PrecisionEvent::Kind::kRelax, e.clock(),
        CodecOrNone(e.from()), CodecOrNone(e.to()), e.ratio(), e.owed(), e.warmup()});
  }
  return p;
}

void TableRowStatsToProto(const TableRowStats& s, v1::TableRows* out) {
  out->set_held(s.held);
  out->set_bytes(s.bytes);
  out->set_pushed(s.pushed);
  out->set_pulled(s.pulled);
  out->set_lost(s.lost);
}

TableRowStats TableRowStatsFromProto(const v1::TableRows& proto) {
  return TableRowStats{proto.held(), proto.bytes(), proto.pushed(), proto.pulled(), proto.lost()};
}

void LinkDecisionToProto(const LinkDecision& d, v1::LinkDecision* out) {
  out->set_clock(d.clock);
  out->set_exact(d.exact);
  out->set_exact_seconds(d.exact_seconds);
  out->set_codec_seconds(d.codec_seconds);
}

LinkDecision LinkDecisionFromProto(const v1::LinkDecision& proto) {
  return LinkDecision{proto.clock(), proto.exact(), proto.exact_seconds(), proto.codec_seconds()};
}

}  // namespace gradstream
