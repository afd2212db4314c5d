"""End-to-end runs of `train.py`'s code path: artifacts, smoke runs, W&B offline, and a learning test."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from rl_app.checkpoint import load_checkpoint
from rl_app.run import run
from tests.helpers import Interrupted, ReusedOutputs, compose_config, sigterm_raises_interrupted

SUMMARY_KEYS = {"algo", "env_id", "seed", "global_step", "wall_time_s", "sps", "episodic_return_mean", "episodes"}
METRIC_KEYS = {"global_step", "sps", "episodic_return_mean", "policy_loss", "value_loss", "entropy", "approx_kl",
               "clip_fraction", "learning_rate", "time/env_s", "time/inference_s", "time/credit_assignment_s",
               "time/update_s"}
QUIET = ["logger=none", "progress_bar=false", "device=cpu"]


def read_summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_ppo_run_leaves_summary_metrics_and_checkpoint(tmp_path):
    cfg = compose_config(QUIET + ["env.num_envs=4", "algo.num_steps=16", "total_timesteps=640", "log_interval_s=0.01"])
    summary = run(cfg, run_dir=tmp_path)
    on_disk = read_summary(tmp_path)
    assert SUMMARY_KEYS <= set(on_disk)
    assert on_disk == json.loads(json.dumps(summary))
    assert on_disk["global_step"] == 640 and on_disk["algo"] == "ppo" and on_disk["env_id"] == "CartPole-v1"
    assert on_disk["cuda_graph_act"] is False  # null on a CPU
    assert on_disk["episodes"] >= 1 and on_disk["episodic_return_mean"] > 0
    lines = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 10  # one per iteration with a tiny log interval
    assert all(METRIC_KEYS <= set(line) for line in lines)
    assert [l["global_step"] for l in lines] == list(range(64, 641, 64))
    # anneal_lr: 1 - (iteration - 1) / 10, exactly (the schedule is kept by steps: 1 - global_step / 640)
    assert [l["learning_rate"] for l in lines] == [2.5e-4 * (1.0 - (i - 1) / 10) for i in range(1, 11)]
    ckpt = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert ckpt["global_step"] == 640 and ckpt["iteration"] == 10
    assert ckpt["config"]["env"]["num_envs"] == 4
    assert {"model", "optimizer", "rng"} <= set(ckpt)


@pytest.mark.parametrize("env, extra", [
    ("pong", ["env.num_envs=2", "algo.num_steps=64"]),
    ("halfcheetah", ["env.num_envs=2", "algo.num_steps=64", "algo.num_minibatches=4"]),
])
def test_smoke_runs_write_summary(tmp_path, env, extra):
    cfg = compose_config(QUIET + [f"env={env}", "total_timesteps=256"] + extra)
    run(cfg, run_dir=tmp_path)
    summary = read_summary(tmp_path)
    assert summary["global_step"] == 256 and summary["finished"] is True
    assert summary["env_id"] == cfg.env.id


class _ObsPolicy:
    """A policy that is a fixed function of the observation (CartPole: push toward the pole's lean)."""

    def act(self, obs, generator):
        from rl_app.models import PolicyOutput
        return PolicyOutput((obs[:, 2] > 0).long(), obs[:, 0] - obs[:, 3], 2.0 * obs[:, 1] + 1.0)


@pytest.mark.parametrize("groups", [2, 4])
def test_a_rollout_of_env_groups_is_the_rollout_of_one_pool(groups):
    """``collect_rollout``, with one group and acting on one group while the others step, stores row for row what
    a plain loop of act and ``EnvPoolAdapter.step`` sees, and returns the observation after the window, across two
    rollouts (a deterministic policy, so the sampling order does not enter)."""
    from rl_app.envs import EnvPoolAdapter
    from rl_app.ppo_trainer import collect_rollout
    from rl_app.storage import Rollout
    from rl_app.tracking import PhaseTimer

    cfg = compose_config(["env=cartpole", "env.num_envs=8", "env.max_episode_steps=12"])
    policy, cpu = _ObsPolicy(), torch.device("cpu")
    # The spec: act on each env's observation, step all envs at once, one row per step.
    envs = EnvPoolAdapter(cfg.env, seed=3, device=cpu)
    obs, want = envs.reset(), []
    for _ in range(2):
        rows = {name: [] for name in ("obs", "valid", "actions", "log_probs", "values", "rewards", "terminated",
                                      "truncated")}
        for _ in range(10):
            acted = policy.act(obs, None)
            for name, value in (("obs", obs), ("valid", envs.valid), ("actions", acted.actions),
                                ("log_probs", acted.log_probs), ("values", acted.values)):
                rows[name].append(value.clone())
            step = envs.step(envs.actions_to_numpy(acted.actions))
            for name in ("rewards", "terminated", "truncated"):
                rows[name].append(getattr(step, name))
            obs = step.obs
        want.append({name: torch.stack(value) for name, value in rows.items()} | {"next_obs": obs.clone()})
    want_episodes = envs.stats.episodes
    envs.close()
    # Also through outputs overwritten on every act, as a CUDA-graph policy step's are.
    for g, acting in ((1, policy), (groups, policy), (groups, ReusedOutputs(policy))):
        envs = EnvPoolAdapter(cfg.env, seed=3, device=cpu, groups=g)
        rollout = Rollout.allocate(10, 8, (4,), torch.float32, (), True, cpu)
        timer = PhaseTimer(cpu)
        obs = envs.reset()
        for i in range(2):
            obs = collect_rollout(envs, acting, rollout, obs, None, timer)
            for name, value in want[i].items():
                assert torch.equal(value, obs if name == "next_obs" else getattr(rollout, name)), (g, i, name)
        assert envs.stats.episodes == want_episodes > 0
        phases = timer.drain()
        assert phases["env"] > 0 and phases["inference"] > 0
        envs.close()
    assert not bool(want[1]["valid"].all()) and bool(want[1]["truncated"].any())  # episode ends were stored


def test_ppo_with_env_groups_runs_and_counts_every_env_step(tmp_path):
    cfg = compose_config(QUIET + ["env.num_envs=4", "algo.env_groups=2", "algo.num_steps=16", "total_timesteps=256"])
    run(cfg, run_dir=tmp_path)
    summary = read_summary(tmp_path)
    assert summary["global_step"] == 256 and summary["finished"] is True and summary["episodes"] >= 1


def test_wandb_offline_run_is_created_without_network(tmp_path, monkeypatch):
    # Any attempt to reach a server would hit a closed local port and fail.
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    cfg = compose_config(["progress_bar=false", "device=cpu", "env.num_envs=2", "algo.num_steps=16",
                          "total_timesteps=64"])
    assert cfg.logger.name == "wandb" and cfg.logger.mode == "offline"
    run(cfg, run_dir=tmp_path)
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("*.wandb")), "the offline run holds no W&B data file"



