"""Credit-assignment estimators as fused first-order linear scans (Triton + torch).

See :mod:`kernels.api` for conventions and docs/kernels.md for the design.
"""
from . import reference
from .api import (GAEOutput, VTraceOutput, compute_discounted_returns, compute_eligibility_traces,
                  compute_episodic_prefix_sum, compute_gae, compute_lambda_returns, compute_retrace,
                  compute_vtrace)

__all__ = [
    "compute_gae",
    "compute_vtrace",
    "compute_lambda_returns",
    "compute_discounted_returns",
    "compute_retrace",
    "compute_eligibility_traces",
    "compute_episodic_prefix_sum",
    "GAEOutput",
    "VTraceOutput",
    "reference",
]
