"""Subnormal flag values through the compiled kernels and the torch backend (CUDA).

A flag is set wherever it is nonzero, subnormal values included. Triton's interpreter (3.6, CPU) flushes bfloat16
subnormals to zero when it compares them, so under ``TRITON_INTERPRET=1`` the kernels test a bfloat16 flag's bits
instead (``kernels._triton_kernels._is_set``; a GPU compares the value itself, as it always did);
this checks what the compiled kernels do on a GPU, for a terminated and a truncated flag of each floating dtype:
episodic prefix sums and GAE advantages, triton against torch (float32 values; rows agree to 1e-6 relative).

Usage: python scripts/check_subnormal_flags.py --out F.json
"""
import argparse
import json

import torch

import kernels

SUBNORMAL = {torch.bfloat16: 1e-40, torch.float16: 6e-8, torch.float32: 1e-40, torch.float64: 1e-310}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    x = torch.tensor([[1.0], [2.0], [3.0], [4.0]], device="cuda")
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    for dt, tiny in SUBNORMAL.items():
        flag = torch.zeros(4, 1, dtype=dt, device="cuda")
        flag[1] = tiny
        none = torch.zeros_like(flag)
        row = {"flag_is_nonzero_in_torch": bool((flag != 0).any())}
        for backend in ("torch", "triton"):
            row[f"prefix_{backend}"] = kernels.compute_episodic_prefix_sum(x, flag, backend=backend).flatten().tolist()
            for name, (te, tr) in {"gae_terminated": (flag, None), "gae_truncated": (none, flag)}.items():
                adv = kernels.compute_gae(x, x, te, tr, gamma=0.9, lambda_=0.9, bootstrap_value=x[0],
                                          backend=backend).advantages
                row[f"{name}_{backend}"] = adv.flatten().tolist()
        row["agree"] = all(torch.allclose(torch.tensor(row[f"{k}_triton"]), torch.tensor(row[f"{k}_torch"]),
                                          rtol=1e-6, atol=0) for k in ("prefix", "gae_terminated", "gae_truncated"))
        row["reset_seen"] = row["prefix_triton"] == [1.0, 3.0, 3.0, 7.0]
        results[str(dt)] = row
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps({k: {"agree": v["agree"], "reset_seen": v["reset_seen"]}
                      for k, v in results.items() if isinstance(v, dict)}))


if __name__ == "__main__":
    main()
