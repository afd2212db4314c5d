"""PPO's update epochs (``rl_app.ppo.ppo_update``) and their CUDA graph (``rl_app.graphed_update``,
``algo.cuda_graph_update``). The graph itself needs a CUDA GPU: those tests are skipped elsewhere
(``scripts/bench_ppo_update.py`` runs the same comparison with timings)."""

import pytest
import torch
from torch import nn

from rl_app.graphed_update import (GraphedEpochs, graph_update_enabled, optimizer_tensors, prepare_optimizer,
                                   set_learning_rate)
from rl_app.models import build_model
from rl_app.ppo import PPOBatch, ppo_loss, ppo_update
from rl_app.run import run
from tests.helpers import compose_config

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA GPU")
HYPER = dict(clip_coef=0.2, clip_vloss=True, ent_coef=0.01, vf_coef=0.5, norm_adv=True, max_grad_norm=0.5)


def _setup(device="cpu", rows=64, seed=0, atari=False):
    """A model, its Adam and a random PPO batch (a quarter of the rows invalid) on ``device``."""
    torch.manual_seed(seed)
    if atari:
        model = build_model("atari", (4, 36, 40), 6, (), False).to(device)
        obs = torch.randint(0, 256, (rows, 4, 36, 40), dtype=torch.uint8)
        actions = torch.randint(0, 6, (rows,))
    else:
        model = build_model("classic_control", (4,), 3, (), False).to(device)
        obs = torch.randn(rows, 4)
        actions = torch.randint(0, 3, (rows,))
    batch = PPOBatch(obs, actions, -torch.rand(rows) - 0.5, torch.randn(rows), torch.randn(rows) * 2,
                     torch.randn(rows), torch.rand(rows) > 0.25)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, eps=1e-5)
    return model, optimizer, PPOBatch(*(t.to(device) for t in batch))


def _reference_update(model, optimizer, batch, generator, num_minibatches, update_epochs):
    """The update written out plainly: per epoch one permutation, then a step per minibatch of it."""
    size = batch.valid.shape[0]
    mb = size // num_minibatches
    stats = []
    for _ in range(update_epochs):
        order = torch.randperm(size, device=batch.valid.device, generator=generator)
        for start in range(0, mb * num_minibatches, mb):
            part = PPOBatch(*(t[order[start:start + mb]] for t in batch))
            new = model.evaluate(part.obs, part.actions)
            out = ppo_loss(new.log_probs, new.entropy, new.values, part, **{k: v for k, v in HYPER.items()
                                                                            if k != "max_grad_norm"})
            optimizer.zero_grad()
            out.loss.backward()
            norm = nn.utils.clip_grad_norm_(model.parameters(), HYPER["max_grad_norm"])
            optimizer.step()
            stats.append(torch.stack([out.policy_loss, out.value_loss, out.entropy, out.approx_kl,
                                      out.clip_fraction, norm]))
    return torch.stack(stats).mean(0)


def test_ppo_update_takes_the_steps_of_the_plain_loop():
    model, optimizer, batch = _setup()
    ref_model, ref_optimizer, _ = _setup()
    got = ppo_update(model, optimizer, batch, num_minibatches=4, update_epochs=3,
                     generator=torch.Generator().manual_seed(9), **HYPER)
    want = _reference_update(ref_model, ref_optimizer, batch, torch.Generator().manual_seed(9), 4, 3)
    for p, q in zip(model.parameters(), ref_model.parameters()):
        assert torch.equal(p, q)
    names = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "grad_norm")
    torch.testing.assert_close(torch.stack([got[k] for k in names]), want, rtol=1e-6, atol=1e-7)
    assert float(got["update_epochs_done"]) == 3.0
    assert float(got["grad_norm"]) > 0  # the statistics are real: a loss with a gradient


