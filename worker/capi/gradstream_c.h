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
 * server/coordinator/reconciler.h.
 *
 * Every int-returning call returns 0 on success, otherwise an absl status
 * code (3 InvalidArgument, 4 DeadlineExceeded, 9 FailedPrecondition, 1
 * Cancelled = the job ended, ...) with the message in gs_last_error() (per
 * thread).
 *
 * The data path is worker/client/step_loop.h's StepLoop, the loop the
 * built-in trainer runs too (see [step loop]): gs_push per tensor as
 * backward produces it (handed to the session's encode thread), gs_end_clock
 * (asks for the next clock's pull at once and returns when the pushes are
 * acknowledged, without waiting for the pull), gs_wait_tensors before a
 * layer reads its parameters. Pushes travel in buckets ([fused messages] in
 * worker/client/ps_client.h); GRADSTREAM_BUCKET_BYTES="FIRST,REST" in the
 * environment of gs_declare's caller overrides the bounds (bytes; 0,0 = no
 * buckets), for measuring them.
 *
 * NOTE: [C ABI threads] gs_open, gs_declare and gs_close are called by one
 * thread, with no other call of the same session running; gs_close last.
 * Every other call is thread-safe: gs_push in particular may run on several
 * threads at once (torch's autograd threads) while the main thread steps,
 * waits, reports, reads the membership or leaves. worker/capi/capi_threads_test.cc
 * checks this under ThreadSanitizer. */
#ifndef GRADSTREAM_WORKER_CAPI_GRADSTREAM_C_H_
#define GRADSTREAM_WORKER_CAPI_GRADSTREAM_C_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gs_session gs_session;
/* A row pull asked by gs_pull_rows_start and not yet waited for. */
typedef struct gs_rows gs_rows;

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
  uint64_t fp32_bytes_pulled;       /* the same pulls as fp32 */
  uint64_t bytes_pulled_discarded;  /* answers to pulls given up, part of bytes_pulled */
  uint64_t push_messages;           /* Push messages (buckets) sent */
  uint64_t pull_messages;           /* pull answer messages received */
  uint64_t encode_wakeups;          /* times the encode thread was woken for work */
} gs_stats;

/* An optimizer's job defaults (common/optim/optimizer_options.h). */
typedef struct gs_optimizer_defaults {
  int32_t type; /* 0 sgd, 1 momentum, 2 nesterov, 3 adagrad, 4 adam */
  float learning_rate;
  float momentum;
  float epsilon;
  float initial_accumulator;
  float beta1;
  float beta2;
  float weight_decay;
} gs_optimizer_defaults;

/* The message of the calling thread's last failed call ("" if none). */
const char* gs_last_error(void);

/* Connects to the agent at `agent` ("unix:/path/agent.sock") and reads the
 * assignment (waits up to timeout_ms until it lists this worker). NULL on
 * error (gs_last_error). Turns Abseil's lock-order checking off for the
 * process ([mutex deadlock detection] in common/mutex_mode.h). */
gs_session* gs_open(const char* agent, int64_t timeout_ms);

/* Declares the model: tensor i is names[i] with ndims[i] dimensions, taken in
 * order from `dims`; with table_std set and table_std[i] >= 0, tensor i is a
 * row-sparse table [rows, dim] that lives on the shards, its rows starting as
 * N(0, table_std[i]^2) (docs/design/sparse-tables.md): its pointer in every
 * gs_pull / gs_init_params / gs_end_clock array is ignored (may be NULL), and
 * it moves by gs_pull_rows / gs_push_rows. Waits up to timeout_ms until the job's shard map exists
 * (rank 0's declaration makes it), checks it against the declaration
 * (FailedPrecondition naming the first difference: another rank declared
 * other tensors) and connects to the shards. */
int gs_declare(gs_session* s, int32_t num_tensors, const char* const* names,
               const int32_t* ndims, const int64_t* dims, const float* table_std,
               int64_t timeout_ms);

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

/* Reports progress (clock completed; the loss average, samples/s and bytes
 * the session measured; the test accuracy measured at accuracy_clock, 0 =
 * none new; state 1 = running, 2 = left) to the agent and refreshes the
 * membership; waits for the agent's answer (up to 10 s). InvalidArgument
 * for an accuracy outside [0, 1]. */
