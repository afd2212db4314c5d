"""The README's `kernels` example runs as printed and gives what the float64 reference gives."""
from __future__ import annotations

import pathlib

import torch

from kernels import reference

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def _kernels_example() -> str:
    text = README.read_text()
    start = text.index("```python\nimport torch\nimport kernels\n")
    return text[start + len("```python\n"):text.index("```", start + 3)]


def test_the_readme_kernels_example_runs_and_matches_the_reference():
    torch.manual_seed(0)
    scope: dict = {}
    exec(compile(_kernels_example(), str(README), "exec"), scope)
    s = {k: scope[k].double() for k in ("rewards", "values", "last_value", "mu_logp", "pi_logp", "q_taken",
                                         "expected_q", "last_expected_q")}
    flags = scope["terminated"], scope["truncated"]
    logps = dict(behaviour_log_probs=s["mu_logp"], target_log_probs=s["pi_logp"])
    want = {
        "adv": reference.gae(s["rewards"], s["values"], *flags, gamma=0.99, lambda_=0.95,
                             bootstrap_value=s["last_value"])[0],
        **dict(zip(("vs", "pg_adv"), reference.vtrace(s["rewards"], s["values"], *flags, **logps, gamma=0.99,
                                                     bootstrap_value=s["last_value"]))),
        "q_ret": reference.retrace(s["rewards"], s["q_taken"], s["expected_q"], *flags, **logps, gamma=0.99,
                                   lambda_=1.0, bootstrap_value=s["last_expected_q"]),
    }
    want["ret"] = want["adv"] + s["values"]
    for name, expected in want.items():
        assert scope[name].shape == (128, 4096) and scope[name].dtype == torch.float32, name
        torch.testing.assert_close(scope[name].double(), expected, rtol=1e-5, atol=1e-5, msg=name)
