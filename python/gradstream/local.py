"""Local mode: the script run single-process (no launcher). The shards'
optimizers as torch.optim, with the formulas the shards use
(common/optim), so a script trains the same way alone and in a job; also
used to check an update against the shards'. The default numbers are the
job's (common/optim/optimizer_options.h, DefaultOptimizerOptions); local
mode loads no library, so they are repeated here.
"""

import torch


def local_optimizer(params, optimizer="momentum", lr=0.05, momentum=0.9, epsilon=None,
                    initial_accumulator=0.1, beta1=0.9, beta2=0.999, weight_decay=0.0):
    params = list(params)
    if optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
    if optimizer in ("momentum", "nesterov"):
        return torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=optimizer == "nesterov",
                               weight_decay=weight_decay)
    if optimizer == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, initial_accumulator_value=initial_accumulator,
                                   eps=1e-7 if epsilon is None else epsilon,
                                   weight_decay=weight_decay)
    if optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(beta1, beta2),
                                eps=1e-8 if epsilon is None else epsilon,
                                weight_decay=weight_decay)
    raise ValueError("gradstream: unknown optimizer %r (want sgd|momentum|nesterov|adagrad|adam)"
                     % optimizer)
