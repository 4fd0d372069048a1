// The lifecycle of one Session stream on the shard (shard_server.cc's
// reactor), as explicit phases and named transitions, apart from gRPC so it
// can be tested alone.
//
// NOTE: [session lifecycle] A stream moves forward only, kOpen -> kHalfClosed
// -> kClosing -> kAborted -> kFinished -> kDone, skipping phases as events
// dictate. Finish() is called: never in kOpen; OK in kHalfClosed once every
// read message is handled and answered; OK in kClosing once the outbox is
// written (INVALID_ARGUMENT after a malformed frame); CANCELLED in kAborted
// once the message in hand and the outstanding write are done. Network events
// never move a stream back; Finish twice or OnDone before Finish CHECK-fail.
// (docs/design/session-lifecycle.md)
#ifndef GRADSTREAM_SERVER_SHARD_RPC_INTERNAL_SESSION_LIFECYCLE_H_
#define GRADSTREAM_SERVER_SHARD_RPC_INTERNAL_SESSION_LIFECYCLE_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace gradstream::shard::internal {

// Ordered: a later phase is further along (see [session lifecycle]).
enum class SessionPhase : uint8_t {
  kOpen,
  kHalfClosed,
  kClosing,
  kAborted,
  kFinished,
  kDone,
};

enum class SessionEvent : uint8_t {
  kPeerHalfClosed,  // a read completed with !ok: the worker is done writing
  kStreamError,     // the protocol handler failed the stream (StreamError queued)
  kCancelled,       // OnCancel: the worker cancelled or the connection broke
  kWriteFailed,     // a write completed with !ok
  kFinish,          // the reactor calls Finish()
  kDone,            // OnDone
};

// The phase after `event` in `phase`; CHECK-fails on a programmer error
// (kFinish once finished, kDone before kFinished).
SessionPhase NextPhase(SessionPhase phase, SessionEvent event);

absl::string_view PhaseName(SessionPhase phase);

}  // namespace gradstream::shard::internal

#endif  // GRADSTREAM_SERVER_SHARD_RPC_INTERNAL_SESSION_LIFECYCLE_H_
