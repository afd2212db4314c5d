"""Every algo x env config composes and validates; typos and bad values are rejected with clear messages."""

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from rl_app.config import validate_config
from tests.helpers import ALGOS, ENVS, compose_config


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("env", ENVS)
def test_every_algo_env_pair_composes_and_validates(algo, env):
    cfg = compose_config([f"algo={algo}", f"env={env}"])
    validate_config(cfg)
    assert cfg.algo.name == algo
    assert OmegaConf.is_missing(cfg.env, "id") is False
    expected_family = {"cartpole": "classic", "pong": "atari", "breakout": "atari", "halfcheetah": "mujoco"}[env]
    assert cfg.env.family == expected_family


def test_default_is_ppo_cartpole_with_offline_wandb():
    cfg = compose_config()
    assert (cfg.algo.name, cfg.env.id, cfg.logger.name, cfg.logger.mode) == ("ppo", "CartPole-v1", "wandb", "offline")


def test_per_env_tuning_applies_and_command_line_wins():
    pong = compose_config(["env=pong"])
    assert pong.algo.clip_coef == 0.1 and pong.algo.ent_coef == 0.01 and pong.env.id == "Pong-v5"
    cfg = compose_config(["env=pong", "algo.clip_coef=0.3", "env.num_envs=256", "algo.num_steps=32",
                          "total_timesteps=2e6", "seed=3"])
    assert cfg.algo.clip_coef == 0.3 and cfg.env.num_envs == 256 and cfg.algo.num_steps == 32
    assert int(cfg.total_timesteps) == 2_000_000 and cfg.seed == 3


@pytest.mark.parametrize("override", ["env.num_env=8", "algo.num_step=8", "totl_timesteps=10", "env.episodic_life=true",
                                      "algo.num_steps=abc", "logger.mode=1.5x"])
def test_unknown_key_or_wrong_type_is_rejected_before_training(override):
    if override.startswith("logger.mode"):
        # A string field takes any text; the value check is validate_config's job (next test).
        cfg = compose_config([override])
        with pytest.raises(ValueError, match="logger.mode"):
            validate_config(cfg)
        return
    with pytest.raises(ConfigCompositionException):
        compose_config([override])


@pytest.mark.parametrize("override, key", [
    ("algo.gamma=1.5", "algo.gamma"),
    ("algo.gae_lambda=-0.1", "algo.gae_lambda"),
    ("algo.num_minibatches=7", "algo.num_minibatches"),
    ("env.num_envs=0", "env.num_envs"),
    ("device=tpu", "device"),
    ("algo.credit_backend=cuda", "algo.credit_backend"),
    ("total_timesteps=0", "total_timesteps"),
    ("total_timesteps=0.5", "total_timesteps"),  # summary.json's total_timesteps (an int) would read 0
    ("total_timesteps=1000.5", "total_timesteps"),  # summary.json would say 1000: not what was asked for
])
def test_bad_values_raise_value_error_naming_the_key(override, key):
    cfg = compose_config([override])
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        validate_config(cfg)


@pytest.mark.parametrize("override, key", [
    ("env.num_threads=-1", "env.num_threads"),
    ("env.max_episode_steps=0", "env.max_episode_steps"),
    ("algo.ent_coef=-1", "algo.ent_coef"),
    ("algo.vf_coef=-1", "algo.vf_coef"),
    ("algo.adam_eps=-1", "algo.adam_eps"),
    ("checkpoint_interval_s=-1", "checkpoint_interval_s"),
    ("torch_threads=-3", "torch_threads"),
    ("time_limit_s=0", "time_limit_s"),
    ("algo.learning_rate=inf", "algo.learning_rate"),
    ("algo.gamma=nan", "algo.gamma"),
    ("algo.max_grad_norm=nan", "algo.max_grad_norm"),
    ("total_timesteps=inf", "total_timesteps"),
    ("seed=-1", "seed"),
    ("seed=2147483640", "seed"),  # + 16 envs overflows EnvPool's int32 seeds
    ("device=cuda:-1", "device"),
    ("algo.learning_rate=1e39", "algo.learning_rate"),  # finite, but not as the optimizers' float32
    ("algo.learning_rate=5e37", "algo.learning_rate"),  # Adam's first step, 10x it, overflows a float32
    ("+env.batch_size=4", "env.batch_size is set by the application"),
    ("+env.seed=5", "env.seed is set by the application"),
    ("+env.env_seed=[5,5,5,5,5,5,5,5]", r"env.env_seed is set by the application, not passed to EnvPool; use seed "),
    ("algo.env_groups=0", "algo.env_groups"),
    ("algo.env_groups=3", "algo.env_groups"),  # CartPole's 8 envs
    ("algo.env_groups=16", "algo.env_groups"),
])
def test_more_out_of_range_values_are_rejected(override, key):
    cfg = compose_config([override])
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        validate_config(cfg)


