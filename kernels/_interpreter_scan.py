"""``tl.associative_scan`` for Triton's interpreter, one combine call per position along the scanned axis.

Triton 3.6's interpreter (``triton.runtime.interpreter.ScanOps.generic_scan``) calls the combine function once
per element, on scalars: a ``[64, 16]`` tile costs 1,008 interpreted calls, and the scan took about three
quarters of an interpreted GAE launch at 1024x64 (N x T). :func:`scan_by_rows` calls the same combine function
once per position along the axis, on all positions of the other axes at once, in the same order; every element
sees the same float operations on the same operands as in Triton's loop, so the results are the same bit for
bit (``tests/test_kernels_backends.py::test_interpreter_scan_by_rows_is_tritons_scan_bit_for_bit``).
``kernels._triton_ops._interpreted_launch`` swaps it in for the duration of each of its launches.
"""
from __future__ import annotations

import numpy as np


def scan_by_rows(self, input):
    """Drop-in for ``ScanOps.generic_scan(self, input)``: inclusive scan of the tuple of tensors ``input``
    along ``self.axis`` with ``self.combine_fn`` (``reverse`` is applied by the caller, ``apply_impl``, which
    flips the data before and after). Returns a list of tensors of the inputs' shapes and dtypes."""
    axis = self.axis
    data = [np.moveaxis(arg.handle.data, axis, 0) for arg in input]
    out = [np.empty_like(d) for d in data]
    for o, d in zip(out, data):
        o[0] = d[0]
    for i in range(1, data[0].shape[0]):
        acc = tuple(self.to_tensor(o[i - 1], arg.dtype) for o, arg in zip(out, input))
        cur = tuple(self.to_tensor(d[i], arg.dtype) for d, arg in zip(data, input))
        ret = self.combine_fn.fn(*acc, *cur)
        ret = ret if isinstance(ret, tuple) else (ret,)
        for o, r in zip(out, ret):
            # a result of the combine is a tensor ([1] for scalars, the slice's shape otherwise) or a constant
            o[i] = np.reshape(r.handle.data, o[i].shape) if hasattr(r, "handle") else r
    return [self.to_tensor(np.moveaxis(o, 0, axis), arg.dtype) for o, arg in zip(out, input)]
