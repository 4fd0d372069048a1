"""PyTorch client of gradstream: train your own model on the parameter server.

    import gradstream.torch as gs
    gs.init()                          # the launcher's environment, or local mode
    ps = gs.ParameterServer(model)     # declares the tensors; rank 0 initializes the shards
    for x, y in gs.shard((images, labels), global_batch_size=64, steps=1000):
        loss = F.cross_entropy(model(x), y)
        loss.backward()                # each gradient is pushed as backward produces it
        ps.step(loss)                  # clock + 1, pull at the version the consistency mode allows

Under `gradstream submit --entrypoint "python3 train.py"` every worker runs
the script with GRADSTREAM_AGENT set (gs_worker's agent, see
worker/trainer/script_runner.h): the optimizer runs on the shards, with the
job's codec and consistency mode. Run as a plain script (no GRADSTREAM_AGENT)
the same code trains single-process: ParameterServer applies the optimizer
locally with torch.optim (the formulas the shards use), rank 0 of 1.

Rules: parameters are float32 (anything else is a TypeError naming the
tensor); one backward per step; rank and world size change only at clock
boundaries (gs.membership()); a worker scaled down leaves after its last
clock and the process exits with status 0 (SystemExit from step()).

Gradients cross to the C++ client by pointer (tensor.data_ptr()): a CPU
gradient is encoded where it lies, no copy. A CUDA gradient is copied to
host memory first and encoded on the CPU (encode path "host"): the
device-encode path of gs_worker's built-in models (the codec library's CUDA
kernels, only codes cross PCIe) is not wired to the package yet.

The package's modules, one concern each (python/README.md):
session (init, rendezvous, membership), parameter_server (ParameterServer,
the step), embedding (Embedding: tables that live on the shards), data
(shard), local (single-process mode's optimizers).
"""

from gradstream.data import shard
from gradstream.embedding import Embedding
from gradstream.local import local_optimizer
from gradstream.parameter_server import (BufferWarning, ParameterServer,
                                         unsynced_buffers)
from gradstream.session import (DEFAULT_TIMEOUT_S, Membership, init, is_distributed,
                                membership, rank, world_size)

__all__ = ["BufferWarning", "DEFAULT_TIMEOUT_S", "Embedding", "Membership", "ParameterServer",
           "init",
           "is_distributed", "local_optimizer", "membership", "rank", "shard",
           "unsynced_buffers", "world_size"]