@pytest.mark.parametrize("overrides, key", [
    (["algo.actor_env_batch_size=3"], "algo.actor_env_batch_size"),  # 8 envs per actor: not a divisor
    (["algo.actor_env_batch_size=8"], "algo.actor_env_batch_size"),  # not smaller: that is synchronous
    (["algo.actor_env_batch_size=-2"], "algo.actor_env_batch_size"),
    (["algo.actor_env_batch_size=4", "algo.deterministic=true"], "algo.actor_env_batch_size"),
    (["env.num_envs=15"], "env.num_envs"),
    (["algo.batch_size=12"], "algo.batch_size"),
    (["algo.actor_env_batch_size=4", "algo.batch_size=6"], "algo.batch_size"),
    (["algo.reward_scale=0"], "algo.reward_scale"),
    (["algo.reward_scale=inf"], "algo.reward_scale"),
    (["algo.actor_env_batch_size=4", "algo.cuda_graph_act=true"], "algo.cuda_graph_act"),
])
def test_impala_settings_are_checked_with_config_errors(overrides, key):
    from rl_app.config import ConfigError

    cfg = compose_config(["algo=impala"] + overrides)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate_config(cfg)


def test_async_actor_batch_size_allows_batches_of_its_unrolls():
    cfg = compose_config(["algo=impala", "algo.actor_env_batch_size=4", "algo.batch_size=4"])
    validate_config(cfg)
    assert cfg.algo.actor_env_batch_size == 4


@pytest.mark.parametrize("overrides, message", [
    (["env.id=Foo-v0"], "env.id='Foo-v0'"),
    (["env.id=Pong-v5"], "env.family='classic'"),  # an Atari id under the classic-control config
])
def test_env_id_problems_name_the_setting(tmp_path, overrides, message):
    from rl_app.config import ConfigError
    from rl_app.run import run

    cfg = compose_config(["logger=none", "progress_bar=false"] + overrides)
    with pytest.raises(ConfigError, match=message):
        run(cfg, run_dir=tmp_path)


def test_inf_clips_are_allowed():
    validate_config(compose_config(["algo=impala", "algo.rho_clip=inf", "algo.c_clip=inf", "algo.pg_rho_clip=inf",
                                    "algo.max_grad_norm=inf"]))


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_is_a_config_error():
    from rl_app.config import ConfigError
    from rl_app.runtime import resolve_device

    with pytest.raises(ConfigError, match="device='cuda'"):
        resolve_device("cuda")


@pytest.mark.parametrize("override, key", [
    ("env.stack_num=0", "env.stack_num"),  # EnvPool segfaulted
    ("env.noop_max=-1", "env.noop_max"),  # EnvPool segfaulted
    ("env.noop_max=0", "env.noop_max"),  # so did 0
    ("env.img_height=0", "env.img_height"),  # OpenCV aborted the process
    ("env.img_width=35", "env.img_width"),  # the CNN's convolutions failed after the envs started
    ("env.frame_skip=0", "env.frame_skip"),  # trained silently
    ("env.repeat_action_probability=1.5", "env.repeat_action_probability"),
])
def test_atari_settings_are_checked_before_envpool_sees_them(override, key):
    from rl_app.config import ConfigError

    cfg = compose_config(["env=pong", override])
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate_config(cfg)


