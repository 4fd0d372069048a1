#include "server/shard/rpc/internal/session_lifecycle.h"

#include <algorithm>

#include "glog/logging.h"

namespace gradstream::shard::internal {
namespace {

// Network events only move a stream forward (see [session lifecycle]); past
// kAborted they have nothing left to stop.
SessionPhase AtLeast(SessionPhase phase, SessionPhase target) { return std::max(phase, target); }

}  // namespace

SessionPhase NextPhase(SessionPhase phase, SessionEvent event) {
  switch (event) {
    case SessionEvent::kPeerHalfClosed:
      return AtLeast(phase, SessionPhase::kHalfClosed);
    case SessionEvent::kStreamError:
      return AtLeast(phase, SessionPhase::kClosing);
    case SessionEvent::kCancelled:
    case SessionEvent::kWriteFailed:
      return AtLeast(phase, SessionPhase::kAborted);
    case SessionEvent::kFinish:
      CHECK(phase < SessionPhase::kFinished) << "Finish() in phase " << PhaseName(phase);
      return SessionPhase::kFinished;
    case SessionEvent::kDone:
      CHECK(phase == SessionPhase::kFinished) << "OnDone in phase " << PhaseName(phase);
      return SessionPhase::kDone;
  }
  LOG(FATAL) << "unknown SessionEvent " << static_cast<int>(event);
}

absl::string_view PhaseName(SessionPhase phase) {
  switch (phase) {
    case SessionPhase::kOpen:
      return "open";
    case SessionPhase::kHalfClosed:
      return "half-closed";
    case SessionPhase::kClosing:
      return "closing";
    case SessionPhase::kAborted:
      return "aborted";
    case SessionPhase::kFinished:
      return "finished";
    case SessionPhase::kDone:
      return "done";
  }
  return "?";
}

}  // namespace gradstream::shard::internal
