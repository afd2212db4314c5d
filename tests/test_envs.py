"""The EnvPool adapter around episode boundaries: flags, validity masks, bootstrap rows, episode statistics."""

import numpy as np
import pytest
import torch

import kernels
from rl_app.envs import EnvPoolAdapter, envpool_kwargs
from tests.helpers import compose_config

CPU = torch.device("cpu")


def cartpole(num_envs=2, max_episode_steps=500, seed=0):
    cfg = compose_config(["env=cartpole", f"env.num_envs={num_envs}", f"env.max_episode_steps={max_episode_steps}"])
    return EnvPoolAdapter(cfg.env, seed=seed, device=CPU)


def run(adapter, steps, action=0):
    """Step with a constant action; return per-step obs-acted-on, valid, and the step results."""
    obs = adapter.reset()
    rows = []
    for _ in range(steps):
        valid = adapter.valid.clone()
        step = adapter.step(np.full(adapter.num_envs, action, dtype=np.int32))
        rows.append((obs, valid, step))
        obs = step.obs
    return rows, obs


def test_envpool_kwargs_drop_application_keys_and_nones():
    cfg = compose_config(["env=pong"])
    kwargs = envpool_kwargs(cfg.env)
    assert "id" not in kwargs and "family" not in kwargs and "num_envs" not in kwargs
    assert "max_episode_steps" not in kwargs  # None keeps EnvPool's default
    assert kwargs["episodic_life"] is True and kwargs["reward_clip"] is True


def test_truncation_flags_mask_and_statistics():
    # Pushing right from the start keeps CartPole alive for more than 5 steps, so every end is a truncation.
    env = cartpole(max_episode_steps=5)
    rows, _ = run(env, 12, action=1)
    truncated = torch.stack([r[2].truncated for r in rows])
    terminated = torch.stack([r[2].terminated for r in rows])
    valid = torch.stack([r[1] for r in rows])
    rewards = torch.stack([r[2].rewards for r in rows])
    assert not terminated.any()
    # Steps 0-4 are the first episode; step 5 is the autoreset row; steps 6-10 the second episode.
    expected_trunc = torch.zeros(12, 2, dtype=torch.bool)
    expected_trunc[4] = expected_trunc[10] = True
    assert torch.equal(truncated, expected_trunc)
    expected_valid = torch.ones(12, 2, dtype=torch.bool)
    expected_valid[5] = expected_valid[11] = False
    assert torch.equal(valid, expected_valid)
    assert torch.all(rewards[5] == 0) and torch.all(rewards[:5] == 1)
    assert env.stats.episodes == 4
    assert list(env.stats.finished_returns) == [5.0] * 4
    assert list(env.stats.finished_lengths) == [5] * 4


def test_async_mode_returns_env_ids_with_the_same_autoreset_per_env():
    """Asynchronous EnvPool: recv names its envs; each env's own sequence follows the synchronous layout."""
    cfg = compose_config(["env=cartpole", "env.num_envs=4", "env.max_episode_steps=5", "env.num_threads=2"])
    env = EnvPoolAdapter(cfg.env, seed=0, device=CPU, batch_size=2)
    obs = env.reset()
    assert obs.shape == (4, 4)
    per_env = {i: [] for i in range(4)}
    env.send(np.ones(4, dtype=np.int32), np.arange(4))
    for _ in range(26):
        got = env.recv()
        assert len(got.env_ids) == 2 and got.obs.shape == (2, 4)
        for j, i in enumerate(got.env_ids.tolist()):
            per_env[i].append((float(got.rewards[j]), bool(got.truncated[j]), bool(got.valid[j])))
        env.send(np.ones(2, dtype=np.int32), got.env_ids)
    for i, results in per_env.items():
        assert len(results) >= 11, i
        rewards, truncated, valid = zip(*results[:11])
        assert [k for k in range(11) if truncated[k]] == [4, 10]
        assert [k for k in range(11) if not valid[k]] == [4, 10]  # the next result of each is the autoreset
        assert [k for k in range(11) if rewards[k] == 0] == [5]
    assert env.stats.episodes >= 4 and set(env.stats.finished_returns) == {5.0}
    assert set(env.stats.finished_lengths) == {5}
    env.close()


def test_termination_is_not_truncation_and_the_next_row_is_masked():
    env = cartpole(num_envs=1)
    rows, _ = run(env, 40, action=0)  # always pushing left: the pole falls within a few dozen steps
    terminated = [bool(r[2].terminated[0]) for r in rows]
    truncated = [bool(r[2].truncated[0]) for r in rows]
    t_end = terminated.index(True)
    assert not any(truncated)
    assert bool(rows[t_end + 1][1][0]) is False  # the autoreset row is not a real transition
    assert float(rows[t_end + 1][2].rewards[0]) == 0.0
    assert env.stats.finished_returns[0] == t_end + 1  # reward 1 per real step, the terminal step included
    assert env.stats.finished_lengths[0] == t_end + 1