@pytest.mark.parametrize("overrides, key", [
    # torch's "Invalid epsilon value" came after the envs had started
    (["algo.optimizer=rmsprop", "algo.rmsprop_eps=-1"], "algo.rmsprop_eps"),
    (["algo.optimizer=rmsprop", "algo.rmsprop_momentum=-1"], "algo.rmsprop_momentum"),
    (["algo.optimizer=rmsprop", "algo.rmsprop_momentum=1.5"], "algo.rmsprop_momentum"),  # trained on, diverging
    (["algo.optimizer=rmsprop", "algo.rmsprop_alpha=1.5"], "algo.rmsprop_alpha"),  # trained into a non-finite loss
    (["algo.optimizer=adam", "algo.adam_eps=0"], "algo.adam_eps"),
    (["algo.norm_adv=true", "algo.batch_size=1", "algo.unroll_length=1", "env.num_envs=2",
      "algo.num_actor_threads=2"], r"algo.batch_size \* algo.unroll_length"),
])
def test_impala_optimizer_and_normalisation_settings_are_checked(overrides, key):
    from rl_app.config import ConfigError

    cfg = compose_config(["algo=impala"] + overrides)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.") if "\\" not in key else key):
        validate_config(cfg)


def test_unused_rmsprop_settings_and_the_smallest_frames_pass():
    validate_config(compose_config(["algo=impala", "algo.optimizer=adam", "algo.rmsprop_eps=0"]))
    validate_config(compose_config(["env=pong", "env.img_height=36", "env.img_width=36", "env.noop_max=1"]))


@pytest.mark.parametrize("height, width, out", [(84, 84, (7, 7)), (36, 36, (1, 1)), (60, 100, (4, 9))])
def test_the_atari_network_takes_every_frame_size_the_config_allows(height, width, out):
    import torch

    from rl_app.config import MIN_ATARI_IMAGE
    from rl_app.models import build_model, nature_cnn_output_hw

    assert nature_cnn_output_hw(height, width) == out and min(nature_cnn_output_hw(MIN_ATARI_IMAGE - 1, 84)) == 0
    model = build_model("atari", (4, height, width), 6, ())
    logits, values = model.features(torch.zeros(2, 4, height, width, dtype=torch.uint8))
    assert logits.shape == (2, 6) and values.shape == (2,)


def test_ppo_minibatch_of_one_sample_with_normalised_advantages_is_rejected():
    from rl_app.config import ConfigError

    overrides = ["env.num_envs=2", "algo.num_steps=4", "algo.num_minibatches=8"]
    with pytest.raises(ConfigError, match=r"algo\.num_minibatches must be at most .* = 4"):
        validate_config(compose_config(overrides))
    validate_config(compose_config(overrides + ["algo.norm_adv=false"]))
    validate_config(compose_config(["env.num_envs=2", "algo.num_steps=4", "algo.num_minibatches=4"]))
    one = ["env.num_envs=1", "algo.num_steps=1", "algo.num_minibatches=1"]
    with pytest.raises(ConfigError, match=r"algo\.norm_adv must be false for a batch of one sample"):
        validate_config(compose_config(one))
    validate_config(compose_config(one + ["algo.norm_adv=false"]))


@pytest.mark.parametrize("override, message", [
    ("+algo.lerning_rate=1", r"algo\.lerning_rate is not a setting .*did you mean algo\.learning_rate\?"),
    ("+foo=1", r"^foo is not a setting \(.*\)\. The settings are: algo, env, logger, total_timesteps"),
    ("+logger.projekt=x", r"logger\.projekt is not a setting .*did you mean logger\.project\?"),
    ("+algo.vtrace_lambda=1", r"algo\.vtrace_lambda is not a setting \(.*\); vtrace_lambda is a setting of "
                              r"algo=impala\. The settings of algo are: name, num_steps"),
])
def test_a_key_added_with_plus_must_be_a_setting(override, message):
    # Hydra rejects env.num_env=8 and suggests +env.num_env=8, which it then adds without any check.
    from rl_app.config import ConfigError

    cfg = compose_config(["env=pong", override])
    with pytest.raises(ConfigError, match=message):
        validate_config(cfg)


