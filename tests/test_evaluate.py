"""evaluate.py: a checkpoint's policy played on fresh environments (rl_app/evaluation.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rl_app.config import ConfigError
from rl_app.evaluation import evaluate
from rl_app.run import run
from tests.helpers import compose_config

ROOT = Path(__file__).resolve().parents[1]
QUIET = ["logger=none", "progress_bar=false", "device=cpu"]


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    """A short PPO CartPole run: its directory holds checkpoints/last.pt."""
    run_dir = tmp_path_factory.mktemp("cartpole")
    run(compose_config(QUIET + ["env.num_envs=4", "algo.num_steps=16", "total_timesteps=640"]), run_dir=run_dir)
    return run_dir


def eval_config(*overrides):
    return compose_config(["device=cpu", *overrides], config_name="evaluate")


def test_evaluation_counts_each_envs_share_of_episodes_and_writes_eval_json(cartpole_run, tmp_path):
    """5 episodes over 2 envs: env 0 plays 2 and env 1 plays 3 (later ones are not counted); CartPole pays 1 per
    step, so every return equals its length. Greedy evaluation with one seed repeats exactly; sampled actions
    with another seed differ."""
    out = tmp_path / "a"
    out.mkdir()
    res = evaluate(eval_config(f"checkpoint={cartpole_run}", "episodes=5", "num_envs=2"), out)
    assert json.loads((out / "eval.json").read_text()) == json.loads(json.dumps(res))
    assert res["episodes"] == 5 and len(res["returns"]) == 5 and res["num_envs"] == 2
    assert sorted(res["episode_envs"]) == [0, 0, 1, 1, 1]
    assert res["returns"] == [float(n) for n in res["lengths"]] and all(1 <= n <= 500 for n in res["lengths"])
    assert res["global_step"] == 640 and res["env_id"] == "CartPole-v1" and res["algo"] == "ppo"
    assert res["episodic_return_mean"] == pytest.approx(sum(res["returns"]) / 5)
    assert res["checkpoint"] == str(cartpole_run / "checkpoints" / "last.pt") and res["video"] is None
    again = evaluate(eval_config(f"checkpoint={cartpole_run}", "episodes=5", "num_envs=2"), tmp_path)
    assert again["returns"] == res["returns"]
    sampled = [evaluate(eval_config(f"checkpoint={cartpole_run / 'checkpoints' / 'last.pt'}", "episodes=8",
                                    "greedy=false", f"seed={seed}"), tmp_path)["returns"] for seed in (3, 3, 4)]
    assert sampled[0] == sampled[1] != sampled[2]


def test_logger_wandb_puts_the_results_in_a_w_and_b_run_of_its_own(cartpole_run, tmp_path, monkeypatch):
    """logger=wandb: one W&B run (job_type "eval", the evaluation's settings and the checkpoint's config) whose
    summary holds eval.json's numbers as eval/<key>, and every episode's return as a histogram; finished."""
    import rl_app.evaluation as evaluation

    started = []

    class FakeRun:
        def __init__(self, logger_cfg, run_dir, config, name, job_type=None):
            self.config, self.name, self.job_type, self.summary, self.logged = config, name, job_type, {}, []
            self.finished = False
            started.append(self)

        def log(self, data):
            self.logged.append(data)

        def finish(self):
            self.finished = True

    monkeypatch.setattr(evaluation, "start_wandb", FakeRun)
    res = evaluate(eval_config(f"checkpoint={cartpole_run}", "episodes=3", "logger=wandb"), tmp_path)
    (wb,) = started
    assert wb.job_type == "eval" and wb.finished and wb.name.startswith("eval_ppo_CartPole-v1_")
    assert wb.config["evaluate"]["episodes"] == 3 and wb.config["trained"]["env"]["id"] == "CartPole-v1"
    assert "logger" not in wb.config["evaluate"]
    assert wb.summary["eval/episodic_return_mean"] == res["episodic_return_mean"]
    assert wb.summary["eval/episodes"] == 3 and wb.summary["eval/global_step"] == 640
    assert list(wb.logged[0]) == ["eval/returns"]


def test_more_envs_than_episodes_use_one_env_per_episode(cartpole_run, tmp_path):
    res = evaluate(eval_config(f"checkpoint={cartpole_run}", "episodes=3", "num_envs=8"), tmp_path)
    assert res["num_envs"] == 3 and res["episodes"] == 3


@pytest.mark.parametrize("overrides, message", [
    (["episodes=0"], "episodes must be an integer >= 1, got 0"),
    (["device=cudax"], "device must be auto, cpu, cuda or cuda:<index>, got 'cudax'"),
    (["video_fps=60"], "video_fps must be at most 50, got 60"),
    (["+env.num_envs=3"], "env is not a setting of evaluate.py"),
    (["num_envs=0"], "num_envs must be an integer >= 1"),
    (["seed=-1"], "seed must be an integer >= 0"),
    (["seed=2147483640"], "seed must be in \\[0, 2147483637\\] with 10 envs"),
    (["video=true"], "video=true needs a checkpoint of an Atari run"),
    (["seed=???"], "^seed must be set$"),
    (["episodes=???", "video_fps=???"], "^episodes, video_fps must be set$"),
    (["episodes=${oops}"], "^episodes: Interpolation key 'oops' not found$"),
    (["+num_env=3"], r"^num_env is not a setting of evaluate.py \(.*\); did you mean num_envs\?"),
    (["logger=wandb", "logger.mode=bogus"], "^logger.mode must be one of offline, online, disabled, got 'bogus'$"),
    (["logger.name=wandb"], "^logger.name must be 'none' with this logger option, got 'wandb': choose the logger"),
    (["logger=wandb", "logger.name=none"], "^logger.name must be 'wandb' with this logger option, got 'none'"),
    (["+logger.mode=online"], r"^logger.mode is not a setting of evaluate.py \(.*\); mode is a setting of "
                              r"logger=wandb\. The settings of logger are: name$"),
])
def test_bad_settings_are_config_errors_naming_them(cartpole_run, tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        evaluate(eval_config(f"checkpoint={cartpole_run}", "num_envs=10", "episodes=10", *overrides), tmp_path)


def test_a_missing_or_foreign_checkpoint_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="checkpoint must be a checkpoint file or a run directory"):
        evaluate(eval_config(f"checkpoint={tmp_path / 'nowhere'}"), tmp_path)
    junk = tmp_path / "junk.pt"
    junk.write_text("not a checkpoint")
    with pytest.raises(ConfigError, match="checkpoint: .* is not a readable checkpoint"):
        evaluate(eval_config(f"checkpoint={junk}"), tmp_path)


def test_an_atari_evaluation_writes_the_first_episode_as_a_gif(tmp_path):
    """Pong from a barely trained checkpoint: one whole game (a return in [-21, 21] of raw points, not clipped
    rewards summed per life), and video.gif holds the first video_max_frames of it as 84x84 grayscale frames."""
    from PIL import Image

    run_dir = tmp_path / "pong"
    run(compose_config(QUIET + ["env=pong", "env.num_envs=2", "algo.num_steps=32", "total_timesteps=64"]),
        run_dir=run_dir)
    out = tmp_path / "eval"
    out.mkdir()
    res = evaluate(eval_config(f"checkpoint={run_dir}", "episodes=1", "num_envs=1", "video=true",
                               "video_max_frames=40", "logger=wandb", "logger.mode=offline"), out)
    wandb_runs = list((out / "wandb").glob("offline-run-*"))  # logger=wandb: the GIF goes into the W&B run
    assert len(wandb_runs) == 1 and len(list(wandb_runs[0].glob("files/media/videos/eval/video_*.gif"))) == 1
    assert res["episodes"] == 1 and -21 <= res["returns"][0] <= 21 and res["returns"][0] == int(res["returns"][0])
    assert res["lengths"][0] > 40 and res["video"] == "video.gif" and res["video_frames"] == 40
    with Image.open(out / "video.gif") as gif:  # pillow merges identical consecutive frames, adding their times
        durations = []
        for i in range(gif.n_frames):
            gif.seek(i)
            durations.append(gif.info["duration"])
        assert gif.size == (84, 84) and sum(durations) == 40 * 60  # 1000/15 ms, stored in whole hundredths


def test_evaluate_py_command_line(cartpole_run, tmp_path):
    """The entry point: eval.json in hydra.run.dir and a one-line report; a bad setting exits 2 with one line."""
    out = tmp_path / "cli"
    proc = subprocess.run([sys.executable, "evaluate.py", f"checkpoint={cartpole_run}", "episodes=2", "num_envs=2",
                           "device=cpu", f"hydra.run.dir={out}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "eval.json").read_text())["episodes"] == 2
    assert "2 episodes of CartPole-v1 (greedy actions, 640 training steps): return" in proc.stdout
    bad = subprocess.run([sys.executable, "evaluate.py", f"checkpoint={cartpole_run}", "episodes=0",
                          f"hydra.run.dir={tmp_path / 'bad'}"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "error: episodes must be an integer >= 1, got 0" in bad.stderr
    assert "Traceback" not in bad.stderr
    none = subprocess.run([sys.executable, "evaluate.py", f"hydra.run.dir={tmp_path / 'none'}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert none.returncode == 2 and "error: checkpoint is required" in none.stderr
    typo = subprocess.run([sys.executable, "evaluate.py", f"checkpoint={cartpole_run}", "episode=3",
                           f"hydra.run.dir={tmp_path / 'typo'}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert typo.returncode != 0 and "Key 'episode' not in 'EvalConfig'" in typo.stderr


def test_a_signal_stops_the_evaluation_with_the_finished_episodes_reported(cartpole_run, tmp_path, monkeypatch):
    """A stop request (what rl_app.runtime.STOP records for SIGINT or SIGTERM) after 300 steps: the evaluation stops
    after that step, and eval.json holds the episodes finished so far, marked stopped_early."""
    import signal

    import rl_app.evaluation as evaluation
    from rl_app.envs import EnvPoolAdapter
    from rl_app.runtime import STOP

    class SignalledAt300(EnvPoolAdapter):
        steps = 0

        def step(self, actions):
            SignalledAt300.steps += 1
            if SignalledAt300.steps == 300:
                STOP.signum = signal.SIGTERM
            return super().step(actions)

    monkeypatch.setattr(evaluation, "EnvPoolAdapter", SignalledAt300)
    monkeypatch.setattr(STOP, "signum", STOP.signum)  # put back after the test: later runs read no stale signal
    res = evaluate(eval_config(f"checkpoint={cartpole_run}", "episodes=100000", "num_envs=2"), tmp_path)
    assert SignalledAt300.steps == 300 and res["env_steps"] == 600
    assert res["stopped_early"] and res["stop_reason"] == "signal SIGTERM" and 0 < res["episodes"] < 100000
    assert json.loads((tmp_path / "eval.json").read_text())["episodes"] == res["episodes"]


def test_evaluate_py_exits_with_128_plus_the_signal(cartpole_run, tmp_path):
    """SIGTERM sent once evaluate.py catches it (its handler is installed after the checkpoint and envs load):
    one stderr line, eval.json, exit status 143."""
    import signal
    import time

    def catches_sigterm(pid):
        status = Path(f"/proc/{pid}/status").read_text()
        caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
        return bool(caught & (1 << (signal.SIGTERM - 1)))

    out = tmp_path / "stopped"
    proc = subprocess.Popen([sys.executable, "evaluate.py", f"checkpoint={cartpole_run}", "episodes=100000",
                             "device=cpu", f"hydra.run.dir={out}"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while proc.poll() is None and not catches_sigterm(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    res = json.loads((out / "eval.json").read_text())
    assert res["stopped_early"] and res["stop_reason"] == "signal SIGTERM"
    assert f"stopped on signal SIGTERM after {res['episodes']} of 100000 episodes" in err


def test_a_sweep_names_its_jobs_by_seed_and_goes_on_past_a_bad_one(cartpole_run, tmp_path):
    proc = subprocess.run([sys.executable, "evaluate.py", "-m", f"checkpoint={tmp_path / 'nowhere'},{cartpole_run}",
                           "seed=1", "episodes=2", "device=cpu", f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert "error: checkpoint must be a checkpoint file" in proc.stderr
    assert not (tmp_path / "sweep" / "0_seed1" / "eval.json").exists()
    assert json.loads((tmp_path / "sweep" / "1_seed1" / "eval.json").read_text())["episodes"] == 2