def test_ppo_update_stops_at_target_kl_after_the_epoch_that_passes_it():
    model, optimizer, batch = _setup()
    optimizer.param_groups[0]["lr"] = 0.5  # large steps: the first epoch's KL is far above 1e-6
    got = ppo_update(model, optimizer, batch, num_minibatches=4, update_epochs=5, target_kl=1e-6,
                     generator=torch.Generator().manual_seed(9), **HYPER)
    assert float(got["update_epochs_done"]) == 1.0


@pytest.mark.parametrize("setting, device, world_size, want", [
    (None, "cpu", 1, False), (None, "cuda", 1, True), (None, "cuda", 2, False), (True, "cuda", 1, True),
    (False, "cuda", 1, False), (False, "cpu", 1, False), (False, "cuda", 4, False)])
def test_graph_update_enabled_reads_null_as_on_for_one_cuda_process(setting, device, world_size, want):
    assert graph_update_enabled(setting, torch.device(device), world_size) is want


def test_graph_update_enabled_refuses_true_on_a_cpu_or_under_torchrun():
    with pytest.raises(ValueError, match=r"algo\.cuda_graph_update=true needs a CUDA device"):
        graph_update_enabled(True, torch.device("cpu"), 1)
    with pytest.raises(ValueError, match=r"algo\.cuda_graph_update=true needs a single process, this run has 2"):
        graph_update_enabled(True, torch.device("cuda"), 2)


def test_graphed_epochs_needs_a_cuda_device_and_no_replicas():
    with pytest.raises(ValueError, match="GraphedEpochs needs a CUDA device"):
        GraphedEpochs(torch.device("cpu"))
    model, optimizer, batch = _setup()
    graph = object.__new__(GraphedEpochs)  # never used: the combination is refused first
    with pytest.raises(ValueError, match="graph and replicas cannot be combined"):
        ppo_update(model, optimizer, batch, num_minibatches=2, update_epochs=1, graph=graph, replicas=object(),
                   **HYPER)


def test_prepare_optimizer_moves_the_form_and_keeps_the_numbers():
    """On the device (a tensor learning rate, float32 step counts where the parameters are, capturable) and
    back: an optimizer converted there and back takes the steps of one never converted."""
    model, optimizer, batch = _setup()
    twin_model, twin_optimizer, _ = _setup()
    for m, o in ((model, optimizer), (twin_model, twin_optimizer)):
        ppo_update(m, o, batch, num_minibatches=2, update_epochs=1, generator=torch.Generator().manual_seed(1),
                   **HYPER)
    prepare_optimizer(optimizer, on_device=True)
    group = optimizer.param_groups[0]
    assert isinstance(group["lr"], torch.Tensor) and group["lr"].dtype == torch.float32
    assert float(group["lr"]) == pytest.approx(3e-3) and group["capturable"] is True
    steps = [optimizer.state[p]["step"] for p in model.parameters()]
    assert all(s.dtype == torch.float32 and s.device == p.device and float(s) == 2.0
               for s, p in zip(steps, model.parameters()))
    set_learning_rate(optimizer, 2e-3)
    assert group["lr"] is optimizer.param_groups[0]["lr"] and float(group["lr"]) == pytest.approx(2e-3)
    assert optimizer_tensors(optimizer)[0] is group["lr"]
    prepare_optimizer(optimizer, on_device=False)
    set_learning_rate(twin_optimizer, 2e-3)
    assert group["lr"] == pytest.approx(2e-3) and isinstance(group["lr"], float) and group["capturable"] is False
    for m, o in ((model, optimizer), (twin_model, twin_optimizer)):
        ppo_update(m, o, batch, num_minibatches=2, update_epochs=1, generator=torch.Generator().manual_seed(2),
                   **HYPER)
    for p, q in zip(model.parameters(), twin_model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-7)  # lr went through float32 and back


