// Runs a script job (JobSpec.entrypoint, see [script jobs] in
// server/coordinator/reconciler.h) on this worker: the user's
// training command as a child process, with the worker agent
// (proto/agent.proto) on a private Unix socket that the script's gradstream
// package talks to.
//
// NOTE: [script process] The command runs through /bin/sh -c in its own
// process group, in JobSpec.workdir, with the rendezvous environment:
//   GRADSTREAM_AGENT        unix:<private dir>/agent.sock (the package's way in)
//   GRADSTREAM_COORDINATOR, GRADSTREAM_JOB_ID, GRADSTREAM_WORKER_ID,
//   GRADSTREAM_RANK, GRADSTREAM_WORLD_SIZE  (at start; the package follows
//                           later changes through the agent)
//   GRADSTREAM_TLS_*        gs_worker's TLS files, for the script's shard streams
//   PYTHONPATH              the package's folder first, when it is not installed
// The job token and the shard map reach the script through the agent, never
// the environment (which other local users can read in /proc). The child
// gets SIGKILL if gs_worker dies (PR_SET_PDEATHSIG); when the job ends or
// the worker is moved off it, the group gets SIGTERM, then SIGKILL after a
// grace period. Its stderr is relayed line by line to gs_worker's, and the
// last lines are kept for the failure message.
#ifndef GRADSTREAM_WORKER_TRAINER_SCRIPT_RUNNER_H_
#define GRADSTREAM_WORKER_TRAINER_SCRIPT_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/rpc/rpc.h"
#include "coordinator.pb.h"
#include "worker/runtime/progress.h"
#include "worker/trainer/trainer.h"

namespace gradstream {

struct ScriptOptions {
  std::string coordinator;   // for GRADSTREAM_COORDINATOR
  std::string python_path;   // prepended to PYTHONPATH; "" = none
  rpc::TlsFiles tls;
  // The script must call the package's init within this, else it is
  // stopped and the job fails.
  absl::Duration init_deadline = absl::Seconds(120);
  absl::Duration stop_grace = absl::Seconds(10);
  int stderr_tail_lines = 20;
  // NOTE: [script stop] Set (by gs_worker's SIGTERM/SIGINT handler, see
  // [worker stop]) to leave the job gracefully, as the built-in trainer does
  // ([graceful stop]): the agent hands the script a leave at its current
  // clock, the same one a scale-down hands it, so the package finishes that
  // clock, sends Leave to every shard and exits 0 (kLeft), and the
  // coordinator records "left", not missed heartbeats. A script that has not
  // called init yet is stopped instead. nullptr = never.
  const std::atomic<bool>* stop = nullptr;
};

// What the runner needs from gs_worker's heartbeat side. Thread-safe calls.
struct ScriptHooks {
  std::function<v1::Assignment()> latest;  // the newest assignment
  // The job's committed membership epochs (SyncResponse.epochs).
  std::function<std::vector<v1::MembershipEpoch>()> epochs;
  // The script's declared tensors, for the heartbeats ([script jobs]).
  std::function<void(const google::protobuf::RepeatedPtrField<v1::DeclaredTensor>&)> declare;
  runtime::ProgressBoard* board = nullptr;
};

// Runs the script of job `start.job_id()` for worker `worker_id` /
// `incarnation` until it exits or the job is no longer this worker's.
// kDone: exit 0 after init; kLeft: exit 0 after it reported leaving;
// kStopped: the job ended or the worker was moved off it (the script was
// stopped). FailedPrecondition with the exit code (or signal) and the last
// stderr lines when it fails, exits 0 without ever calling init, or does
// not call init within options.init_deadline.
absl::StatusOr<TrainOutcome> RunScript(const v1::Assignment& start, uint64_t worker_id,
                                       uint64_t incarnation, const ScriptOptions& options,
                                       const ScriptHooks& hooks);

// The folder holding the gradstream package next to `exe` (a build tree's
// build/python, an install's share/gradstream/python), or "".
std::string FindPythonPackage(const std::string& exe);

}  // namespace gradstream

#endif  // GRADSTREAM_WORKER_TRAINER_SCRIPT_RUNNER_H_
