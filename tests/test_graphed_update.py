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


def _setup(device="cpu", rows=64, seed=0, model="mlp"):
    """A model (``mlp``: CartPole's; ``mlp_norm``: with observation normalisation; ``cnn``: the Nature CNN on small
    frames), its Adam and a random PPO batch (a quarter of the rows invalid) on ``device``."""
    torch.manual_seed(seed)
    if model == "cnn":
        net = build_model("atari", (4, 36, 40), 6, (), False).to(device)
        obs = torch.randint(0, 256, (rows, 4, 36, 40), dtype=torch.uint8)
        actions = torch.randint(0, 6, (rows,))
    else:
        net = build_model("classic_control", (4,), 3, (), model == "mlp_norm").to(device)
        obs = torch.randn(rows, 4) * 3 + 1
        actions = torch.randint(0, 3, (rows,))
    batch = PPOBatch(obs, actions, -torch.rand(rows) - 0.5, torch.randn(rows), torch.randn(rows) * 2,
                     torch.randn(rows), torch.rand(rows) > 0.25)
    optimizer = torch.optim.Adam(net.parameters(), lr=3e-3, eps=1e-5)
    return net, optimizer, PPOBatch(*(t.to(device) for t in batch))


class RecordedEpochs(GraphedEpochs):
    """GraphedEpochs' bookkeeping on the CPU, with a graph's semantics: the capture stores the epoch's closure
    without running it and every replay runs that stored closure, which sees the tensors of the capturing call
    only, as a graph would. ``ppo_update`` through it must equal eager epochs."""

    def __init__(self):
        self.device, self.graph, self.calls = torch.device("cpu"), None, 0
        self.order = self.stats = self.epoch_kl = self._captured_with = None

    def _warm_up(self, epoch):
        epoch()

    def _capture(self, epoch):
        return epoch

    def _replay(self):
        self.graph()


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
    lr = group["lr"]
    set_learning_rate(optimizer, 2e-3)
    assert group["lr"] is lr and float(lr) == pytest.approx(2e-3)  # in place: a captured graph reads it there
    assert optimizer_tensors(optimizer)[0] is group["lr"]
    prepare_optimizer(optimizer, on_device=False)
    set_learning_rate(twin_optimizer, 2e-3)
    assert group["lr"] == pytest.approx(2e-3) and isinstance(group["lr"], float) and group["capturable"] is False
    for m, o in ((model, optimizer), (twin_model, twin_optimizer)):
        ppo_update(m, o, batch, num_minibatches=2, update_epochs=1, generator=torch.Generator().manual_seed(2),
                   **HYPER)
    for p, q in zip(model.parameters(), twin_model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-7)  # lr went through float32 and back


@pytest.mark.parametrize("model", ["mlp", "mlp_norm"])
def test_the_graph_branch_of_ppo_update_takes_the_eager_steps(model):
    """Through RecordedEpochs (a graph's semantics on the CPU): four updates, one of them stopped early by
    target_kl, with the learning rate set in place and the observation statistics updated in place between
    them, end at the eager path's weights and statistics exactly."""
    results = {}
    for recorded in (False, True):
        net, optimizer, batch = _setup(model=model)
        prepare_optimizer(optimizer, on_device=recorded)  # the graph's form (a tensor lr; capturable unused here)
        optimizer.param_groups[0]["capturable"] = False  # Adam refuses capturable on a CPU; the numbers are equal
        generator = torch.Generator().manual_seed(3)
        graph = RecordedEpochs() if recorded else None
        outs = []
        for lr, target_kl in ((3e-3, None), (2e-3, 1e-9), (1e-3, None), (5e-4, None)):
            set_learning_rate(optimizer, lr)
            outs.append(ppo_update(net, optimizer, batch, num_minibatches=4, update_epochs=3, generator=generator,
                                   target_kl=target_kl, graph=graph, **HYPER))
            net.update_obs_norm(batch.obs[: 16 * len(outs)])
        results[recorded] = ([p.detach().clone() for p in net.parameters()] + [b.clone() for b in net.buffers()],
                             outs)
        if recorded:
            assert graph.calls == 3 + 1 + 3 + 3 and graph.graph is not None  # epochs run; captured at the 2nd
    assert [float(o["update_epochs_done"]) for o in results[True][1]] == [3.0, 1.0, 3.0, 3.0]
    for p, q in zip(*(results[k][0] for k in (True, False))):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-7)  # the learning rate went through float32
    for a, b in zip(*(results[k][1] for k in (True, False))):
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=1e-6, atol=1e-7)