int gs_sync(gs_session* s, uint64_t clock, float accuracy, uint64_t accuracy_clock,
            int32_t state);

/* gs_sync's report (state running) without waiting: the session's reporter
 * thread sends the newest one every 250 ms, when it refreshes the
 * membership, off the training step's critical path. The last error of the
 * reporter (the agent no longer answers) is returned by the next call. */
int gs_report(gs_session* s, uint64_t clock, float accuracy, uint64_t accuracy_clock);

/* A training step on `samples` samples ended with `loss` (NaN: not
 * measured): what the reported loss average and samples/s are made of. */
int gs_record_step(gs_session* s, double loss, uint64_t samples);

/* What gs_sync reports as the encode path (WorkerProgress.encode_path,
 * shown by `gradstream status`): "host" by default; the Python package says
 * "host-from-cuda" when it copies CUDA gradients to host memory first. */
int gs_set_encode_path(gs_session* s, const char* path);

/* Sends every tensor's initial values (params[i] has the tensor's element
 * count) when this worker is the one that does: rank 0 of a job it joins at
 * clock 0 (a script's ranks build their models independently); a no-op
 * otherwise. Waits for the shards. */
int gs_init_params(gs_session* s, const float* const* params, int64_t timeout_ms);

/* Hands tensor `tensor`'s gradient (num_elems floats) for clock `clock` to
 * the session's encode thread and returns at once ([encode thread] in
 * worker/client/step_loop.h): `grad` must stay valid and unchanged until
 * gs_end_clock for `clock` (or gs_wait_pushes, gs_leave) returns, whatever
 * it returns. FailedPrecondition for a second push of a tensor in one clock.
 * Encoding errors and acknowledgements are waited for by gs_end_clock or
 * gs_wait_pushes. */
int gs_push(gs_session* s, uint32_t tensor, const float* grad, uint64_t num_elems,
            uint64_t clock);

/* Rows ids[0..n) (repeats allowed) of table `tensor` at reader clock `clock`
 * (the consistency mode decides when, as for gs_pull) into out, n x dim
 * floats, row i at out + i * dim; waits up to timeout_ms. Any n: past 4 MiB
 * of rows the library asks in parts.
 * InvalidArgument for a tensor that is not a table or an id out of range. */
int gs_pull_rows(gs_session* s, uint32_t tensor, const uint64_t* ids, int64_t n, uint64_t clock,
                 float* out, int64_t timeout_ms);

/* gs_pull_rows without the wait, for a prefetch: asks and returns at once
 * with *pull, which exactly one gs_rows_wait or gs_rows_drop ends. `ids` is
 * copied; `out` must stay valid until then. What gs_pull_rows refuses comes
 * from gs_rows_wait; a non-zero return (not declared) leaves *pull NULL. */
int gs_pull_rows_start(gs_session* s, uint32_t tensor, const uint64_t* ids, int64_t n,
                       uint64_t clock, float* out, gs_rows** pull);

/* Waits up to timeout_ms for a gs_pull_rows_start (or an ask of
 * gs_end_clock_rows) and frees it, whatever it returns: nothing is written
 * into its `out` afterwards. */
int gs_rows_wait(gs_session* s, gs_rows* pull, int64_t timeout_ms);

/* Gives up a gs_pull_rows_start or an ask of gs_end_clock_rows: nothing is
 * written into its `out` after it returns. NULL is a no-op. */
void gs_rows_drop(gs_rows* pull);

/* The gradients of rows ids[0..n) (each at most once) of table `tensor` at
 * clock `clock`, n x dim floats, row i at grads + i * dim; copied before it
 * returns. At most once per table per clock: gs_end_clock sends an empty one
 * for a table not pushed, and waits for the acknowledgements.
 * InvalidArgument for a tensor that is not a table, an id out of range or
 * twice. */
int gs_push_rows(gs_session* s, uint32_t tensor, const uint64_t* ids, int64_t n,
                 const float* grads, uint64_t clock);

/* Ends clock `clock`: waits until the clock's gradients are encoded, pushes
 * zeros for every tensor not pushed in it (no rows for a table), asks for the pull of clock + 1
 * into next[i] (one pointer per tensor, valid until that pull is waited for
 * or abandoned; NULL = no pull: the last clock), waits (at most 60 s in
 * all) until the clock's pushes are acknowledged, then advances the clock
 * on every shard: a clock reported complete has its pushes on every shard
 * (see [step loop]). Does not wait for the pull. *leave (when not NULL) is
 * set to 1 when a scale-down ends this worker's part after this clock: no
 * pull is asked then, and the caller calls gs_leave. When it returns, the
 * encode thread no longer reads the clock's gradients. */
