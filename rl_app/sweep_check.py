"""Hydra callback that validates every job of a multirun sweep before the first one starts.

Hydra composes and launches the jobs of ``python train.py -m algo.gamma=0.5,1.5`` one after another, and each
job validates its own config when it starts, so a bad value in the last job would fail only after the others
had trained. This callback composes every job's config from the sweep's overrides first and runs
:func:`rl_app.config.validate_config` on each, :func:`rl_app.runtime.resolve_device` (``device=cuda`` on a machine
without CUDA) and, for a job with ``resume``, :func:`rl_app.checkpoint.load_resume`: a sweep with a bad value (or a
job whose config cannot be composed or resolved) fails before any job runs, with one line naming the key and the
job's overrides. The env id and option names are checked against EnvPool's registry too
(:func:`rl_app.envs.check_env_options`). What only the environment or W&B can check (an option's value, a login,
whether a checkpoint's network fits the environment) still fails when its job starts.
"""

from __future__ import annotations

import copy
import itertools
import sys
from collections import OrderedDict
from typing import Any, List, Optional

from hydra.experimental.callback import Callback

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def job_overrides(overrides: List[str], config_loader: Optional[Any] = None) -> List[List[str]]:
    """The override list of every job of a sweep, as Hydra's basic sweeper expands ``overrides`` (its
    ``hydra.sweeper.params`` first, then the command line's): ``["a=1,2", "b=x"]`` gives
    ``[["a=1", "b=x"], ["a=2", "b=x"]]``, the last value of a repeated key wins, and ``glob(...)`` over a config
    group needs ``config_loader``. Returns ``[]`` for a sweep that is not a list of values (an interval sweep,
    for an optimising sweeper): its jobs are not known in advance."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    per_key = OrderedDict()
    for override in OverridesParser.create(config_loader=config_loader).parse_overrides(overrides):
        key = override.get_key_element()
        if not override.is_sweep_override():
            per_key[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            per_key[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            return []
    return [list(job) for job in itertools.product(*per_key.values())]


class ValidateSweep(Callback):
    """Before a multirun's first job: compose each job's config and validate it; at the first bad one, print
    one ``error:`` line (the problem and the job's overrides) and exit with status 2.

    Only for Hydra's basic sweeper, whose jobs are known up front. Hydra turns an exception raised in a callback
    into a warning, so every failure to compose or validate a job is reported here, not raised."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        from hydra import compose
        from hydra.core.global_hydra import GlobalHydra
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf, open_dict

        from rl_app.checkpoint import load_resume
        from rl_app.config import ConfigError, check_tuning_overrides, validate_config
        from rl_app.envs import check_env_options
        from rl_app.runtime import resolve_device

        sweeper = config.hydra.sweeper
        if sweeper.get("_target_") != BASIC_SWEEPER:
            return
        # unresolved: an override's value may hold an interpolation such as ${oops} (checked per job below)
        params = OmegaConf.to_container(sweeper.params, resolve=False) if sweeper.get("params") else {}
        task = OmegaConf.to_container(config.hydra.overrides.task, resolve=False)
        loader = GlobalHydra.instance().config_loader()
        jobs = job_overrides([f"{key}={value}" for key, value in params.items()] + task, loader)
        hydra_overrides = OmegaConf.to_container(config.hydra.overrides.hydra, resolve=False)  # hydra.searchpath
        hydra_config_before = HydraConfig.instance().cfg
        try:
            for num, overrides in enumerate(jobs):
                # The sweep's Hydra config with the job's number, so that a job's ${hydra:...} interpolations
                # (job.num, job.name, runtime.cwd) resolve as they will when it runs.
                hydra_config = copy.deepcopy(config)
                with open_dict(hydra_config):
                    hydra_config.hydra.job.num = num
                HydraConfig.instance().set_config(hydra_config)
                try:
                    check_tuning_overrides(overrides, loader.get_group_options(
                        "tuning", config_name=config.hydra.job.config_name, overrides=overrides + hydra_overrides))
                    job = compose(config_name=config.hydra.job.config_name, overrides=overrides)
                    validate_config(job)
                    resolve_device(job.device)  # device=cuda on a machine without one
                    check_env_options(job.env)  # EnvPool's id and option names, no environment made
                    load_resume(job)  # the checkpoint's checks that need no environment
                except Exception as err:  # noqa: BLE001 - whatever would fail this job, reported before any runs
                    problem = str(err) if isinstance(err, ConfigError) else f"{type(err).__name__}: {err}"
                    cause = (str(err.__cause__).strip().splitlines() or [""])[0] if err.__cause__ is not None else ""
                    if cause and cause not in problem:  # e.g. Hydra's merge error wraps OmegaConf's reason
                        problem = f"{problem} ({cause})"
                    problem = " ".join(problem.split())  # one line
                    print(f"error: {problem} (in the sweep's job with {' '.join(overrides)}; no job was started)",
                          file=sys.stderr)
                    sys.exit(2)
        finally:
            HydraConfig.instance().cfg = hydra_config_before  # Hydra sets each job's own before it starts
