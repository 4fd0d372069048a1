"""Local mode: the script run single-process (no launcher). The shards'
optimizers as torch.optim, with the formulas the shards use
(common/optim), so a script trains the same way alone and in a job; also
used to check an update against the shards'. An argument left None takes
the job's default (common/optim/optimizer_options.h, read from the
library), so a script trains alone with what a job would use.
"""

import ctypes

import torch

from gradstream import _lib

_TYPES = ("sgd", "momentum", "nesterov", "adagrad", "adam")  # gs_optimizer_defaults.type


def local_optimizer(params, optimizer=None, lr=None, momentum=None, epsilon=None,
                    initial_accumulator=None, beta1=None, beta2=None, weight_decay=None):
    lib = _lib.shared()
    d = _lib.OptimizerDefaults()
    if lib.gs_optimizer_defaults_get((optimizer or "").encode(), ctypes.byref(d)) != 0:
        raise ValueError("gradstream: unknown optimizer %r (want sgd|momentum|nesterov|adagrad|"
                         "adam)" % optimizer)
    optimizer = _TYPES[d.type]

    def pick(value, default):
        return default if value is None else value

    lr = pick(lr, d.learning_rate)
    momentum = pick(momentum, d.momentum)
    epsilon = pick(epsilon, d.epsilon)
    initial_accumulator = pick(initial_accumulator, d.initial_accumulator)
    beta1, beta2 = pick(beta1, d.beta1), pick(beta2, d.beta2)
    weight_decay = pick(weight_decay, d.weight_decay)
    params = list(params)
    if optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
    if optimizer in ("momentum", "nesterov"):
        return torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=optimizer == "nesterov",
                               weight_decay=weight_decay)
    if optimizer == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, initial_accumulator_value=initial_accumulator,
                                   eps=epsilon, weight_decay=weight_decay)
    if optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(beta1, beta2), eps=epsilon,
                                weight_decay=weight_decay)
    raise AssertionError(optimizer)
