"""A stand-in for Hugging Face's `spaces` package on a ZeroGPU Space, for tests on a machine without a GPU.

Like the real package it refuses to be imported after CUDA could have been touched (stricter: after
`torch` was imported at all), it accepts `module.to("cuda")` in the main process without a GPU (the real
one takes the weights over and maps them into every GPU call; this one keeps them where they are), and
`GPU(fn, duration=...)` asks for a slot per call, its duration a number or a function of fn's arguments.
Every event is appended as one JSON line to the file named by $ZEROGPU_STUB_LOG.
"""

import functools
import inspect
import json
import os
import sys
import time


def _log(event: str, **fields) -> None:
    with open(os.environ["ZEROGPU_STUB_LOG"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"event": event, "time": time.time(), **fields}) + "\n")


if "torch" in sys.modules:
    raise RuntimeError("CUDA has been initialized before importing the `spaces` package")
_log("import")

import torch  # noqa: E402

_module_to = torch.nn.Module.to


def _to(self, *args, **kwargs):
    device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
    if device is None or torch.device(device).type != "cuda":
        return _module_to(self, *args, **kwargs)
    params = list(self.parameters())
    _log("to_cuda", module=type(self).__name__, dtype=str(params[0].dtype) if params else None,
         elements=sum(t.numel() for t in [*params, *self.buffers()]))
    return _module_to(self, dtype) if dtype is not None else self


torch.nn.Module.to = _to


def GPU(fn=None, *, duration=60):
    if fn is None:
        return functools.partial(GPU, duration=duration)

    def slot(args, kwargs):
        seconds = duration(*args, **kwargs) if callable(duration) else duration
        _log("gpu_call", fn=fn.__name__, duration=seconds)

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            slot(args, kwargs)
            yield from fn(*args, **kwargs)
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        slot(args, kwargs)
        return fn(*args, **kwargs)
    return call
