"""Float32 error over a long window, against the float64 reference, beside a plain float32 loop over time (CPU).

Discounted returns and GAE (bootstrap_value form) at T = 2048, N = 32, terminated about once per 500 steps,
gamma 0.99 and 0.999, lambda_ 0.95: the largest absolute error of each backend (the Triton path under
TRITON_INTERPRET=1 here) and of a sequential float32 loop, the yardstick a float32 implementation of the formula
reaches. Writes JSON with --out.

Usage: TRITON_INTERPRET=1 python scripts/check_long_window_precision.py --out precision.json
"""
from __future__ import annotations

import argparse
import json
import platform

import torch

import kernels
from kernels import reference


def _float32_loop_discounted(rewards, terminated, gamma, bootstrap_value):
    """G[t] = r[t] + gamma * (0 if terminated[t] else G[t+1]), G[T] = bootstrap_value, one float32 step at a time."""
    out = torch.empty_like(rewards)
    y = bootstrap_value.clone()
    for t in range(rewards.shape[0] - 1, -1, -1):
        y = rewards[t] + gamma * torch.where(terminated[t], torch.zeros_like(y), y)
        out[t] = y
    return out


def _float32_loop_gae(rewards, values, terminated, gamma, lambda_, bootstrap_value):
    """delta[t] = r[t] + gamma * V[t+1] * (1 - terminated[t]) - V[t] (V[T] = bootstrap_value);
    A[t] = delta[t] + gamma * lambda_ * (1 - terminated[t]) * A[t+1], A[T] = 0; one float32 step at a time."""
    adv = torch.empty_like(rewards)
    a = torch.zeros_like(bootstrap_value)
    v_next = bootstrap_value
    for t in range(rewards.shape[0] - 1, -1, -1):
        keep = torch.where(terminated[t], 0.0, 1.0)
        a = rewards[t] + gamma * v_next * keep - values[t] + gamma * lambda_ * keep * a
        adv[t] = a
        v_next = values[t]
    return adv


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="long_window_precision.json")
    args = p.parse_args()
    torch.manual_seed(0)
    T, N = 2048, 32
    rewards = torch.randn(T, N) + 1.0
    values = torch.randn(T, N) * 5
    bootstrap_value = torch.randn(N) * 5
    terminated = torch.rand(T, N) < 0.002
    rows = []
    for gamma in (0.99, 0.999):
        ref = reference.discounted_returns(rewards.double(), terminated, None, gamma=gamma,
                                           bootstrap_value=bootstrap_value.double())
        row = {"estimator": "discounted_returns", "gamma": gamma, "max_abs_ref": ref.abs().max().item()}
        for backend in ("torch", "triton"):
            got = kernels.compute_discounted_returns(rewards, terminated, None, gamma=gamma,
                                                     bootstrap_value=bootstrap_value, backend=backend)
            row[f"max_abs_err_{backend}"] = (got.double() - ref).abs().max().item()
        loop = _float32_loop_discounted(rewards, terminated, gamma, bootstrap_value)
        row["max_abs_err_float32_loop"] = (loop.double() - ref).abs().max().item()
        rows.append(row)
        ref_adv, _ = reference.gae(rewards.double(), values.double(), terminated, None, gamma=gamma, lambda_=0.95,
                                   bootstrap_value=bootstrap_value.double())
        row = {"estimator": "gae", "gamma": gamma, "lambda_": 0.95, "max_abs_ref": ref_adv.abs().max().item()}
        for backend in ("torch", "triton"):
            got = kernels.compute_gae(rewards, values, terminated, None, gamma=gamma, lambda_=0.95,
                                      bootstrap_value=bootstrap_value, backend=backend)
            row[f"max_abs_err_{backend}"] = (got.advantages.double() - ref_adv).abs().max().item()
        loop = _float32_loop_gae(rewards, values, terminated, gamma, 0.95, bootstrap_value)
        row["max_abs_err_float32_loop"] = (loop.double() - ref_adv).abs().max().item()
        rows.append(row)
        for r in rows[-2:]:
            print(json.dumps(r))
    result = {"torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
              "T": T, "N": N, "results": rows}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
