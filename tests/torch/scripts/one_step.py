"""One training step through gradstream, recorded for exactness_test.py:
each rank saves the parameters it pulled before the step (the initial ones),
its batch, the parameters it pulled after the step, and which tensors the
forward after the step waited for, module by module, in --out. --device cuda
puts the model on the GPU (the package's host-from-cuda path)."""

import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradstream.torch as gs


def model_and_batch(rank, device="cpu"):
    torch.manual_seed(7)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3)).to(device)
    g = torch.Generator().manual_seed(100 + rank)
    x, y = torch.randn(32, 8, generator=g), torch.randint(0, 3, (32,), generator=g)
    return model, x.to(device), y.to(device)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cpu", help="where the model lives: cpu or cuda")
    args = ap.parse_args()
    gs.init()
    rank = gs.rank()
    model, x, y = model_and_batch(rank, args.device)
    ps = gs.ParameterServer(model)
    encode_path = ps.encode_path
    before = [p.detach().clone() for p in model.parameters()]
    F.cross_entropy(model(x), y).backward()
    ps.step()
    # The next forward (in the training mode the first forward recorded)
    # waits per module for the parameters that module reads, in forward
    # order ([layer-wise wait]): record which tensors each wait asks for
    # (the library call, wrapped).
    lib, waits = ps._session.lib, []
    real = lib.gs_wait_tensors

    def recording(handle, tensors, n):
        waits.append([tensors[i] for i in range(n)])
        return real(handle, tensors, n)
    lib.gs_wait_tensors = recording
    model(x)
    lib.gs_wait_tensors = real
    ps.synchronize()  # nothing left: every module waited for what it reads
    after = [p.detach().clone() for p in model.parameters()]
    torch.save({"rank": rank, "before": before, "after": after, "x": x, "y": y, "waits": waits,
                "encode_path": encode_path, "device": str(after[0].device)},
               os.path.join(args.out, "rank%d.pt" % rank))


if __name__ == "__main__":
    main()