def test_an_extra_env_key_goes_to_envpool_which_rejects_an_unknown_one():
    # env.* keys beyond the schema are EnvPool options (rl_app.envs.envpool_kwargs): +env.<option> is how to set
    # one the schema lacks, so validate_config lets them through and envpool.make checks them.
    from rl_app.config import ConfigError
    from rl_app.envs import check_env_options, make_envpool

    known = compose_config(["+env.thread_affinity_offset=-1", "env.num_envs=2"])
    validate_config(known)
    make_envpool(known.env, seed=1).close()
    unknown = compose_config(["+env.thread_affinity_ofset=-1", "env.num_envs=2"])
    validate_config(unknown)
    message = (r"^env\.thread_affinity_ofset is not an option EnvPool takes for 'CartPole-v1' \(did you mean "
               r"env\.thread_affinity_offset\?\); its options: num_threads, ")
    with pytest.raises(ConfigError, match=message):
        make_envpool(unknown.env, seed=1)
    with pytest.raises(ConfigError, match=r"^env\.num_env is not an option EnvPool takes for 'CartPole-v1' \(did you "
                                          r"mean env\.num_envs\?\)"):
        check_env_options(compose_config(["+env.num_env=8"]).env)
    with pytest.raises(ConfigError, match=r"^env\.id='CartPole-v2' is not an EnvPool environment \(did you mean "
                                          r"CartPole-v1"):
        check_env_options(compose_config(["env.id=CartPole-v2"]).env)
    check_env_options(compose_config(["env=pong", "+env.zero_discount_on_life_loss=true"]).env)
    check_env_options(compose_config(["env.id=Acrobot-v1"]).env)
    check_env_options(compose_config(["env=halfcheetah", "env.id=Hopper-v4"]).env)
    check_env_options(compose_config(["+env.render_mode=rgb_array"]).env)  # one envpool.make takes itself
    # EnvPool's own assertion has no message; the error said "(...) ()" before it named the exception.
    with pytest.raises(ConfigError, match=r"\(AssertionError without a message\); check the env settings"):
        make_envpool(compose_config(["+env.max_num_players=0", "env.num_envs=2"]).env, seed=1)


@pytest.mark.parametrize("overrides, message", [
    (["env=atari_schema"], r"^env\.id must be set \(a group's \*_schema options are its bare schemas"),
    (["algo=impala_schema", "env=classic_schema"], r"^env\.id must be set"),
    (["env.family=atari"], r"^env\.family must be 'classic' with this env option, got 'atari': choose the env option"),
    (["env=pong", "env.family=mujoco"], r"^env\.family must be 'atari' with this env option, got 'mujoco'"),
    (["algo.name=impala"], r"^algo\.name must be 'ppo' with this algo option, got 'impala': choose the algo option"),
    (["logger=none", "logger.name=wandb"], r"^logger\.name must be 'none' with this logger option, got 'wandb'"),
    (["logger=none", "+logger.mode=online"], r"^logger\.mode is not a setting \(.*\); mode is a setting of "
                                             r"logger=wandb\. The settings of logger are: name$"),
])
def test_a_key_left_without_a_value_or_one_its_option_fixes_is_a_config_error(overrides, message):
    """The schema-only options and an override of the key that picks a schema (env.family, algo.name,
    logger.name) used to end in omegaconf tracebacks (or a run configured for another algorithm or network)."""
    from rl_app.config import ConfigError

    cfg = compose_config(overrides)
    with pytest.raises(ConfigError, match=message):
        validate_config(cfg)


@pytest.mark.parametrize("overrides, family", [
    (["env.id=Hopper-v4"], "mujoco"),
    (["env=halfcheetah", "env.id=CartPole-v1"], "classic"),
    (["env=pong", "env.id=HalfCheetah-v4"], "mujoco"),
    (["env.id=Breakout-v5"], "atari"),
])
def test_an_env_id_of_another_family_than_its_group_is_a_config_error(overrides, family):
    """A new user's ``env.id=Hopper-v4`` under the default CartPole group trained with CartPole's network settings
    and tuning; the id's family now has to be the group's, checked from EnvPool's registry before a job starts."""
    from rl_app.config import ConfigError
    from rl_app.envs import check_env_options

    cfg = compose_config(overrides)
    validate_config(cfg)
    with pytest.raises(ConfigError, match=rf"^env\.id='{cfg.env.id}' is a {family} environment, which does not fit "
                                          rf"env\.family='{cfg.env.family}'"):
        check_env_options(cfg.env)