def test_truncated_step_bootstraps_from_the_final_observation_value():
    """End to end through the storage layout: V+(t) at a truncation is the value of the final observation."""
    env = cartpole(num_envs=2, max_episode_steps=4)
    rows, last_obs = run(env, 9, action=1)

    def value(obs):  # any deterministic function of the observation stands in for the critic
        return 3.0 * obs[:, 0] - 2.0 * obs[:, 2] + 1.0

    values = torch.stack([value(r[0]) for r in rows]).double()
    rewards = torch.stack([r[2].rewards for r in rows]).double()
    terminated = torch.stack([r[2].terminated for r in rows])
    truncated = torch.stack([r[2].truncated for r in rows])
    gamma = 0.9
    out = kernels.compute_gae(rewards, values, terminated, truncated, gamma=gamma, lambda_=0.0,
                              bootstrap_value=value(last_obs).double(), backend="torch")
    t = 3  # the truncated step of the first episode
    assert bool(truncated[t].all())
    final_obs = rows[t][2].obs  # the observation the truncated step returned
    assert torch.equal(rows[t + 1][0], final_obs)  # ... which is the observation stored on the next row
    expected = rewards[t] + gamma * value(final_obs).double() - values[t]
    torch.testing.assert_close(out.advantages[t], expected)


@pytest.mark.parametrize("game", ["breakout"])
def test_atari_episode_is_the_whole_game_with_raw_rewards(game):
    cfg = compose_config([f"env={game}", "env.num_envs=1"])
    env = EnvPoolAdapter(cfg.env, seed=3, device=CPU)
    env.reset()
    rng = np.random.default_rng(0)
    life_losses = 0
    for _ in range(4000):
        step = env.step(rng.integers(0, env.action_space.n, size=1).astype(np.int32))
        life_losses += int(step.terminated[0])
        if env.stats.episodes:
            break
    assert env.stats.episodes == 1
    assert life_losses == 5  # Breakout: five lives, each loss a `terminated` for training ...
    assert env.stats.finished_lengths[0] > 50  # ... but one episode for the statistics
    assert obs_is_uint8(step.obs)


def obs_is_uint8(obs):
    return obs.dtype == torch.uint8 and tuple(obs.shape[1:]) == (4, 84, 84)


def _trace(adapter, actions, grouped):
    """Step ``adapter`` through ``actions`` ([steps, N]); per step the valid mask acted on and the results.
    ``grouped``: a group at a time, each group's step received after the next group's is sent."""
    adapter.reset()
    rows = []
    for step_actions in actions:
        held = adapter.valid
        valid = held.clone()
        if grouped:
            groups = adapter.group_columns
            adapter.send_group(0, step_actions[groups[0]])
            parts = []
            for g in range(len(groups)):
                if g + 1 < len(groups):
                    adapter.send_group(g + 1, step_actions[groups[g + 1]])
                parts.append(adapter.recv_group(g))
            step = tuple(torch.cat(p) for p in zip(*parts))
        else:
            step = tuple(adapter.step(step_actions)) + (sorted(adapter.stats.ended_now),)
        assert torch.equal(held, valid)  # a step makes a new mask: one taken before does not change
        rows.append((valid,) + step)
    return rows


@pytest.mark.parametrize("groups", [2, 3])
def test_env_groups_step_the_envs_one_pool_of_them_would(groups):
    """Groups of a pool: env i is seeded as in one pool, so the same actions give the same observations, rewards,
    flags, valid masks and episode statistics, whether the groups are stepped together or one at a time."""
    cfg = compose_config(["env=cartpole", "env.num_envs=6", "env.max_episode_steps=15"])
    actions = np.random.default_rng(0).integers(0, 2, size=(60, 6)).astype(np.int32)
    one = EnvPoolAdapter(cfg.env, seed=5, device=CPU)
    expected = _trace(one, actions, grouped=False)
    for grouped in (False, True):
        split = EnvPoolAdapter(cfg.env, seed=5, device=CPU, groups=groups)
        assert split.group_columns == [slice(g * 6 // groups, (g + 1) * 6 // groups) for g in range(groups)]
        got = _trace(split, actions, grouped)
        for t, (want_row, got_row) in enumerate(zip(expected, got)):
            for name, want, have in zip(("valid", "obs", "rewards", "terminated", "truncated"), want_row, got_row):
                assert torch.equal(want, have), (grouped, t, name)
            if not grouped:  # step() reports the episodes that ended in every group
                assert want_row[-1] == got_row[-1], t
        assert split.stats.episodes == one.stats.episodes > 6  # both ends happen: falls and truncations
        assert sorted(split.stats.finished_returns) == sorted(one.stats.finished_returns)
        assert any(bool(r[3].any()) for r in expected) and any(bool(r[4].any()) for r in expected)
        split.close()
    one.close()


@pytest.mark.parametrize("groups, batch_size", [(4, 0), (0, 0), (2, 2)])
def test_env_groups_must_divide_the_envs_of_a_synchronous_pool(groups, batch_size):
    cfg = compose_config(["env=cartpole", "env.num_envs=6"])
    with pytest.raises(ValueError, match="groups"):
        EnvPoolAdapter(cfg.env, seed=0, device=CPU, batch_size=batch_size, groups=groups)
