"""Hydra callback that validates every job of a multirun sweep before the first one starts.

Hydra composes and launches the jobs of ``python train.py -m algo.gamma=0.5,1.5`` one after another, and each
job validates its own config when it starts, so a bad value in the last job would fail only after the others
had trained. This callback composes every job's config from the sweep's overrides first and runs
:func:`rl_app.config.validate_config` on each: a sweep with a bad value fails before any job runs, with the
message naming the key and the job's overrides.
"""

from __future__ import annotations

import itertools
import sys
from typing import Any, List

from hydra.experimental.callback import Callback


def job_overrides(task_overrides: List[str]) -> List[List[str]]:
    """The override list of every job of a sweep given as ``task_overrides`` (``["a=1,2", "b=x"]`` gives
    ``[["a=1", "b=x"], ["a=2", "b=x"]]``), in Hydra's basic sweeper's order. Returns ``[]`` when a sweep is not
    a list of values (an interval sweep for an optimising sweeper): its jobs are not known in advance."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    choices = []
    for override in OverridesParser.create().parse_overrides(task_overrides):
        if not override.is_sweep_override():
            choices.append([override.input_line])
        elif override.is_discrete_sweep():
            key = override.get_key_element()
            choices.append([f"{key}={value}" for value in override.sweep_string_iterator()])
        else:
            return []
    return [list(job) for job in itertools.product(*choices)]


class ValidateSweep(Callback):
    """Before a multirun's first job: compose each job's config and validate it; exit with status 2 and the
    error (the key, the allowed values and the job's overrides) at the first bad one."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        from hydra import compose

        from rl_app.config import ConfigError, validate_config

        for overrides in job_overrides(list(config.hydra.overrides.task)):
            try:
                validate_config(compose(config_name=config.hydra.job.config_name, overrides=overrides))
            except ConfigError as err:
                print(f"error: {err} (in the sweep's job with {' '.join(overrides)}; no job was started)",
                      file=sys.stderr)
                sys.exit(2)