def test_a_schema_option_with_its_values_set_validates():
    cfg = compose_config(["algo=ppo_schema", "env=classic_schema", "env.id=CartPole-v1", "logger=none_schema"])
    validate_config(cfg)
    assert (cfg.algo.name, cfg.env.family, cfg.logger.name) == ("ppo", "classic", "none")


def test_the_training_benchmark_variants_compose_and_validate():
    """``scripts/bench_training.py``'s variants are configs ``train.py`` accepts (a renamed key would fail here,
    not on the GPU machine)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_training.py"
    spec = importlib.util.spec_from_file_location("bench_training", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for name, overrides in bench.VARIANTS.items():
        cfg = compose_config(overrides + ["device=cuda"])
        validate_config(cfg)
        assert cfg.algo.name == name.split("_")[0]


@pytest.mark.parametrize("key", ["cuda_graph_act", "cuda_graph_update"])
@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("value, want", [("null", None), ("true", True), ("false", False)])
def test_cuda_graph_settings_are_null_true_or_false(key, algo, value, want):
    """Null by default (on for a CUDA device, off otherwise); true on a CPU fails before a sweep starts. The update
    graph is PPO's: IMPALA takes the key too (a sweep over both algorithms may set it) but only as null or false."""
    import torch

    assert getattr(compose_config([f"algo={algo}"]).algo, key) is None
    with pytest.raises(ConfigCompositionException):
        compose_config([f"algo={algo}", f"algo.{key}=sometimes"])
    for device in ("cpu", "auto", "cuda", "cuda:1"):
        cfg = compose_config([f"algo={algo}", f"algo.{key}={value}", f"device={device}"])
        assert getattr(cfg.algo, key) is want
        if want is True and key == "cuda_graph_update" and algo == "impala":
            with pytest.raises(ValueError, match=r"algo\.cuda_graph_update must be null or false for IMPALA "
                                                 r"\(it graphs PPO's update epochs\), got true$"):
                validate_config(cfg)
        elif want is True and (device == "cpu" or device == "auto" and not torch.cuda.is_available()):
            with pytest.raises(ValueError, match=rf"algo\.{key} must be null or false on a CPU "
                                                 rf"\(device={device}.*CUDA graphs need a CUDA GPU\), got true$"):
                validate_config(cfg)
        else:
            validate_config(cfg)


def test_every_tuning_name_an_override_gives_must_name_a_file():
    """The tuning group is optional, so Hydra skips a name without a file: for the default ``<algo>_<env>`` that
    means no tuned values for the pair; for a name given as an override (also inside a list, which Hydra leaves
    out of its record of choices) it is a typo."""
    from rl_app.config import ConfigError, check_tuning_overrides

    options = ["impala_cartpole", "ppo_cartpole", "ppo_pong"]
    for fine in (["algo=impala", "env=halfcheetah"], ["tuning=ppo_pong"], ["tuning=ppo_pong.yaml"], ["~tuning"],
                 ["~tuning=ppo_pong"], ["tuning=[ppo_cartpole,ppo_pong]"], ["tuning=${algo}_${env}"], ["tuning="],
                 ["+tuning=ppo_pong", "seed=3"]):
        check_tuning_overrides(fine, options)
    for bad, name in ((["tuning=ppo_pongg"], "ppo_pongg"), (["seed=2", "tuning=[ppo_pong,ppo_pongg]"], "ppo_pongg"),
                      (["++tuning=impala_halfcheetah"], "impala_halfcheetah")):
        with pytest.raises(ConfigError, match=rf"^tuning={name} names no file in conf/tuning/"):
            check_tuning_overrides(bad, options)
    with pytest.raises(ConfigError, match=r"^tuning=ppo_pongg names no file in conf/tuning/ \(did you mean "
                                          r"ppo_pong\?\): choose one of impala_cartpole, ppo_cartpole, ppo_pong, "
                                          r"or ~tuning for none$"):
        check_tuning_overrides(["tuning=ppo_pongg"], options)
