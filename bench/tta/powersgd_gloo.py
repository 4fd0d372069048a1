"""PyTorch's PowerSGD DDP comm hooks made to run under gloo (PyTorch 1.13).

NOTE: [powersgd under gloo] Two failures, two causes, fixed here without
touching torch:

1. powerSGD_hook aborts in gloo's pair.cc ("... 16384 vs 2144": the two ranks
   exchange buffers of different sizes in one collective). The hook issues
   only its first all_reduce (the uncompressed tensors) from DDP's autograd
   thread; the P and Q all_reduces are issued from `.then()` callbacks, which
   run on whichever gloo worker thread completed the previous future. With
   more than one bucket, bucket k's Q all_reduce and bucket k+1's first
   all_reduce race, and the two ranks issue them in different orders; gloo
   matches collectives by the order they are issued on the process group
   (its sequence tag), so rank 0's P of one bucket meets rank 1's
   uncompressed tensors of another (reproduced here: rank 1 aborts with
   "8232 vs 2144" once PowerSGD starts, at step 10). Fix: `serialized`
   waits for each bucket's whole chain before returning, so every
   collective is issued in the same order on both ranks (bucket by
   bucket). It costs the overlap of one bucket's
   communication with the next bucket's backward, which gloo on CPU barely
   had; single-bucket DDP (bucket_cap_mb above the model) is not enough,
   because DDP rebuilds its buckets after the first step with a 1 MB first
   bucket (dist._DEFAULT_FIRST_BUCKET_BYTES).
2. batched_powerSGD_hook fails `assert len(matrices.shape) == 3` in
   _orthogonalize: in 1.13 _orthogonalize takes a batch of matrices (the
   per-tensor hook passes one), but the batched hook passes its single 2-D
   P and Q. Fix: the 2-D matrix is passed as a batch of one (unsqueeze(0),
   a view, so the in-place orthogonalization still writes P and Q). The
   batched hook's collectives are chained the same way, so it is also
   serialized.
"""

from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

_orthogonalize_batch = psgd._orthogonalize


def _orthogonalize_2d_or_batch(matrices, epsilon=0):
    if matrices.dim() == 2:
        matrices = matrices.unsqueeze(0)
    return _orthogonalize_batch(matrices, epsilon=epsilon)


def serialized(hook):
    def run(state, bucket):
        fut = hook(state, bucket)
        fut.wait()   # every collective of this bucket issued and done
        return fut
    return run


def register(ddp, kind, rank):
    """Registers the PowerSGD hook `kind` ("powersgd" or "batched_powersgd")
    with `rank` as its matrix approximation rank, on DDP model `ddp`."""
    psgd._orthogonalize = _orthogonalize_2d_or_batch
    # Vanilla all-reduce for the first 10 steps (the hook's own warm-up;
    # error feedback and warm start need at least 2), then PowerSGD.
    state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=rank,
                               start_powerSGD_iter=10, min_compression_rate=2,
                               use_error_feedback=True, warm_start=True,
                               random_seed=0)
    hook = psgd.powerSGD_hook if kind == "powersgd" else psgd.batched_powerSGD_hook
    ddp.register_comm_hook(state, serialized(hook))
    return state
