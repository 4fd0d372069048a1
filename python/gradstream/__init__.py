"""gradstream: a sharded parameter server with compressed gradients.

`gradstream.torch` is the PyTorch client; see its docstring.
"""

__version__ = "0.1.0"
