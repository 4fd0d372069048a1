#include "worker/client/internal/stream_lifecycle.h"

#include "glog/logging.h"

namespace gradstream::client::internal {

StreamPhase NextStreamPhase(StreamPhase phase, StreamEvent event) {
  switch (event) {
    case StreamEvent::kLeave:
      // Leaving is only news to an open stream; a stopping or failed one
      // ends anyway.
      return phase == StreamPhase::kOpen ? StreamPhase::kLeaving : phase;
    case StreamEvent::kLeaveWritten:
      if (phase == StreamPhase::kStopping) return phase;
      CHECK(phase == StreamPhase::kLeaving)
          << "Leave written in phase " << StreamPhaseName(phase);
      return StreamPhase::kLeft;
    case StreamEvent::kStop:
      return phase == StreamPhase::kFailed ? phase : StreamPhase::kStopping;
    case StreamEvent::kWriterExited:
      if (phase == StreamPhase::kStopping || phase == StreamPhase::kFailed) return phase;
      CHECK(phase == StreamPhase::kLeft) << "writer exited in phase " << StreamPhaseName(phase);
      return StreamPhase::kClosed;
    case StreamEvent::kFail:
      return StreamPhase::kFailed;
  }
  LOG(FATAL) << "unknown StreamEvent " << static_cast<int>(event);
}

absl::string_view StreamPhaseName(StreamPhase phase) {
  switch (phase) {
    case StreamPhase::kOpen:
      return "open";
    case StreamPhase::kLeaving:
      return "leaving";
    case StreamPhase::kLeft:
      return "left";
    case StreamPhase::kClosed:
      return "closed";
    case StreamPhase::kStopping:
      return "stopping";
    case StreamPhase::kFailed:
      return "failed";
  }
  return "?";
}

ConnectionPhase NextConnectionPhase(ConnectionPhase phase, ConnectionEvent event) {
  switch (event) {
    case ConnectionEvent::kHelloAcked:
      return phase == ConnectionPhase::kAwaitingHelloAck ? ConnectionPhase::kReady : phase;
    case ConnectionEvent::kBroken:
      return ConnectionPhase::kBroken;
  }
  return phase;
}

}  // namespace gradstream::client::internal
