"""The policy step with its random draws split out (``ActorCritic.draw_noise`` / ``act_with_noise``) and its CUDA
graph (``rl_app.graphed_act.GraphedAct``, ``algo.cuda_graph_act``). The graph itself needs a CUDA GPU: those tests
are skipped elsewhere (``scripts/check_graphed_act.py`` runs the same comparison with timings)."""

import math

import pytest
import torch

from rl_app.graphed_act import GraphedAct, graph_act_enabled
from rl_app.models import build_model
from rl_app.run import run
from tests.helpers import compose_config

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA GPU")
MODELS = {  # family, obs_shape, num_actions, action_shape, normalize_obs, obs dtype
    "nature_cnn": ("atari", (4, 36, 40), 6, (), False, torch.uint8),
    "mlp_discrete": ("classic_control", (4,), 3, (), False, torch.float32),
    "mlp_gaussian": ("mujoco", (5,), None, (2,), True, torch.float32),
}


def _model(name, device="cpu", seed=0):
    family, obs_shape, num_actions, action_shape, norm, dtype = MODELS[name]
    torch.manual_seed(seed)
    return build_model(family, obs_shape, num_actions, action_shape, norm).to(device), obs_shape, dtype


def _obs(shape, dtype, batch, device="cpu", seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    if dtype == torch.uint8:
        return torch.randint(0, 256, (batch, *shape), dtype=dtype, device=device, generator=gen)
    return torch.randn((batch, *shape), device=device, generator=gen)


@pytest.mark.parametrize("name", list(MODELS))
def test_act_samples_from_its_own_draws_by_the_distribution_formulas(name):
    """``act`` draws ``draw_noise``'s numbers from the generator and maps them: Gumbel-max over the logits
    (argmax of logits - log(-log u)) with the log-softmax of the chosen action, or mean + noise * std with the
    Gaussian log-density, computed here in float64 from the model's own features."""
    model, shape, dtype = _model(name)
    obs = _obs(shape, dtype, 7)
    used = torch.Generator().manual_seed(5)
    acted = model.act(obs, used)
    # The draws: uniform for a discrete policy, normal for a Gaussian one, one per logit or action dimension.
    spec = torch.Generator().manual_seed(5)
    width = MODELS[name][2] or MODELS[name][3][0]
    noise = (torch.rand if model.discrete else torch.randn)((7, width), generator=spec)
    assert torch.equal(used.get_state(), spec.get_state())  # act drew exactly those numbers
    with torch.no_grad():
        dist, values = model.features(obs)
    if model.discrete:
        logits = dist.double()
        u = noise.double().clamp(1e-20, 1.0)
        want = torch.argmax(logits - torch.log(-torch.log(u)), dim=-1)
        assert torch.equal(acted.actions, want)
        log_p = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
        torch.testing.assert_close(acted.log_probs.double(), log_p.gather(-1, want[:, None])[:, 0], rtol=0,
                                   atol=1e-5)
    else:
        mean, log_std = (x.double() for x in dist)
        actions = mean + noise.double() * log_std.exp()
        torch.testing.assert_close(acted.actions.double(), actions, rtol=0, atol=1e-6)
        density = (-0.5 * noise.double() ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        torch.testing.assert_close(acted.log_probs.double(), density, rtol=0, atol=1e-5)
    torch.testing.assert_close(acted.values, values)


@pytest.mark.parametrize("setting, device, want", [
    (None, "cpu", False), (None, "cuda", True), (None, "cuda:1", True), (True, "cuda", True),
    (False, "cuda", False), (False, "cpu", False)])
def test_graph_act_enabled_reads_null_as_on_for_cuda(setting, device, want):
    assert graph_act_enabled(setting, torch.device(device)) is want


def test_graph_act_enabled_refuses_true_on_a_cpu():
    with pytest.raises(ValueError, match=r"algo\.cuda_graph_act=true needs a CUDA device"):
        graph_act_enabled(True, torch.device("cpu"))


def test_draw_noise_into_a_buffer_draws_the_same_numbers():
    model = _model("mlp_discrete")[0]
    fresh = model.draw_noise(4, torch.device("cpu"), torch.Generator().manual_seed(9))
    buffer = torch.full((4, 3), -1.0)
    returned = model.draw_noise(4, torch.device("cpu"), torch.Generator().manual_seed(9), out=buffer)
    assert returned.data_ptr() == buffer.data_ptr() and torch.equal(buffer, fresh)
    assert float(fresh.min()) >= 0.0 and float(fresh.max()) < 1.0


def test_graphed_act_needs_a_cuda_device():
    model, shape, dtype = _model("mlp_discrete")
    with pytest.raises(ValueError, match="CUDA device"):
        GraphedAct(model, 4, shape, dtype, torch.device("cpu"))


@pytest.mark.parametrize("algo", [["algo=ppo", "algo.num_steps=8"], ["algo=impala", "algo.num_actor_threads=1",
                                                                      "algo.batch_size=2", "algo.unroll_length=8"]])
def test_cuda_graph_act_on_a_cpu_run_is_a_config_error(tmp_path, algo):
    cfg = compose_config(["logger=none", "progress_bar=false", "device=cpu", "algo.cuda_graph_act=true",
                          "env.num_envs=2", "total_timesteps=16"] + algo)
    with pytest.raises(ValueError, match=r"algo\.cuda_graph_act.*device=cpu"):
        run(cfg, run_dir=tmp_path)
    assert not (tmp_path / "summary.json").exists()


@CUDA
@pytest.mark.parametrize("name", list(MODELS))
def test_graphed_act_follows_the_eager_act_across_in_place_updates(name):
    """One generator per path from the same seed, the same actions call after call, and the generators in the
    same state after; the graph sees optimizer steps, normalisation statistics and ``load_state_dict`` made in
    place between calls."""
    device = torch.device("cuda")
    model, shape, dtype = _model(name, device)
    graphed = GraphedAct(model, 6, shape, dtype, device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    other = _model(name, device, seed=3)[0].state_dict()
    graph_gen, eager_gen = (torch.Generator(device=device).manual_seed(11) for _ in range(2))
    for call in range(5):
        if call == 3:
            model.load_state_dict(other)
        obs = _obs(shape, dtype, 6, device, seed=call)
        got = [x.clone() for x in graphed.act(obs, graph_gen)]
        want = model.act(obs, eager_gen)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
        evaluated = model.evaluate(obs, want.actions)
        optimizer.zero_grad()
        (evaluated.log_probs.mean() + evaluated.values.square().mean()).backward()
        optimizer.step()
        model.update_obs_norm(obs.float())
    assert torch.equal(graph_gen.get_state(), eager_gen.get_state())
    with pytest.raises(ValueError, match="captured batch"):
        graphed.act(_obs(shape, dtype, 5, device), None)


@CUDA
def test_ppo_with_cuda_graph_act_trains_as_the_eager_step_does(tmp_path):
    """The same seed with and without the graph: the same episodes and, after three updates, the same weights
    (a graph that replayed stale outputs would act on nothing it sees)."""
    from rl_app.checkpoint import load_checkpoint

    finals = {}
    for graph in ("true", "false"):
        cfg = compose_config(["logger=none", "progress_bar=false", "device=cuda", f"algo.cuda_graph_act={graph}",
                              "algo.env_groups=2", "env.num_envs=4", "algo.num_steps=32", "total_timesteps=384",
                              "seed=5"])
        summary = run(cfg, run_dir=tmp_path / graph)
        assert summary["global_step"] == 384 and summary["finished"] is True and summary["episodes"] >= 1
        assert summary["cuda_graph_act"] is (graph == "true")
        finals[graph] = (summary["episodes"], summary["episodic_return_mean"],
                         load_checkpoint(tmp_path / graph / "checkpoints" / "last.pt")["model"])
    assert finals["true"][:2] == finals["false"][:2]
    for key, value in finals["true"][2].items():
        torch.testing.assert_close(value, finals["false"][2][key], rtol=1e-4, atol=1e-5)


@CUDA
def test_impala_with_cuda_graph_act_runs(tmp_path):
    cfg = compose_config(["algo=impala", "logger=none", "progress_bar=false", "device=cuda",
                          "algo.cuda_graph_act=true", "env.num_envs=4", "algo.num_actor_threads=2",
                          "algo.batch_size=4", "algo.unroll_length=16", "total_timesteps=512"])
    summary = run(cfg, run_dir=tmp_path)
    assert summary["global_step"] == 512 and summary["finished"] is True and summary["episodes"] >= 1
    assert summary["cuda_graph_act"] is True
