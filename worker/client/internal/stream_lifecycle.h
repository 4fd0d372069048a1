// The lifecycles of one shard's Session stream on the client (ShardStream,
// shard_stream.h) and of each connection it makes, as explicit phases and
// named transitions, apart from gRPC and threads so they can be tested alone.
//
// NOTE: [client stream lifecycle] A ShardStream takes work only while kOpen,
// connected or not ([client streams] in ../ps_client.h); kLeaving and later
// refuse new work, kFailed with the stream's error. The writer thread is gone
// in kClosed, and in kStopping/kFailed once Stop() returned. A connection goes
// kAwaitingHelloAck -> kReady -> kBroken. Connection events come from the
// network and never crash; stream transitions the code cannot make CHECK-fail.
// (docs/design/client-stream-lifecycle.md)
#ifndef GRADSTREAM_WORKER_CLIENT_INTERNAL_STREAM_LIFECYCLE_H_
#define GRADSTREAM_WORKER_CLIENT_INTERNAL_STREAM_LIFECYCLE_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace gradstream::client::internal {

enum class StreamPhase : uint8_t {
  kOpen,      // takes work; connecting, connected or reconnecting
  kLeaving,   // Leave() queued a Leave: what is queued goes out, then Leave
  kLeft,      // Leave was written; the shard closes the stream
  kClosed,    // after Leave, the writer thread returned
  kStopping,  // Stop(): the connection is cancelled, the writer returns
  kFailed,    // permanent error; every un-answered message completed with it
};

enum class StreamEvent : uint8_t {
  kLeave,         // Leave() was called
  kLeaveWritten,  // the writer wrote Leave and half-closed
  kStop,          // Stop() was called
  kWriterExited,  // the writer thread returned (not after a failure)
  kFail,          // FailAll: a permanent error, or Stop() finishing
};

// The phase after `event` in `phase` (see [client stream lifecycle]);
// CHECK-fails on a transition the stream's own code cannot make.
StreamPhase NextStreamPhase(StreamPhase phase, StreamEvent event);
absl::string_view StreamPhaseName(StreamPhase phase);

enum class ConnectionPhase : uint8_t {
  kAwaitingHelloAck,  // Hello sent (or about to be)
  kReady,             // HelloAck with the expected chunks: the writer may send
  kBroken,            // the stream ended or cannot be used; the writer stops
};

enum class ConnectionEvent : uint8_t {
  kHelloAcked,  // a HelloAck listing the expected chunks
  kBroken,      // the reader saw the end, or a HelloAck with other chunks
};

// Network-driven: legal in every phase; a HelloAck after the first, or once
// broken, changes nothing.
ConnectionPhase NextConnectionPhase(ConnectionPhase phase, ConnectionEvent event);

}  // namespace gradstream::client::internal

#endif  // GRADSTREAM_WORKER_CLIENT_INTERNAL_STREAM_LIFECYCLE_H_