def test_a_graph_refuses_other_settings_or_tensors_than_its_capture():
    net, optimizer, batch = _setup()
    prepare_optimizer(optimizer, on_device=True)
    optimizer.param_groups[0]["capturable"] = False
    graph = RecordedEpochs()
    ppo_update(net, optimizer, batch, num_minibatches=2, update_epochs=2, graph=graph, **HYPER)
    with pytest.raises(RuntimeError, match="a setting of the PPO update is not what the captured graph"):
        ppo_update(net, optimizer, batch, num_minibatches=2, update_epochs=1, graph=graph,
                   **{**HYPER, "clip_coef": 0.3})
    optimizer.param_groups[0]["eps"] = 1e-8
    with pytest.raises(RuntimeError, match="a setting"):
        ppo_update(net, optimizer, batch, num_minibatches=2, update_epochs=1, graph=graph, **HYPER)
    optimizer.param_groups[0]["eps"] = 1e-5
    with pytest.raises(RuntimeError, match="a tensor of the PPO update"):
        ppo_update(net, optimizer, PPOBatch(*(t.clone() for t in batch)), num_minibatches=2, update_epochs=1,
                   graph=graph, **HYPER)
    ppo_update(net, optimizer, batch, num_minibatches=2, update_epochs=1, graph=graph, **HYPER)  # as captured


def test_a_device_form_checkpoint_resumes_into_host_form():
    """A graph run's optimizer (tensor lr, step counts on its device) saved, then loaded by a run that keeps
    host numbers: this run's learning rate as a number, step counts on the host with their values."""
    from rl_app.checkpoint import TrainState

    net, optimizer, batch = _setup()
    ppo_update(net, optimizer, batch, num_minibatches=2, update_epochs=1, generator=torch.Generator().manual_seed(1),
               **HYPER)
    prepare_optimizer(optimizer, on_device=True)
    payload = {"model": net.state_dict(), "optimizer": optimizer.state_dict(), "global_step": 1, "iteration": 1,
               "wall_time_s": 0.0}
    other, other_optimizer, _ = _setup(seed=1)
    other_optimizer.param_groups[0]["lr"] = 1e-4
    TrainState(other, other_optimizer).load_state_dict(payload, generators=False)
    prepare_optimizer(other_optimizer, on_device=False)
    group = other_optimizer.param_groups[0]
    assert group["lr"] == 1e-4 and isinstance(group["lr"], float) and group["capturable"] is False
    for p in other.parameters():
        step = other_optimizer.state[p]["step"]
        assert step.device.type == "cpu" and float(step) == 2.0


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
@pytest.mark.parametrize("model, update_epochs, target_kl", [
    ("mlp", 2, None), ("cnn", 2, None), ("mlp_norm", 2, None), ("mlp", 1, None), ("mlp", 3, 0.01)])
def test_graphed_epochs_take_the_eager_steps(model, update_epochs, target_kl, monkeypatch):
    """Four updates (learning rate annealed and observation statistics updated in place in between) eager and from
    the graph, from the same weights, optimizer form and generator seed: the same weights, buffers, statistics,
    epochs done and generator state at the end. With one epoch per update the capture comes in the second."""
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    device = torch.device("cuda")
    results = {}
    for graphed in (False, True):
        net, optimizer, batch = _setup(device, rows=96, model=model)
        initial = [p.detach().clone() for p in net.parameters()]
        prepare_optimizer(optimizer, on_device=True)
        generator = torch.Generator(device=device).manual_seed(4)
        graph = GraphedEpochs(device) if graphed else None
        stats = []
        for lr in (3e-3, 2e-3, 1e-3, 5e-4):
            set_learning_rate(optimizer, lr)
            out = ppo_update(net, optimizer, batch, num_minibatches=3, update_epochs=update_epochs,
                             generator=generator, target_kl=target_kl, graph=graph, **HYPER)
            stats.append(torch.stack([v.cpu() for v in out.values()]))
            net.update_obs_norm(batch.obs[: 24 * len(stats)].float())
        results[graphed] = ([p.detach().clone() for p in net.parameters()] + [b.clone() for b in net.buffers()],
                            stats, generator.get_state())
        assert all(not torch.equal(p, q) for p, q in zip(results[graphed][0], initial))  # every tensor moved
        if graphed:
            assert graph.graph is not None
    for p, q in zip(results[True][0], results[False][0]):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6)
    for a, b in zip(results[True][1], results[False][1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    if target_kl is not None:  # the early stop happened at least once, the same way on both paths
        assert min(float(s[-1]) for s in results[True][1]) < update_epochs
    assert torch.equal(results[True][2], results[False][2])


@CUDA
def test_graphed_epochs_refuse_a_batch_in_new_storage():
    device = torch.device("cuda")
    net, optimizer, batch = _setup(device)
    prepare_optimizer(optimizer, on_device=True)
    graph = GraphedEpochs(device)
    ppo_update(net, optimizer, batch, num_minibatches=2, update_epochs=2, graph=graph, **HYPER)
    moved = PPOBatch(*(t.clone() for t in batch))
    with pytest.raises(RuntimeError, match="a tensor of the PPO update is not what the captured graph"):
        ppo_update(net, optimizer, moved, num_minibatches=2, update_epochs=1, graph=graph, **HYPER)


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