def test_cuda_graph_update_on_a_cpu_run_is_a_config_error(tmp_path):
    cfg = compose_config(["logger=none", "progress_bar=false", "device=cpu", "algo.cuda_graph_update=true",
                          "env.num_envs=2", "algo.num_steps=8", "total_timesteps=16"])
    with pytest.raises(ValueError, match=r"algo\.cuda_graph_update must be null or false on a CPU \(device=cpu"):
        run(cfg, run_dir=tmp_path)


def test_a_cpu_run_reports_no_graphed_update(tmp_path):
    cfg = compose_config(["logger=none", "progress_bar=false", "device=cpu", "env.num_envs=2",
                          "algo.num_steps=8", "total_timesteps=16"])
    summary = run(cfg, run_dir=tmp_path)
    assert summary["cuda_graph_update"] is False and summary["finished"] is True


@CUDA
@pytest.mark.parametrize("atari", [False, True])
def test_graphed_epochs_take_the_eager_steps(atari):
    """Three updates (learning rate annealed in between) eager and from the graph, from the same weights,
    optimizer form and generator seed: the same weights, statistics and generator state at the end. The first
    update warms up and captures, the others replay."""
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    device = torch.device("cuda")
    results = {}
    for graphed in (False, True):
        model, optimizer, batch = _setup(device, rows=96, atari=atari)
        initial = [p.detach().clone() for p in model.parameters()]
        prepare_optimizer(optimizer, on_device=True)
        generator = torch.Generator(device=device).manual_seed(4)
        graph = GraphedEpochs(device) if graphed else None
        stats = []
        for lr in (3e-3, 2e-3, 1e-3):
            set_learning_rate(optimizer, lr)
            out = ppo_update(model, optimizer, batch, num_minibatches=3, update_epochs=2, generator=generator,
                             graph=graph, **HYPER)
            stats.append(torch.stack([v.cpu() for v in out.values()]))
        results[graphed] = ([p.detach().clone() for p in model.parameters()], stats, generator.get_state())
        assert all(not torch.equal(p, q) for p, q in zip(results[graphed][0], initial))  # every tensor moved
        if graphed:
            assert graph.graph is not None and graph.calls == 6
    for p, q in zip(results[True][0], results[False][0]):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6)
    for a, b in zip(results[True][1], results[False][1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert torch.equal(results[True][2], results[False][2])


@CUDA
def test_graphed_epochs_refuse_a_batch_in_new_storage():
    device = torch.device("cuda")
    model, optimizer, batch = _setup(device)
    prepare_optimizer(optimizer, on_device=True)
    graph = GraphedEpochs(device)
    ppo_update(model, optimizer, batch, num_minibatches=2, update_epochs=2, graph=graph, **HYPER)
    moved = PPOBatch(*(t.clone() for t in batch))
    with pytest.raises(RuntimeError, match="not where the captured graph reads it"):
        ppo_update(model, optimizer, moved, num_minibatches=2, update_epochs=1, graph=graph, **HYPER)


@CUDA
def test_ppo_with_cuda_graph_update_trains_as_the_eager_update_does(tmp_path):
    """The same seed with and without the graphed update: the same episodes and, after the run's updates
    (learning rate annealed), the same weights."""
    from rl_app.checkpoint import load_checkpoint

    finals = {}
    for graph in ("true", "false"):
        cfg = compose_config(["logger=none", "progress_bar=false", "device=cuda", f"algo.cuda_graph_update={graph}",
                              "env.num_envs=4", "algo.num_steps=32", "total_timesteps=512", "seed=5"])
        summary = run(cfg, run_dir=tmp_path / graph)
        assert summary["global_step"] == 512 and summary["finished"] is True and summary["episodes"] >= 1
        assert summary["cuda_graph_update"] is (graph == "true")
        finals[graph] = (summary["episodes"], summary["episodic_return_mean"],
                         load_checkpoint(tmp_path / graph / "checkpoints" / "last.pt")["model"])
    assert finals["true"][:2] == finals["false"][:2]
    for key, value in finals["true"][2].items():
        torch.testing.assert_close(value, finals["false"][2][key], rtol=1e-4, atol=1e-5)
