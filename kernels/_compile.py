"""The Triton path as torch custom operators, for calls that ``torch.compile`` traces.

Dynamo cannot trace the Triton path's launch code (its cached plans, data pointers and Triton's launcher), so
while it traces a call that takes that path, :func:`kernels.api._triton` hands the API function :data:`OPS`
instead of :mod:`kernels._triton_ops`. Each estimator there validates its arguments at trace time (the same
checks and ``ValueError``s as eager calls) and calls one opaque operator, ``fastrl::<estimator>``, which at run
time makes the ordinary eager Triton call (allocating its outputs) and which torch.compile keeps as one node of
the graph (tests/test_kernels_compile.py). The operators are defined with ``torch.library.Library`` and one
``CompositeExplicitAutograd`` kernel rather than ``torch.library.custom_op``, whose Python wrappers around the
kernel cost 10 us of host time per operator call (14 us per compiled GAE step) on a 2-core CPU machine
(``scripts/probe_compile_host.py``). The operator's inputs
are detached: outputs are targets and carry no gradient, as in eager calls. An ``out=`` buffer gets the
operator's result through ``copy_`` (one more kernel per output); its shape, dtype, device, grad and layout are
checked, not whether it shares memory with another
output or an input (that needs data pointers; the copy after the whole computation makes sharing an input
harmless).
"""
from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Callable, List, Optional

import torch

from . import _validation as V
from ._outputs import GAEOutput, VTraceOutput

Tensor = torch.Tensor
# A second copy of this package in one process (scripts/ab_kernels.py loads a baseline's kernels/ beside these)
# defines its operators under names of its own: an operator name can be defined once per process.
_SUFFIX = "" if __package__ == "kernels" else "_" + re.sub(r"\W", "_", __package__)


def _operator(name: str, n_out: int, entry: Callable[[], Callable]):
    """``fastrl::<name>(inputs, scalars) -> outputs``: ``entry()`` (the eager Triton path's entry of the
    estimator, called with ``(*inputs, None, *scalars)``) at run time; empty outputs like ``inputs[0]`` (the
    rewards or ``x``: its shape, dtype and device, contiguous, as the eager path allocates them) when traced.

    The first import of this module in a process defines the operator; a later one (a reload, or the package
    imported again under the same name) reuses it, so handles to it that compiled code keeps stay valid. That
    first definition's ``entry`` finds ``_triton_ops`` through ``sys.modules`` at each call, so it reaches the
    package as it is now imported."""

    def run(inputs: List[Optional[Tensor]], scalars: List[float]) -> List[Tensor]:
        res = entry()(*inputs, None, *scalars)
        return list(res) if n_out > 1 else [res]

    qualified = f"{name}{_SUFFIX}"
    if not hasattr(torch.ops.fastrl, qualified):
        lib = torch.library.Library("fastrl", "FRAGMENT")
        lib.define(f"{qualified}(Tensor?[] inputs, float[] scalars) -> Tensor[]",
                   tags=(torch.Tag.pt2_compliant_tag,))
        lib.impl(qualified, run, "CompositeExplicitAutograd")

        @torch.library.register_fake(f"fastrl::{qualified}", lib=lib)
        def _(inputs, scalars):
            return [inputs[0].new_empty(inputs[0].shape) for _ in range(n_out)]

        # A registration lasts as long as its Library object; the dispatcher holds run, run holds lib: for good.
        run.library = lib
    return getattr(torch.ops.fastrl, qualified).default


def _estimator(name: str, attr: str, n_in: int, n_out: int, tensors: Callable, scalars: Callable, wrap=None):
    """An object whose ``hot.entry`` takes an estimator's Triton-path arguments (``*inputs, out, *scalars``, as
    the entry of ``kernels._triton_ops.<attr>`` does) and records one call of its operator."""

    def eager_entry():
        from . import _triton_ops
        return getattr(_triton_ops, attr).hot.entry

    op = _operator(name, n_out, eager_entry)

    def entry(*args):
        ins, out, raw = args[:n_in], args[n_in], args[n_in + 1:]
        out = tensors(*ins, out)  # the eager checks; those that need data pointers skip themselves here
        values = scalars(*raw)
        res = op([None if x is None else x.detach() for x in ins], list(values))
        if out is None:
            return wrap(*res) if wrap is not None else res[0]
        outs = out if n_out > 1 else (out,)
        for o, r in zip(outs, res):
            o.copy_(r)
        return wrap(*outs) if wrap is not None else outs[0]

    return SimpleNamespace(hot=SimpleNamespace(entry=entry))


#: Stands in for kernels._triton_ops while torch.compile traces a call (kernels.api._triton).
OPS = SimpleNamespace(**{attr: _estimator(name, attr, *rest) for name, attr, *rest in (
    ("gae", "_GAE", 6, 2, V.tensors_gae, V.scalars_gamma_lambda, GAEOutput),
    ("vtrace", "_VTRACE", 8, 2, V.tensors_vtrace, V.scalars_vtrace, VTraceOutput),
    ("lambda_returns", "_LAMBDA", 6, 1, V.tensors_lambda_returns, V.scalars_gamma_lambda),
    ("discounted_returns", "_DISCOUNTED", 5, 1, V.tensors_discounted_returns, V.scalars_gamma),
    ("retrace", "_RETRACE", 9, 1, V.tensors_retrace, V.scalars_retrace),
    ("eligibility_traces", "_ELIG", 4, 1, V.tensors_forward, V.scalars_gamma_lambda),
    ("episodic_prefix_sum", "_PREFIX", 4, 1, V.tensors_forward, lambda: ()),
)})