int gs_end_clock(gs_session* s, uint64_t clock, float* const* next, int32_t* leave);

/* gs_end_clock, with rows of tables asked in the same requests as the pull
 * of clock + 1 (no message of their own): for k < n, rows ids[k][0..
 * counts[k]) of table tensors[k] (each table at most once, the ids copied),
 * written into outs[k] (counts[k] x dim floats) by gs_rows_wait only, so
 * gs_rows_drop may come at any time. pulls[k] is set to the ask's handle,
 * ended by exactly one gs_rows_wait or gs_rows_drop, or to NULL where the
 * rows were not asked (no pull asked, that pull already in flight, a tensor
 * that is not a table, an id out of range, a table twice, more than 4 MiB of
 * rows in all): the caller asks for those itself. InvalidArgument, and the
 * clock not ended, for n < 0 or a NULL array when n > 0. */
int gs_end_clock_rows(gs_session* s, uint64_t clock, float* const* next, int32_t* leave, int32_t n,
                      const uint32_t* tensors, const uint64_t* const* ids, const int64_t* counts,
                      float* const* outs, gs_rows** pulls);

/* Asks for the pull of `clock` into params[i] unless that pull is in
 * flight already (another is abandoned). */
int gs_pull_start(gs_session* s, uint64_t clock, float* const* params);

/* Waits until tensors[0..n) (every tensor when n == 0) of the pull in
 * flight are in place. A pull is asked once, however long it takes on the
 * wire; DATA_LOSS (a shard lost its parameters) is answered by sending
 * this worker's parameters and asking again. Cancelled when the job ended
 * while waiting; DeadlineExceeded when no part of the pull arrived for
 * 3 minutes; FailedPrecondition when no pull was asked for. */
int gs_wait_tensors(gs_session* s, const uint32_t* tensors, int32_t n);

/* 1 when tensors[0..n) of the pull in flight are in place, else 0 (no
 * wait; for tests and schedulers). */
int gs_tensors_ready(gs_session* s, const uint32_t* tensors, int32_t n);

/* Gives up the pull in flight: nothing is written into its buffers once
 * this returns. */
int gs_abandon_pull(gs_session* s);

/* gs_pull_start then gs_wait_tensors for every tensor. */
int gs_pull(gs_session* s, uint64_t clock, float* const* params);

/* Waits until every push made so far is acknowledged: one deadline for
 * all (DeadlineExceeded), else the first push error. */
int gs_wait_pushes(gs_session* s, int64_t timeout_ms);

/* Abandons the pull in flight, waits for the pushes and sends Leave to
 * every shard; timeout_ms bounds the whole call. */
int gs_leave(gs_session* s, int64_t timeout_ms);

int gs_stats_get(gs_session* s, gs_stats* out);

/* Rank `rank` of `world_size`'s batches of one pass over perm[0..n) (the
 * pass's example order): per worker (batch_size > 0, global_batch_size 0)
 * or split from global batches (global_batch_size > 0, batch_size 0), the
 * rule of worker/runtime/data_split.h that the built-in trainer follows
 * too. The batches go to out back to back (room for n + world_size
 * indices), their lengths to sizes (room for n + 1), their number to
 * *num_batches. Needs no session. InvalidArgument for bad sizes or rank. */
int gs_split_pass(const int64_t* perm, int64_t n, uint32_t rank, uint32_t world_size,
                  int64_t batch_size, int64_t global_batch_size, int64_t* out, int64_t* sizes,
                  int64_t* num_batches);

/* The job's defaults for optimizer `type` ("" = the default type), what a
 * job's spec is normalized from; local mode uses them too. Needs no
 * session. InvalidArgument for an unknown type. */
int gs_optimizer_defaults_get(const char* type, gs_optimizer_defaults* out);

/* Stops the reporter, closes the streams (no Leave) and frees the
 * session. NULL is a no-op. */
void gs_close(gs_session* s);

#ifdef __cplusplus
}
#endif

#endif /* GRADSTREAM_WORKER_CAPI_GRADSTREAM_C_H_ */
