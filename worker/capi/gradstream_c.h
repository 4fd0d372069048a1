/* libgradstream_c: the parameter-server client (worker/client/ps_client.h)
 * behind a C ABI, for the Python package (python/gradstream, ctypes) and any
 * other language with a C FFI.
 *
 * Why a C ABI and not a CPython/torch extension: one .so works with every
 * Python 3 and every torch (Debian's 3.11 + torch 1.13 CPU, a 3.12 + torch
 * 2.x CUDA wheel elsewhere) without being rebuilt against torch's C++ ABI
 * or CPython's; tensors cross it as raw float pointers (torch's
 * tensor.data_ptr()), so nothing is copied on the way. Only gs_* symbols are
 * exported (a version script), so the gRPC/protobuf/Abseil inside never clash
 * with the host's.
 *
 * A session is one worker of one script job: it talks to its gs_worker (the
 * agent on a Unix socket, proto/agent.proto) for the assignment and progress,
 * and to the shards (PsClient) for the data path. See [script jobs] in
 * server/coordinator/coordinator_script.cc.
 *
 * Every int-returning call returns 0 on success, otherwise an absl status
 * code (3 InvalidArgument, 4 DeadlineExceeded, 9 FailedPrecondition, 1
 * Cancelled = the job ended, ...) with the message in gs_last_error() (per
 * thread). Thread-safe: gs_push may be called from several threads (torch's
 * autograd threads) at once. */
#ifndef GRADSTREAM_WORKER_CAPI_GRADSTREAM_C_H_
#define GRADSTREAM_WORKER_CAPI_GRADSTREAM_C_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gs_session gs_session;

/* The worker's place in the job, from its newest assignment. */
typedef struct gs_membership {
  int32_t active;       /* the job is PENDING or RUNNING and lists this worker */
  uint32_t rank;
  uint32_t world_size;
  uint64_t epoch;
  uint64_t epoch_clock; /* rank / world_size hold from this clock on */
  uint64_t join_clock;
  int32_t leave;        /* scale-down: finish clocks < leave_clock, then gs_leave */
  uint64_t leave_clock;
  uint64_t worker_id;
} gs_membership;

typedef struct gs_stats {
  uint64_t bytes_pushed;       /* encoded payload bytes */
  uint64_t fp32_bytes_pushed;  /* the same chunks as fp32 */
  uint64_t chunks_pushed;
  uint64_t bytes_pulled;
  uint64_t reconnects;
} gs_stats;

/* The message of the calling thread's last failed call ("" if none). */
const char* gs_last_error(void);

/* Connects to the agent at `agent` ("unix:/path/agent.sock") and reads the
 * assignment (waits up to timeout_ms until it lists this worker). NULL on
 * error (gs_last_error). */
gs_session* gs_open(const char* agent, int64_t timeout_ms);

/* Declares the model: tensor i is names[i] with ndims[i] dimensions, taken in
 * order from `dims`. Waits up to timeout_ms until the job's shard map exists
 * (rank 0's declaration makes it), checks it against the declaration
 * (FailedPrecondition naming the first difference: another rank declared
 * other tensors) and connects to the shards. */
int gs_declare(gs_session* s, int32_t num_tensors, const char* const* names,
               const int32_t* ndims, const int64_t* dims, int64_t timeout_ms);

/* The membership from the newest assignment (refreshed by gs_sync). */
int gs_membership_get(gs_session* s, gs_membership* out);

/* The membership in effect at `clock`: the job's newest committed epoch
 * whose effective clock is <= clock (rank = this worker's place in it;
 * active = 0 when it does not list the worker), from the epoch list the
 * agent sends; the newest assignment when the list has none for it. */
int gs_membership_at(gs_session* s, uint64_t clock, gs_membership* out);

/* The job's normalized spec (proto text format) into buf; the length it
 * needs (without the NUL) is returned via *len; truncated when too small. */
int gs_job_spec(gs_session* s, char* buf, int64_t size, int64_t* len);

/* Reports progress (clock completed, training loss, test accuracy at
 * accuracy_clock, samples/s; state 1 = running, 2 = left) to the agent and
 * refreshes the membership. */
int gs_sync(gs_session* s, uint64_t clock, float loss, float accuracy, uint64_t accuracy_clock,
            float samples_per_sec, int32_t state);

/* What gs_sync reports as the encode path (WorkerProgress.encode_path,
 * shown by `gradstream status`): "host" by default; the Python package says
 * "host-from-cuda" when it copies CUDA gradients to host memory first. */
int gs_set_encode_path(gs_session* s, const char* path);

/* Rank 0 of a job starting at clock 0: sends every tensor's initial values
 * (params[i] has the tensor's element count) and waits for the shards. */
int gs_init_params(gs_session* s, const float* const* params, int64_t timeout_ms);

/* Encodes tensor `tensor`'s gradient (num_elems floats) on the calling
 * thread and queues it to the shards for clock `clock`; `grad` may be reused
 * when it returns. The acknowledgement is waited for by gs_wait_pushes. */
int gs_push(gs_session* s, uint32_t tensor, const float* grad, uint64_t num_elems,
            uint64_t clock);

/* Waits until every queued push is acknowledged (the first error is
 * returned). */
int gs_wait_pushes(gs_session* s, int64_t timeout_ms);

/* Tells every shard this worker's clock is now `clock`. */
int gs_advance_clock(gs_session* s, uint64_t clock);

/* Pulls every tensor at reader clock `clock` into params[i] (the shard
 * answers when the consistency mode allows). Asks again while the job is
 * active; Cancelled when it ended, DeadlineExceeded after timeout_ms
 * without an answer. */
int gs_pull(gs_session* s, uint64_t clock, float* const* params, int64_t timeout_ms);

/* Waits for the pushes, sends Leave to every shard. */
int gs_leave(gs_session* s, int64_t timeout_ms);

int gs_stats_get(gs_session* s, gs_stats* out);

/* Closes the streams (no Leave) and frees the session. */
void gs_close(gs_session* s);

#ifdef __cplusplus
}
#endif

#endif /* GRADSTREAM_WORKER_CAPI_GRADSTREAM_C_H_ */