def test_online_wandb_without_a_login_is_a_config_error(tmp_path, monkeypatch):
    from rl_app.config import ConfigError

    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))  # no stored login either
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    cfg = compose_config(["progress_bar=false", "device=cpu", "logger.mode=online", "env.num_envs=2",
                          "algo.num_steps=16", "total_timesteps=64"])
    with pytest.raises(ConfigError, match=r"logger\.mode='online' needs a W&B login"):
        run(cfg, run_dir=tmp_path / "run")
    assert not (tmp_path / "run" / "summary.json").exists()
    bad_project = compose_config(["progress_bar=false", "device=cpu", "logger.project=a/b", "env.num_envs=2",
                                  "algo.num_steps=16", "total_timesteps=64"])  # offline
    with pytest.raises(ConfigError, match=r"W&B could not start a run with logger\.mode='offline', "
                                          r"logger\.project='a/b'"):
        run(bad_project, run_dir=tmp_path / "run2")
    # W&B's server out of reach (what wandb.init raises after its init timeout, about 90 s with no network).
    import wandb

    def unreachable(**kwargs):
        raise wandb.errors.CommError("Timed out while retrying: no such host")

    with monkeypatch.context() as patch:
        patch.setattr(wandb, "init", unreachable)
        with pytest.raises(ConfigError, match=r"no such host; logger\.mode=offline logs without a connection"):
            run(cfg, run_dir=tmp_path / "run")
    # The next try in the same directory runs.
    offline = compose_config(["progress_bar=false", "device=cpu", "env.num_envs=2", "algo.num_steps=16",
                              "total_timesteps=64"])
    assert run(offline, run_dir=tmp_path / "run")["global_step"] == 64

