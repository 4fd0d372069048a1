// The lifecycle of one Session stream on the shard (shard_server.cc's
// reactor), as explicit phases and named transitions, apart from gRPC so it
// can be tested alone.
//
// NOTE: [session lifecycle]
// A stream moves forward only:
//   kOpen -> kHalfClosed -> kClosing -> kAborted -> kFinished -> kDone
// skipping phases as events dictate. Each phase says when the reactor may
// call Finish():
//   kOpen        never: messages are read and handled.
//   kHalfClosed  the worker finished writing; Finish(OK) once every read
//                message is handled, every answer written and every pull
//                that reached a job answered.
//   kClosing     a StreamError is queued; nothing more is read or handled;
//                Finish(OK) once the outbox is written (late pull answers
//                are still written); Finish(INVALID_ARGUMENT) when the error
//                was a frame that is not a WorkerMessage (see [malformed
//                frames] in shard_server.cc).
//   kAborted     cancelled, or a write failed: nothing more is read,
//                handled or written; Finish(CANCELLED) once the message
//                being handled is done and the outstanding write completed.
//   kFinished    Finish() was called; gRPC calls OnDone next.
//   kDone        OnDone ran: the reactor lets go of itself.
// Events that come from the network (the worker half-closes, cancels, a
// write fails) may arrive in any phase and never move a stream back: in a
// later phase they change nothing. Finishing twice, or OnDone before
// Finish, are programmer errors (CHECK).
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