def test_train_py_command_line_and_hydra_run_dir(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "train.py", "logger=none", "progress_bar=false", "env.num_envs=2", "algo.num_steps=8",
           "total_timesteps=32", f"hydra.run.dir={out}"]
    proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert read_summary(out)["global_step"] == 32
    assert (out / ".hydra" / "config.yaml").exists()
    bad = subprocess.run(cmd[:-1] + ["env.num_env=3", f"hydra.run.dir={tmp_path / 'bad'}"],
                         cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "env.num_env" in bad.stderr
    assert not (tmp_path / "bad" / "summary.json").exists()
    # A value the schema's types allow but the application does not: one clear line, exit status 2.
    gamma = subprocess.run(cmd[:-1] + ["algo.gamma=2", f"hydra.run.dir={tmp_path / 'gamma'}"],
                           cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300)
    assert gamma.returncode == 2
    assert gamma.stderr.strip().splitlines()[-1] == "error: algo.gamma must be in [0, 1], got 2.0"
    assert "Traceback" not in gamma.stderr
    # The same directory again: the new run replaces the earlier one's metrics (never appends to them), and says so.
    again = subprocess.run(cmd[:-1] + ["total_timesteps=48", "log_interval_s=1000", f"hydra.run.dir={out}"],
                           cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "held an earlier run's metrics.jsonl, summary.json, last.pt: moved to earlier-run-" in (
        again.stdout + again.stderr)
    steps = [json.loads(line)["global_step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [48]  # one log line, at the end; the earlier run's line (32) is not in this file
    assert read_summary(out)["global_step"] == 48
    (kept,) = out.glob("earlier-run-*")  # ... but kept aside, with its summary and checkpoint
    assert read_summary(kept)["global_step"] == 32 and (kept / "last.pt").exists()
    assert [json.loads(line)["global_step"] for line in (kept / "metrics.jsonl").read_text().splitlines()] == [32]



def test_train_py_help_shows_usage_groups_and_the_composed_defaults():
    proc = subprocess.run([sys.executable, "train.py", "algo=impala", "--help"], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "python train.py resume=<run dir>" in proc.stdout
    assert re.search(r"^algo: impala, impala_schema, ppo, ppo_schema$", proc.stdout, re.M)
    assert re.search(r"^  name: impala$", proc.stdout, re.M) and "vtrace_lambda:" in proc.stdout
    assert "rl_app/config.py" in proc.stdout


def test_train_py_stopped_by_sigterm_says_so_and_exits_with_128_plus_the_signal(tmp_path):
    import signal
    import time

    out = tmp_path / "run"
    cmd = [sys.executable, "train.py", "logger=none", "progress_bar=false", "env.num_envs=2", "algo.num_steps=8",
           "total_timesteps=1e8", "log_interval_s=0.2", f"hydra.run.dir={out}"]
    proc = subprocess.Popen(cmd, cwd=Path(__file__).resolve().parents[1], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not (out / "summary.json").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert f"stopped on signal SIGTERM: checkpoint and summary.json written in {out}" in err
    summary = read_summary(out)
    assert summary["stop_reason"] == "signal SIGTERM"
    assert (out / "checkpoints" / "last.pt").exists()

def test_the_default_run_directory_keeps_runs_started_in_one_second_apart():
    cmd = [sys.executable, "train.py", "seed=7", "--cfg", "all", "--resolve", "-p", "hydra.run.dir"]
    proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_dir = proc.stdout.strip()
    assert re.fullmatch(r"outputs/\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d-\d{6}_ppo_CartPole-v1_s7", run_dir), run_dir


@pytest.mark.parametrize("overrides, message", [
    (["env=classic_schema"], "error: env.id must be set (a group's *_schema options are its bare schemas"),
    (["seed=???"], "error: seed must be set"),
    (["tuning=ppo_cartpol"], "error: tuning=ppo_cartpol names no file in conf/tuning/ (did you mean ppo_cartpole?)"),
    (["tuning=[ppo_cartpole,ppo_cartpol]"], "error: tuning=ppo_cartpol names no file in conf/tuning/"),
    (["algo.gamma=${oops}"], "error: algo.gamma: Interpolation key 'oops' not found"),
])
def test_a_bad_setting_with_the_default_run_directory_ends_in_one_line_naming_it(tmp_path, overrides, message):
    """The default run directory interpolates env.id and seed: one left without a value used to end in Hydra's
    interpolation traceback before the trainer's check ran. A mistyped tuning option used to be skipped silently
    (the group is optional), training without the tuned values. An interpolation that does not resolve used to
    end in omegaconf's traceback."""
    cmd = [sys.executable, str(Path(__file__).resolve().parents[1] / "train.py"), *overrides, "logger=none",
           "total_timesteps=32"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(message), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not list(tmp_path.glob("outputs/*/*/summary.json"))


def test_a_tuning_file_on_an_added_search_path_is_found(tmp_path):
    """The tuning options are listed with the run's own search path (``hydra.searchpath``), not only conf/."""
    (tmp_path / "extra" / "tuning").mkdir(parents=True)
    (tmp_path / "extra" / "tuning" / "ppo_mine.yaml").write_text("# @package _global_\nalgo:\n  gamma: 0.5\n")
    cmd = [sys.executable, str(Path(__file__).resolve().parents[1] / "train.py"),
           f"hydra.searchpath=[file://{tmp_path / 'extra'}]", "tuning=ppo_mine", "logger=none", "progress_bar=false",
           "env.num_envs=2", "algo.num_steps=8", "total_timesteps=16"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_dir = next(tmp_path.glob("outputs/*/*"))
    assert read_summary(run_dir)["global_step"] == 16
    assert OmegaConf.load(run_dir / ".hydra" / "config.yaml").algo.gamma == 0.5
    sweep = subprocess.run(cmd[:2] + ["-m"] + cmd[2:3] + ["tuning=ppo_mine,ppo_cartpole"] + cmd[4:]
                           + [f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300)
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    assert len(list((tmp_path / "sweep").glob("*/summary.json"))) == 2



def test_a_sweep_with_a_bad_value_fails_before_any_job_starts(tmp_path):
    # The bad value is in the sweep's last job: without the check up front, the first job would train first.
    cmd = [sys.executable, "train.py", "-m", "algo.gamma=0.5,1.5", "env.num_envs=2", "algo.num_steps=8",
           "total_timesteps=32", "logger=none", "progress_bar=false", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "error: algo.gamma must be in [0, 1], got 1.5 (in the sweep's job with algo.gamma=1.5 env.num_envs=2")
    assert not list(tmp_path.glob("sweep/*/summary.json")) and "Traceback" not in proc.stderr
    good = subprocess.run(cmd[:3] + ["algo.gamma=0.5,0.9"] + cmd[4:], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=300)
    assert good.returncode == 0, good.stderr[-2000:]
    summaries = sorted((tmp_path / "sweep").glob("*/summary.json"))
    assert [read_summary(s.parent)["global_step"] for s in summaries] == [32, 32]



def test_a_sweep_job_that_fails_when_it_starts_does_not_stop_the_jobs_after_it(tmp_path):
    """Whether a checkpoint's network fits the environment shows only when a job makes its environments: that job
    fails with its one-line error, and the sweep goes on (it used to exit from the first job, the rest never ran)."""
    run(compose_config(QUIET + ["env.num_envs=2", "algo.num_steps=8", "total_timesteps=16"]), run_dir=tmp_path / "a")
    cmd = [sys.executable, "train.py", "-m", f"resume={tmp_path / 'a'}", "env.normalize_obs=true,false",
           "env.num_envs=2", "algo.num_steps=8", "total_timesteps=32", "logger=none", "progress_bar=false",
           f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "error: resume: the checkpoint's network does not fit this config's" in proc.stderr
    assert [s.parent.name for s in (tmp_path / "sweep").glob("*/summary.json")] == ["1_ppo_CartPole-v1_s1"]


def test_a_sweep_with_an_env_id_envpool_does_not_know_fails_before_any_job_starts(tmp_path):
    cmd = [sys.executable, "train.py", "-m", "env.id=CartPole-v1,Nope-v9", "env.num_envs=2", "algo.num_steps=8",
           "total_timesteps=32", "logger=none", "progress_bar=false", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: env.id='Nope-v9' is not an EnvPool environment")
    assert not list(tmp_path.glob("sweep/*/summary.json"))


@pytest.mark.parametrize("sweep, message", [
    (["env=glob(cart*)", "algo.gamma=0.9,1.5"], "algo.gamma must be in [0, 1], got 1.5"),  # needs the loader
    (["algo.learning_rate=1e-3,${oops}"], "algo.learning_rate: Interpolation key 'oops' not found"),
    (["algo.num_steps=8,abc"], "ConfigCompositionException: Error merging override algo.num_steps=abc"
                               " (Value 'abc' of type 'str' could not be converted to Integer)"),
    (["algo.cuda_graph_act=false,maybe"], "ConfigCompositionException: Error merging override "
                                          "algo.cuda_graph_act=maybe (Value 'maybe' is not a valid bool"),
    (["tuning=ppo_cartpole,ppo_cartpol"], "tuning=ppo_cartpol names no file in conf/tuning/ (did you mean "
                                          "ppo_cartpole?)"),
    (["env=cartpole,classic_schema"], "env.id must be set"),
    pytest.param(["device=cpu,cuda"], "device='cuda' but torch sees no CUDA device; use device=cpu or device=auto",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")),
])
def test_every_kind_of_bad_sweep_job_is_reported_before_any_job_starts(tmp_path, sweep, message):
    cmd = [sys.executable, "train.py", "-m", *sweep, "env.num_envs=2", "total_timesteps=32", "logger=none",
           "progress_bar=false", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {message}") and last.endswith("; no job was started)"), last
    assert not list(tmp_path.glob("sweep/*/summary.json"))


def test_sweep_jobs_are_expanded_in_hydra_order():
    from rl_app.sweep_check import job_overrides

    assert job_overrides(["algo=ppo,impala", "seed=range(1,3)", "env=pong"]) == [
        ["algo=ppo", "seed=1", "env=pong"], ["algo=ppo", "seed=2", "env=pong"],
        ["algo=impala", "seed=1", "env=pong"], ["algo=impala", "seed=2", "env=pong"]]
    assert job_overrides(["+algo.x=1,2", "logger.tags=[a,b]"]) == [["+algo.x=1", "logger.tags=[a,b]"],
                                                                   ["+algo.x=2", "logger.tags=[a,b]"]]
    assert job_overrides(["seed=1,2", "seed=3"]) == [["seed=3"]]  # as Hydra: the last value of a key wins
    assert job_overrides(["algo.gamma=interval(0.9,1.0)"]) == []  # an optimising sweeper's: not known up front

def test_time_limit_stops_early_with_summary_and_checkpoint(tmp_path):
    cfg = compose_config(QUIET + ["env.num_envs=4", "algo.num_steps=16", "total_timesteps=1e7", "time_limit_s=2"])
    summary = run(cfg, run_dir=tmp_path)
    assert summary["finished"] is True and summary["stopped_early"] is True
    assert summary["stop_reason"] == "time_limit_s"
    assert 0 < summary["global_step"] < 10_000_000 and summary["wall_time_s"] < 30
    assert (tmp_path / "checkpoints" / "last.pt").exists()


def test_resume_continues_the_run_with_its_learner_counters_and_statistics(tmp_path):
    base = QUIET + ["env.num_envs=4", "algo.num_steps=16", "log_interval_s=0.01"]
    first = run(compose_config(base + ["total_timesteps=640"]), run_dir=tmp_path / "first")
    saved = load_checkpoint(tmp_path / "first" / "checkpoints" / "last.pt")
    # A learning rate too small to move a float32 weight: the resumed run ends with the checkpoint's network,
    # which a network started afresh (from the same seed) would not.
    summary = run(compose_config(base + ["total_timesteps=1280", f"resume={tmp_path / 'first'}",
                                         "algo.learning_rate=1e-30"]), run_dir=tmp_path / "resumed")
    assert summary["global_step"] == 1280 and summary["iterations"] == 20 and summary["finished"] is True
    checkpoint = tmp_path / "first" / "checkpoints" / "last.pt"
    assert summary["resumed_from"] == str(checkpoint.resolve()) and first["resumed_from"] is None
    assert summary["episodes"] > first["episodes"] and summary["wall_time_s"] > first["wall_time_s"]
    lines = [json.loads(l) for l in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert [l["global_step"] for l in lines] == list(range(704, 1281, 64))
    assert [l["iteration"] for l in lines] == list(range(11, 21))
    # anneal_lr goes on over the whole run's 20 iterations: iteration 11 takes (1 - 10/20) of the rate
    assert lines[0]["learning_rate"] == pytest.approx(0.5e-30)
    ended = load_checkpoint(tmp_path / "resumed" / "checkpoints" / "last.pt")
    for key, value in saved["model"].items():
        assert torch.allclose(ended["model"][key], value, rtol=0, atol=1e-20), key
    assert ended["global_step"] == 1280 and ended["iteration"] == 20
    assert ended["episode_stats"]["episodes"] == summary["episodes"]


def test_a_resumed_run_repeats_itself_and_restores_the_sampling_generator(tmp_path):
    base = QUIET + ["env.num_envs=4", "algo.num_steps=16"]
    run(compose_config(base + ["total_timesteps=320"]), run_dir=tmp_path / "first")
    saved = load_checkpoint(tmp_path / "first" / "checkpoints" / "last.pt")
    assert saved["generators"]["ppo"]["device"] == "cpu"
    # the same checkpoint without its generator: the resumed run then samples from a fresh seed's generator
    torch.save({**saved, "generators": {}}, tmp_path / "no_generator.pt")
    models = []
    for name, checkpoint in (("a", "first/checkpoints/last.pt"), ("b", "first"), ("c", "no_generator.pt")):
        run(compose_config(base + ["total_timesteps=640", f"resume={tmp_path / checkpoint}"]), run_dir=tmp_path / name)
        models.append(load_checkpoint(tmp_path / name / "checkpoints" / "last.pt")["model"])
    same, again, without = models
    assert all(torch.equal(same[key], again[key]) for key in same)
    assert not all(torch.equal(same[key], without[key]) for key in same)


def test_a_resumed_run_takes_the_optimizer_settings_of_its_own_config(tmp_path):
    base = QUIET + ["env.num_envs=4", "algo.num_steps=16", "algo.anneal_lr=false", "log_interval_s=0.01"]
    run(compose_config(base + ["total_timesteps=320"]), run_dir=tmp_path / "first")
    run(compose_config(base + ["total_timesteps=640", f"resume={tmp_path / 'first'}", "algo.learning_rate=1e-3",
                               "algo.adam_eps=1e-7"]), run_dir=tmp_path / "resumed")
    lines = [json.loads(l) for l in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert {l["learning_rate"] for l in lines} == {1e-3}
    saved = load_checkpoint(tmp_path / "first" / "checkpoints" / "last.pt")["optimizer"]
    ended = load_checkpoint(tmp_path / "resumed" / "checkpoints" / "last.pt")["optimizer"]
    assert saved["param_groups"][0]["lr"] == 2.5e-4 and saved["param_groups"][0]["eps"] == 1e-5
    assert ended["param_groups"][0]["lr"] == 1e-3 and ended["param_groups"][0]["eps"] == 1e-7
    # the moments carried over: Adam's step count goes on from the checkpoint's
    first_param = saved["param_groups"][0]["params"][0]
    assert float(ended["state"][first_param]["step"]) == float(saved["state"][first_param]["step"]) * 2


def test_the_learning_rate_anneals_by_steps_across_a_resume_that_resizes_the_iteration(tmp_path, caplog):
    base = QUIET + ["env.num_envs=4", "log_interval_s=0.001"]
    run(compose_config(base + ["algo.num_steps=16", "total_timesteps=640"]), run_dir=tmp_path / "first")
    caplog.set_level("INFO", logger="rl_app.checkpoint")
    run(compose_config(base + ["algo.num_steps=32", "total_timesteps=1280", f"resume={tmp_path / 'first'}"]),
        run_dir=tmp_path / "resumed")
    lines = [json.loads(l) for l in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    # 640 of 1280 steps done when the first resumed iteration starts, then 128 more per iteration
    assert [l["global_step"] for l in lines] == list(range(768, 1281, 128))
    assert [l["learning_rate"] for l in lines] == pytest.approx([2.5e-4 * (1 - s / 1280) for s in range(640, 1280, 128)])
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["resume: settings that differ from the checkpoint's run (this run's apply): "
                        "algo.num_steps (checkpoint 16, now 32)"]


def test_a_resume_with_another_seed_forks_the_random_states(tmp_path):
    from rl_app.checkpoint import TrainState, load_resume, resume_into
    from rl_app.envs import EpisodeStats

    run(compose_config(QUIET + ["env.num_envs=4", "algo.num_steps=16", "total_timesteps=320"]), run_dir=tmp_path / "a")
    saved = load_checkpoint(tmp_path / "a" / "checkpoints" / "last.pt")
    for seed in (1, 2):
        cfg = compose_config(QUIET + ["env.num_envs=4", "total_timesteps=640", f"seed={seed}", f"resume={tmp_path / 'a'}"])
        model = torch.nn.Linear(1, 1)  # stands in for the network: only the random states matter here
        state = TrainState(model, torch.optim.Adam(model.parameters()),
                           generators={"ppo": torch.Generator().manual_seed(seed)})
        payload = load_resume(cfg)
        payload["model"], payload["optimizer"] = model.state_dict(), state.optimizer.state_dict()
        torch.manual_seed(seed)
        resume_into(state, payload, EpisodeStats(4), {**saved["config"], "seed": seed})
        kept = torch.equal(state.generators["ppo"].get_state(), saved["generators"]["ppo"]["state"])
        global_kept = torch.equal(torch.get_rng_state(), saved["rng"]["torch"])
        assert (kept, global_kept) == ((True, True) if seed == 1 else (False, False)), seed
        if seed == 2:  # the fork starts from the new seed
            assert torch.equal(state.generators["ppo"].get_state(), torch.Generator().manual_seed(2).get_state())


def test_a_sweep_resuming_a_finished_run_fails_before_any_job_starts(tmp_path):
    run(compose_config(QUIET + ["env.num_envs=4", "algo.num_steps=16", "total_timesteps=320"]), run_dir=tmp_path / "first")
    cmd = [sys.executable, "train.py", "-m", f"resume={tmp_path / 'first'}", "total_timesteps=640,320", "env.num_envs=4",
           "algo.num_steps=16", "logger=none", "progress_bar=false", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "error: resume: the checkpoint has trained 320 environment steps, total_timesteps is 320")
    assert not list(tmp_path.glob("sweep/*/summary.json"))


def test_a_run_resumed_into_its_own_directory_names_the_checkpoint_where_it_was_moved(tmp_path):
    base = QUIET + ["env.num_envs=4", "algo.num_steps=16"]
    run(compose_config(base + ["total_timesteps=320"]), run_dir=tmp_path)
    # spelled another way (the checkpoint is still the one in this directory)
    spelled = tmp_path.parent / ".." / tmp_path.parent.name / tmp_path.name
    summary = run(compose_config(base + ["total_timesteps=640", f"resume={spelled}"]), run_dir=tmp_path)
    [kept] = tmp_path.glob("earlier-run-*/last.pt")
    assert summary["resumed_from"] == str(kept.resolve())
    assert load_checkpoint(kept)["global_step"] == 320
    assert load_checkpoint(tmp_path / "checkpoints" / "last.pt")["global_step"] == 640


def test_a_sweep_whose_values_interpolate_hydra_settings_is_checked_as_its_jobs_run(tmp_path):
    cmd = [sys.executable, "train.py", "-m", "seed=${hydra:job.num}", "algo.gamma=0.9,0.99", "env.num_envs=2",
           "algo.num_steps=16", "total_timesteps=32", "logger=none", "progress_bar=false",
           f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(read_summary(d)["seed"] for d in (tmp_path / "sweep").glob("*_s*")) == [0, 1]


def test_train_state_round_trips_its_generators():
    from rl_app.checkpoint import TrainState

    def state_with(seed):
        model = torch.nn.Linear(3, 2)
        generator = torch.Generator().manual_seed(seed)
        return TrainState(model, torch.optim.Adam(model.parameters()), generators={"ppo": generator})

    source = state_with(7)
    torch.rand(5, generator=source.generators["ppo"])
    source.global_step, source.iteration, source.wall_time_s = 96, 3, 1.5
    payload = source.state_dict()
    expected = torch.rand(4, generator=source.generators["ppo"])
    target = state_with(8)
    target.load_state_dict(payload)
    assert torch.equal(torch.rand(4, generator=target.generators["ppo"]), expected)
    assert (target.global_step, target.iteration, target.wall_time_s) == (96, 3, 1.5)
    assert torch.equal(target.model.weight, source.model.weight)


@pytest.mark.parametrize("overrides, message", [
    (["resume={missing}"], r"resume must be a checkpoint file or a run directory holding checkpoints/last\.pt"),
    (["resume={run}", "total_timesteps=320"], r"resume: the checkpoint has trained 320 environment steps, "
                                                r"total_timesteps is 320: raise total_timesteps"),
    (["resume={run}", "algo=impala"], r"resume: the checkpoint's run has algo\.name='ppo', this one "
                                       r"algo\.name='impala'"),
    (["resume={run}", "env.id=Acrobot-v1"], r"resume: the checkpoint's run has env\.id='CartPole-v1'"),
    (["resume={impala_run}", "algo=impala", "algo.optimizer=rmsprop"],  # the CartPole tuning takes adam
     r"resume: the checkpoint's run has algo\.optimizer='adam', this one algo\.optimizer='rmsprop'"),
    (["resume={run}", "env.normalize_obs=true"], r"resume: the checkpoint's network does not fit this config's: "
                                                 r"a setting that shapes observations or the network differs"),
    (["resume={not_a_checkpoint}"], r"resume: '.*summary\.json' is not a readable checkpoint \(truncated, or not"),
    (["resume={truncated}"], r"resume: '.*cut\.pt' is not a readable checkpoint \(truncated, or not written"),
    (["resume={no_rng}"], r"resume: '.*no_rng\.pt' is not a checkpoint written by train\.py \(it lacks rng\)"),
    (["resume={no_config}"], r"resume: '.*no_config\.pt' is not a checkpoint written by train\.py \(it lacks "
                             r"config\.algo, config\.env, config\.seed, rng\.python, rng\.numpy, rng\.torch\)"),
    (["resume="], r"resume must be a checkpoint file or a run directory holding checkpoints/last\.pt, got ''"),
    (["resume={damaged}"], r"resume: the checkpoint '.*damaged\.pt' holds damaged contents \(TypeError"),
])
def test_a_checkpoint_that_cannot_be_resumed_is_a_config_error(tmp_path, overrides, message):
    from rl_app.config import ConfigError

    base = QUIET + ["env.num_envs=4", "total_timesteps=640"]
    run(compose_config(QUIET + ["env.num_envs=4", "algo.num_steps=16", "total_timesteps=320"]),
        run_dir=tmp_path / "first")
    if any("impala_run" in o for o in overrides):
        run(compose_config(QUIET + ["algo=impala", "algo.deterministic=true", "total_timesteps=320"]),
            run_dir=tmp_path / "impala")
    checkpoint = tmp_path / "first" / "checkpoints" / "last.pt"
    (tmp_path / "cut.pt").write_bytes(checkpoint.read_bytes()[:5000])
    payload = load_checkpoint(checkpoint)
    del payload["rng"]
    torch.save(payload, tmp_path / "no_rng.pt")
    torch.save({**payload, "rng": {}, "config": None}, tmp_path / "no_config.pt")
    complete = load_checkpoint(checkpoint)
    torch.save({**complete, "episode_stats": {**complete["episode_stats"], "finished_returns": 5}}, tmp_path / "damaged.pt")
    paths = {"missing": tmp_path / "nothing", "run": tmp_path / "first", "impala_run": tmp_path / "impala",
             "not_a_checkpoint": tmp_path / "first" / "summary.json", "truncated": tmp_path / "cut.pt",
             "no_rng": tmp_path / "no_rng.pt", "no_config": tmp_path / "no_config.pt",
             "damaged": tmp_path / "damaged.pt"}
    cfg = compose_config(base + [o.format(**paths) for o in overrides])
    with pytest.raises(ConfigError, match=message):
        run(cfg, run_dir=tmp_path / "second")
    assert not (tmp_path / "second" / "metrics.jsonl").exists()


@pytest.mark.parametrize("algo", ["ppo", "impala"])
def test_sigterm_stops_at_the_iteration_end_with_summary_and_checkpoint(tmp_path, algo):
    """A scheduler's SIGTERM (or Ctrl-C's SIGINT) ends the run like time_limit_s: checkpoint and summary."""
    import signal
    import threading

    cfg = compose_config(QUIET + [f"algo={algo}", "total_timesteps=1e7", "time_limit_s=60"])
    timer = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        summary = run(cfg, run_dir=tmp_path)
    finally:
        timer.cancel()
    assert summary["finished"] is True and summary["stopped_early"] is True
    assert summary["stop_reason"] == "signal SIGTERM"
    assert 0 < summary["global_step"] < 10_000_000 and summary["wall_time_s"] < 30
    assert read_summary(tmp_path)["stop_reason"] == "signal SIGTERM"
    assert (tmp_path / "checkpoints" / "last.pt").exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored after the run


def test_the_same_signal_twice_at_once_is_one_stop_request():
    """coreutils' timeout signals the command and then its process group: two SIGTERMs at once must still end
    the run at the iteration's end (checkpoint, summary); the same signal a second later interrupts at once."""
    import signal
    import time

    from rl_app.runtime import StopSignal

    interrupted = []
    outer = signal.signal(signal.SIGTERM, lambda signum, frame: interrupted.append(signum))
    stop = StopSignal()
    try:
        stop.install()
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # Python runs signal handlers between bytecodes; let both arrive
        assert stop.signum == signal.SIGTERM and interrupted == []
        stop._first_at -= StopSignal.DUPLICATE_S
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert interrupted == [signal.SIGTERM]  # the handler from before install(), which is back in place
        assert signal.getsignal(signal.SIGTERM) is not stop._handle
    finally:
        stop.restore()
        signal.signal(signal.SIGTERM, outer)


@pytest.mark.parametrize("algo", ["ppo", "impala"])
def test_a_second_signal_interrupts_the_run_and_its_summary_names_the_signal(tmp_path, monkeypatch, algo):
    """A second signal gets the handler from before the run (here one that raises): the run ends on that exception
    with a summary that has the error, finished false and stop_reason naming the signal received."""
    import signal
    import time

    from rl_app.envs import EnvPoolAdapter
    from rl_app.runtime import StopSignal

    recv_group = EnvPoolAdapter.recv_group  # every synchronous step ends there
    calls = []

    def signal_twice_then_recv(self, group):
        calls.append(None)
        if len(calls) == 50:  # a run stuck mid-iteration gets a second signal; it arrives 50 ms after the first
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGTERM)
        return recv_group(self, group)

    monkeypatch.setattr(StopSignal, "DUPLICATE_S", 0.01)
    monkeypatch.setattr(EnvPoolAdapter, "recv_group", signal_twice_then_recv)
    lockstep = ["algo.deterministic=true"] if algo == "impala" else []  # envs step in the main thread, as handlers run
    cfg = compose_config(QUIET + [f"algo={algo}", "total_timesteps=1e7", "time_limit_s=60"] + lockstep)
    with sigterm_raises_interrupted(), pytest.raises(Interrupted):
        run(cfg, run_dir=tmp_path)
    summary = read_summary(tmp_path)
    assert summary["error"] == "Interrupted()" and summary["finished"] is False
    assert summary["stop_reason"] == "signal SIGTERM" and summary["stopped_early"] is False
    assert 0 < summary["global_step"] < 10_000_000


def test_a_non_finite_loss_stops_the_run_after_logging_it(tmp_path):
    from rl_app.tracking import RunLogger

    cfg = compose_config(QUIET)
    logger = RunLogger(cfg, tmp_path, total_steps=100, config_dict={})
    try:
        logger.log({"global_step": 10, "sps": 1.0, "policy_loss": 0.5, "value_loss": 1.0})
        with pytest.raises(FloatingPointError, match="value_loss at global_step 20"):
            logger.log({"global_step": 20, "sps": 1.0, "policy_loss": 0.5, "value_loss": float("nan")})
    finally:
        logger.close()
    lines = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [l["global_step"] for l in lines] == [10, 20] and lines[1]["value_loss"] is None


@pytest.mark.slow
def test_ppo_learns_cartpole(tmp_path):
    """PPO with the default CartPole config: mean return of the last 100 episodes >= 400 by 300k steps; its
    checkpoint's greedy policy (evaluate.py) averages >= 400 over 10 episodes on envs it has not trained on."""
    cfg = compose_config(["logger=none", "progress_bar=false", "device=cpu", "seed=1", "total_timesteps=300000",
                          "log_interval_s=30"])
    summary = run(cfg, run_dir=tmp_path)
    assert summary["global_step"] >= 300_000
    assert summary["episodic_return_mean"] >= 400, summary
    from rl_app.evaluation import evaluate
    greedy = evaluate(compose_config([f"checkpoint={tmp_path}", "device=cpu"], config_name="evaluate"), tmp_path)
    assert greedy["episodes"] == 10 and greedy["episodic_return_mean"] >= 400, greedy
