"""Hand-checkable regression cases taken from real, public bug reports about credit assignment
(GAE, V-trace, lambda-returns, discounted returns, Retrace, eligibility traces, episodic prefix sums).

Each test names its source (an issue / PR thread) and the one-line bug, builds a tiny input in this
project's conventions (time-major ``[T, *B]``, ``terminated`` vs ``truncated``, ``bootstrap_value`` vs
``next_values``, EnvPool next-step autoreset layout; see ``kernels/api.py``), and checks both backends
("torch", and "triton": under TRITON_INTERPRET=1 on a CPU, compiled on a GPU; ``tests.shared_cases.BACKENDS``)
against values written out by hand (explicit arithmetic) or, for the layout cases, against a tiny float64 loop
written here from the api.py docstrings. None of the expected values comes from ``kernels.reference``.
"""
import math
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first triton import

import sys  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.shared_cases import BACKENDS, kernels_on  # noqa: E402

F64 = torch.float64
TOL = 1e-6


def col(*xs):
    """One environment: a [T, 1] float64 tensor."""
    return torch.tensor([[float(x)] for x in xs], dtype=F64)


def flags(*xs):
    """One environment: a [T, 1] bool flag tensor."""
    return torch.tensor([[bool(x)] for x in xs])


def t64(rows):
    return torch.tensor(rows, dtype=F64)


def check(actual, expected):
    expected = torch.as_tensor(expected, dtype=F64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == F64
    err = (actual - expected).abs().max().item()
    assert err <= TOL, f"max |err| {err}\nactual   {actual.flatten().tolist()}\nexpected {expected.flatten().tolist()}"


# ----------------------------------------------------------------------------------------------------------------
# GAE
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_gae_lambda0_terminal_reward_reaches_earlier_states_and_truncation_bootstraps(backend):
    """https://github.com/ray-project/ray/pull/59958 (and ray-project/ray#57683)
    Bug: with lambda=0 a terminated flag put on the wrong step dropped the terminal reward from the earlier
    states' value targets, and truncated episodes were treated as terminated (no bootstrap from V(s_T))."""
    g = 0.9
    v = [0.5, 0.8, 0.9]
    rewards = t64([[0, 0], [0, 0], [1, 1]])
    values = t64([[v[0], v[0]], [v[1], v[1]], [v[2], v[2]]])
    terminated = torch.tensor([[0, 0], [0, 0], [1, 0]], dtype=torch.uint8)  # env 0 terminates at t=2
    truncated = torch.tensor([[0, 0], [0, 0], [0, 1]], dtype=torch.uint8)   # env 1 is truncated at t=2
    boot = t64([5.0, 5.0])
    adv, ret = kernels_on(backend).compute_gae(rewards, values, terminated, truncated, gamma=g, lambda_=0.0,
                                   bootstrap_value=boot, backend=backend)
    a_env0 = [0 + g * v[1] - v[0], 0 + g * v[2] - v[1], 1 - v[2]]
    a_env1 = [0 + g * v[1] - v[0], 0 + g * v[2] - v[1], 1 + g * 5.0 - v[2]]
    check(adv, [[a_env0[t], a_env1[t]] for t in range(3)])
    check(ret, [[a_env0[t] + v[t], a_env1[t] + v[t]] for t in range(3)])
    # the value targets of the earlier states see the terminal reward through V(s_{t+1})
    check(ret[:2, 0], [g * v[1], g * v[2]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_gae_done_flag_belongs_to_its_own_transition(backend):
    """https://github.com/DLR-RM/stable-baselines3/issues/105 (also vwxyzjn/cleanrl#393)
    Bug: the rollout stored the done of the *next* step (off-by-one), so the step before a termination lost its
    bootstrap and the terminal step bootstrapped into the next episode."""
    g, lam = 0.5, 0.5
    r, v, boot = [1, 2, 3], [4, 5, 6], 8.0
    adv, ret = kernels_on(backend).compute_gae(col(*r), col(*v), flags(0, 1, 0), gamma=g, lambda_=lam,
                                   bootstrap_value=torch.tensor([boot], dtype=F64), backend=backend)
    a2 = r[2] + g * boot - v[2]                      # = 1
    a1 = r[1] - v[1]                                 # = -3: terminated, V(s_2) not used, trace cut
    a0 = (r[0] + g * v[1] - v[0]) + g * lam * a1     # step 0 still bootstraps from V(s_1): = -1.25
    check(adv, col(a0, a1, a2))
    check(ret, col(a0 + v[0], a1 + v[1], a2 + v[2]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_gae_envpool_next_step_autoreset_layout_truncation(backend):
    """https://github.com/vwxyzjn/cleanrl/issues/475 (also Denys88/rl_games#362)
    Bug: with EnvPool's next-step autoreset the row after a done holds the finished episode's final
    observation; GAE must bootstrap the truncated step from that row's value and must not carry credit from
    the next episode back across the done."""
    g, lam = 0.5, 1.0
    # rows 0-1: episode A (truncated at row 1); row 2: A's final obs (EnvPool reset step, reward 0, no flags);
    # rows 3-4: episode B; window bootstrap 30
    r = [1, 1, 0, 1, 1]
    v = [1, 2, 3, 10, 20]
    boot = 30.0
    adv, ret = kernels_on(backend).compute_gae(col(*r), col(*v), flags(0, 0, 0, 0, 0), flags(0, 1, 0, 0, 0),
                                   gamma=g, lambda_=lam, bootstrap_value=torch.tensor([boot], dtype=F64),
                                   backend=backend)
    a4 = r[4] + g * boot - v[4]                      # -4
    a3 = r[3] + g * v[4] - v[3] + g * lam * a4       # -1
    a2 = r[2] + g * v[3] - v[2] + g * lam * a3       # 1.5 (the reset row; masked out of the loss by the trainer)
    a1 = r[1] + g * v[2] - v[1]                      # 0.5: bootstraps from A's final obs, trace cut
    a0 = r[0] + g * v[1] - v[0] + g * lam * a1       # 1.25
    check(adv, col(a0, a1, a2, a3, a4))
    check(ret, col(*(a + b for a, b in zip([a0, a1, a2, a3, a4], v))))


@pytest.mark.parametrize("backend", BACKENDS)
def test_gae_terminated_step_ignores_next_values(backend):
    """https://github.com/thu-ml/tianshou/issues/869
    Bug: delta used gamma * v_s_ even at terminal steps ("simplified formula"), so a terminal transition whose
    next-state value is nonzero (e.g. gymnasium's final observation) was bootstrapped."""
    g, lam = 0.9, 0.95
    r, v = [1, 1, 1], [2, 2, 2]
    nv = [2, 50, 2]  # the terminal step's final observation has a large value that must be ignored
    adv, ret = kernels_on(backend).compute_gae(col(*r), col(*v), flags(0, 1, 0), gamma=g, lambda_=lam,
                                   next_values=col(*nv), backend=backend)
    a2 = r[2] + g * nv[2] - v[2]                     # 0.8
    a1 = r[1] - v[1]                                 # -1
    a0 = r[0] + g * nv[0] - v[0] + g * lam * a1      # 0.8 - 0.855 = -0.055
    check(adv, col(a0, a1, a2))
    check(ret, col(a0 + 2, a1 + 2, a2 + 2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_terminated_and_truncated_on_the_same_step_is_terminal(backend):
    """https://github.com/DexForce/EmbodiChain/pull/612 (review: "Terminal transitions are bootstrapped")
    Bug: when an episode terminates on the same step as its time limit, `truncated` stayed true and the step
    was bootstrapped (r + gamma*V) despite the true termination."""
    g = 0.5
    r, v, nv = [1, 1], [0, 0], [0, 100]
    term, trunc = flags(0, 1), flags(0, 1)
    adv, ret = kernels_on(backend).compute_gae(col(*r), col(*v), term, trunc, gamma=g, lambda_=1.0,
                                   next_values=col(*nv), backend=backend)
    a1 = r[1] - v[1]                                 # 1, not 1 + 0.5*100
    a0 = r[0] + g * nv[0] - v[0] + g * 1.0 * a1      # 1.5 (t=0 is not done, so it sees A[1])
    check(adv, col(a0, a1))
    check(ret, col(a0, a1))
    G = kernels_on(backend).compute_discounted_returns(col(*r), term, trunc, gamma=g, next_values=col(*nv), backend=backend)
    check(G, col(r[0] + g * r[1], r[1]))           # 1.5, 1
    L = kernels_on(backend).compute_lambda_returns(col(*r), col(*v), term, trunc, gamma=g, lambda_=0.5,
                                       next_values=col(*nv), backend=backend)
    check(L, col(r[0] + g * ((1 - 0.5) * nv[0] + 0.5 * r[1]), r[1]))  # 1.25, 1


def _gae_loop(r, v, term, trunc, boot, g, lam):
    """Tiny float64 GAE loop for one sequence, written from the api.py docstring (bootstrap_value form)."""
    T = len(r)
    adv = [0.0] * T
    nxt = 0.0
    for t in reversed(range(T)):
        vplus = v[t + 1] if t < T - 1 else boot
        done = term[t] or trunc[t]
        delta = r[t] + g * (0.0 if term[t] else 1.0) * vplus - v[t]
        nxt = delta + g * lam * (0.0 if done else 1.0) * nxt
        adv[t] = nxt
    return adv


@pytest.mark.parametrize("backend", BACKENDS)
def test_gae_non_contiguous_inputs_with_different_strides(backend):
    """https://github.com/Denys88/rl_games/pull/358 (also PufferAI/PufferLib#475)
    Bug: the Triton GAE kernel assumed a packed layout and loaded the values through the rewards' strides, so
    non-contiguous views silently gave wrong advantages."""
    g, lam = 0.5, 0.5
    # env-major storage: values is a [T, B] view with time stride 1, rewards is a contiguous [T, B]
    values = t64([[1, 2, 3], [4, 5, 6]]).t()
    assert not values.is_contiguous()
    rewards = t64([[1, 0], [0, 1], [1, 1]])
    terminated = torch.zeros(3, 2, dtype=torch.bool)
    boot = t64([7, 8])
    adv, ret = kernels_on(backend).compute_gae(rewards, values, terminated, gamma=g, lambda_=lam, bootstrap_value=boot,
                                   backend=backend)
    # env 0: r=[1,0,1], v=[1,2,3], boot 7; env 1: r=[0,1,1], v=[4,5,6], boot 8
    e0_2 = 1 + g * 7 - 3                            # 1.5
    e0_1 = 0 + g * 3 - 2 + g * lam * e0_2           # -0.125
    e0_0 = 1 + g * 2 - 1 + g * lam * e0_1           # 0.96875
    e1_2 = 1 + g * 8 - 6                            # -1
    e1_1 = 1 + g * 6 - 5 + g * lam * e1_2           # -1.25
    e1_0 = 0 + g * 5 - 4 + g * lam * e1_1           # -1.8125
    exp = t64([[e0_0, e1_0], [e0_1, e1_1], [e0_2, e1_2]])
    check(adv, exp)
    check(ret, exp + values)

    # trailing batch dims [T, 2, 2] stored in the other order (not flattenable) and a time-strided rewards view
    T = 4
    base = torch.arange(1, 1 + T * 4, dtype=F64).reshape(T, 2, 2) / 4.0
    v3 = base.transpose(1, 2).contiguous().transpose(1, 2)          # permuted storage
    r_big = torch.zeros(2 * T, 2, 2, dtype=F64)
    r_big[::2] = torch.tensor([1.0, -1.0, 0.5, 2.0]).reshape(1, 2, 2).expand(T, 2, 2) * torch.arange(
        1, T + 1, dtype=F64).reshape(T, 1, 1)
    r3 = r_big[::2]                                                   # time stride 8
    term3 = torch.zeros(T, 2, 2, dtype=torch.bool)
    term3[1, 0, 1] = True
    trunc3 = torch.zeros(T, 2, 2, dtype=torch.bool)
    trunc3[2, 1, 0] = True
    boot3 = t64([[3.0, -3.0], [1.5, 0.25]])
    adv3, ret3 = kernels_on(backend).compute_gae(r3, v3, term3, trunc3, gamma=0.9, lambda_=0.8, bootstrap_value=boot3,
                                     backend=backend)
    for i in range(2):
        for j in range(2):
            exp_ij = _gae_loop(r3[:, i, j].tolist(), v3[:, i, j].tolist(), term3[:, i, j].tolist(),
                               trunc3[:, i, j].tolist(), boot3[i, j].item(), 0.9, 0.8)
            check(adv3[:, i, j], exp_ij)
            check(ret3[:, i, j], [a + b for a, b in zip(exp_ij, v3[:, i, j].tolist())])


# ----------------------------------------------------------------------------------------------------------------
# V-trace
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_vtrace_pg_advantage_at_truncation_does_not_use_next_episode(backend):
    """https://github.com/pytorch/rl/issues/4209 (fix: pytorch/rl#4210)
    Bug: the policy-gradient advantage at an in-batch truncated step used vs of the first step of the *next*
    trajectory (99 instead of 0 in the report's repro) instead of the truncated step's next-state value."""
    # trajectory A = [t0, t1] truncated at t1 with V_A = 1; trajectory B = [t2, t3] with V_B = 100
    r = [0, 0, 0, 0]
    v = [1, 1, 100, 100]
    nv = [1, 1, 100, 100]
    zeros = col(0, 0, 0, 0)
    vs, pg = kernels_on(backend).compute_vtrace(col(*r), col(*v), flags(0, 0, 0, 0), flags(0, 1, 0, 0),
                                    behaviour_log_probs=zeros, target_log_probs=zeros, gamma=1.0,
                                    next_values=col(*nv), backend=backend)
    check(vs, col(1, 1, 100, 100))
    check(pg, col(0, 0, 0, 0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_vtrace_off_policy_clipping_rho_c_pg_rho_and_lambda(backend):
    """https://github.com/PufferAI/PufferLib/pull/598 (also google-deepmind/scalable_agent#15)
    Bug: V-trace importance weighting was mis-parenthesised in the CPU/scalar kernels; here each of rho, c
    (times lambda) and pg_rho is clipped at its own threshold and the last step's pg advantage uses V(s_T)."""
    g, lam = 0.9, 0.8
    mu = [0.25, 0.5, 0.2]          # behaviour probabilities of the taken actions
    pi = [0.5, 0.25, 0.8]          # target probabilities: ratios 2, 0.5, 4
    r, v, boot = [1, 0, 2], [0.5, 1.0, 1.5], 2.0
    rho = [min(2.0, 1.5), min(0.5, 1.5), min(4.0, 1.5)]              # rho_clip = 1.5
    c = [lam * min(2.0, 1.0), lam * min(0.5, 1.0), lam * min(4.0, 1.0)]  # c_clip = 1.0
    pgr = [min(2.0, 3.0), min(0.5, 3.0), min(4.0, 3.0)]              # pg_rho_clip = 3.0
    vs_, pg_ = kernels_on(backend).compute_vtrace(
        col(*r), col(*v), flags(0, 0, 0),
        behaviour_log_probs=col(*[math.log(p) for p in mu]), target_log_probs=col(*[math.log(p) for p in pi]),
        gamma=g, lambda_=lam, rho_clip=1.5, c_clip=1.0, pg_rho_clip=3.0,
        bootstrap_value=torch.tensor([boot], dtype=F64), backend=backend)
    d0 = r[0] + g * v[1] - v[0]      # 1.4
    d1 = r[1] + g * v[2] - v[1]      # 0.35
    d2 = r[2] + g * boot - v[2]      # 2.3
    vs2 = v[2] + rho[2] * d2                                   # 4.95
    vs1 = v[1] + rho[1] * d1 + g * c[1] * (vs2 - v[2])         # 2.417
    vs0 = v[0] + rho[0] * d0 + g * c[0] * (vs1 - v[1])         # 3.62024
    pg0 = pgr[0] * (r[0] + g * vs1 - v[0])                     # 5.3506
    pg1 = pgr[1] * (r[1] + g * vs2 - v[1])                     # 1.7275
    pg2 = pgr[2] * (r[2] + g * boot - v[2])                    # 6.9
    check(vs_, col(vs0, vs1, vs2))
    check(pg_, col(pg0, pg1, pg2))
    assert abs(vs0 - 3.62024) < 1e-9 and abs(pg0 - 5.3506) < 1e-9  # the arithmetic above, spelled out


@pytest.mark.parametrize("backend", BACKENDS)
def test_vtrace_off_policy_terminated_mid_window_no_leak(backend):
    """https://github.com/micdoh/XLRON/pull/34 ("GAE/VTrace leakage across auto-reset boundaries")
    Bug: V-trace targets and advantages leaked across an episode end inside the rollout."""
    g = 0.9
    mu = [0.25, 0.5, 0.5]
    pi = [0.5, 0.25, 0.5]          # ratios 2, 0.5, 1
    r, v, boot = [1, 2, 3], [1, 1, 1], 10.0
    vs_, pg_ = kernels_on(backend).compute_vtrace(
        col(*r), col(*v), flags(0, 1, 0),
        behaviour_log_probs=col(*[math.log(p) for p in mu]), target_log_probs=col(*[math.log(p) for p in pi]),
        gamma=g, bootstrap_value=torch.tensor([boot], dtype=F64), backend=backend)
    rho = [1.0, 0.5, 1.0]          # min(ratio, 1)
    c = [1.0, 0.5, 1.0]
    vs2 = v[2] + rho[2] * (r[2] + g * boot - v[2])             # 12
    vs1 = v[1] + rho[1] * (r[1] - v[1])                        # 1.5: terminal, no trace from the next episode
    vs0 = v[0] + rho[0] * (r[0] + g * v[1] - v[0]) + g * c[0] * (vs1 - v[1])   # 2.35
    pg0 = rho[0] * (r[0] + g * vs1 - v[0])                     # 1.35
    pg1 = rho[1] * (r[1] - v[1])                               # 0.5
    pg2 = rho[2] * (r[2] + g * boot - v[2])                    # 11
    check(vs_, col(vs0, vs1, vs2))
    check(pg_, col(pg0, pg1, pg2))


# ----------------------------------------------------------------------------------------------------------------
# lambda-returns
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_lambda_returns_last_step_bootstraps_per_sequence(backend):
    """https://github.com/oxwhirl/pymarl/issues/109
    Bug: the last step's TD(lambda) target was masked with the *sum* of the sequence's terminated flags, so a
    sequence that ended an episode earlier lost its window bootstrap at the last step."""
    g, lam = 0.5, 0.5
    rewards = t64([[1, 1], [1, 1], [1, 1]])
    values = t64([[2, 2], [2, 2], [2, 2]])
    terminated = torch.tensor([[1, 0], [0, 0], [0, 0]], dtype=torch.bool)  # env 0 ended an episode at t=0
    out = kernels_on(backend).compute_lambda_returns(rewards, values, terminated, gamma=g, lambda_=lam,
                                         bootstrap_value=t64([10, 10]), backend=backend)
    G2 = 1 + g * 10                                   # 6 (l[T-1] = 0: pure bootstrap)
    G1 = 1 + g * ((1 - lam) * 2 + lam * G2)           # 3
    G0_env1 = 1 + g * ((1 - lam) * 2 + lam * G1)      # 2.25
    G0_env0 = 1                                       # terminated
    check(out, [[G0_env0, G0_env1], [G1, G1], [G2, G2]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_lambda_returns_terminal_step_target_is_the_reward(backend):
    """https://github.com/bold-lab-ai/JaxMARL/issues/93
    Bug: the TD(lambda) target at a done step was set to the next step's target Q instead of the reward."""
    g, lam = 0.9, 0.5
    r, nv = [1, 2, 3], [4, 5, 6]
    out = kernels_on(backend).compute_lambda_returns(col(*r), col(0, 0, 0), flags(0, 1, 0), gamma=g, lambda_=lam,
                                         next_values=col(*nv), backend=backend)
    G2 = r[2] + g * nv[2]                             # 8.4
    G1 = r[1]                                         # 2, not 5
    G0 = r[0] + g * ((1 - lam) * nv[0] + lam * G1)    # 3.7
    check(out, col(G0, G1, G2))


# ----------------------------------------------------------------------------------------------------------------
# discounted returns
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_discounted_returns_reset_at_terminal_and_bootstrap_unfinished_tail(backend):
    """https://github.com/nikhilbarhate99/PPO-PyTorch/issues/8 (and #38 in the same repository)
    Bug: the reward-to-go was carried across episode boundaries, and an unfinished last episode started from 0
    instead of the critic's value of the final state."""
    g = 0.5
    rewards = t64([[1, 1], [2, 1], [3, 1], [4, 1]])
    terminated = torch.tensor([[0, 0], [1, 0], [0, 0], [0, 1]], dtype=torch.bool)
    out = kernels_on(backend).compute_discounted_returns(rewards, terminated, gamma=g, bootstrap_value=t64([8, 8]),
                                             backend=backend)
    e0_3 = 4 + g * 8          # 8
    e0_2 = 3 + g * e0_3       # 7
    e0_1 = 2                  # terminal: reset
    e0_0 = 1 + g * e0_1       # 2
    e1_3 = 1                  # terminal at the window's last step: bootstrap ignored
    e1_2 = 1 + g * e1_3       # 1.5
    e1_1 = 1 + g * e1_2       # 1.75
    e1_0 = 1 + g * e1_1       # 1.875
    check(out, [[e0_0, e1_0], [e0_1, e1_1], [e0_2, e1_2], [e0_3, e1_3]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_discounted_returns_truncation_bootstraps_from_next_values(backend):
    """https://github.com/jsboige/CoursIA/pull/7821
    Bug: the A2C Monte-Carlo returns zeroed the bootstrap at a time-limit truncation (G = 1 instead of
    1 + gamma*V(s_final))."""
    g = 0.9
    r = [1, 1, 1, 1]
    nv = [99, 10, 99, 4]     # read only at the truncation (t=1) and the window's last step (t=3)
    out = kernels_on(backend).compute_discounted_returns(col(*r), flags(0, 0, 0, 0), flags(0, 1, 0, 0), gamma=g,
                                             next_values=col(*nv), backend=backend)
    G3 = 1 + g * 4            # 4.6
    G2 = 1 + g * G3           # 5.14
    G1 = 1 + g * 10           # 10
    G0 = 1 + g * G1           # 10
    check(out, col(G0, G1, G2, G3))


# ----------------------------------------------------------------------------------------------------------------
# Retrace
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_retrace_bootstraps_from_next_state_value(backend):
    """https://github.com/seungeunrho/minimalRL/pull/16
    Bug: ACER's Retrace target for state i used v[i] instead of v[i+1] (Q_ret[k-1] must be r[k-1] + gamma*v[k])."""
    g = 0.5
    r, q, v, boot = [1, 2], [3, 4], [5, 6], 7.0
    lp = col(math.log(0.5), math.log(0.5))   # on-policy: c = 1
    out = kernels_on(backend).compute_retrace(col(*r), col(*q), col(*v), flags(0, 0), behaviour_log_probs=lp,
                                  target_log_probs=lp, gamma=g, bootstrap_value=torch.tensor([boot], dtype=F64),
                                  backend=backend)
    Q1 = r[1] + g * boot                              # 5.5
    Q0 = r[0] + g * (v[1] + 1.0 * (Q1 - q[1]))        # 4.75 (the bug gives 1 + 0.5*(5 + 1.5) = 4.25)
    check(out, col(Q0, Q1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_retrace_trace_coefficient_is_taken_at_the_next_step(backend):
    """https://github.com/google-deepmind/trfl/issues/24
    Bug report: Retrace's expected Q and trace coefficient were read at the wrong time index (x_t instead of
    x_{t+1}); the correction to Q_ret[t] must use c[t+1] and E_pi Q(x_{t+1})."""
    g, lam = 0.5, 0.9
    mu = [0.8, 0.8, 0.5]
    pi = [0.2, 0.4, 0.5]                              # ratios 0.25, 0.5, 1
    c = [lam * min(1.0, 0.25), lam * min(1.0, 0.5), lam * min(1.0, 1.0)]
    r, q, v, boot = [1, 1, 1], [2, 2, 2], [3, 3, 3], 4.0
    out = kernels_on(backend).compute_retrace(col(*r), col(*q), col(*v), flags(0, 0, 0),
                                  behaviour_log_probs=col(*[math.log(p) for p in mu]),
                                  target_log_probs=col(*[math.log(p) for p in pi]), gamma=g, lambda_=lam,
                                  bootstrap_value=torch.tensor([boot], dtype=F64), backend=backend)
    Q2 = r[2] + g * boot                                   # 3
    Q1 = r[1] + g * (v[2] + c[2] * (Q2 - q[2]))            # 2.95
    Q0 = r[0] + g * (v[1] + c[1] * (Q1 - q[1]))            # 2.71375
    check(out, col(Q0, Q1, Q2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_retrace_truncation_bootstraps_and_cuts_the_trace(backend):
    """https://github.com/ray-project/ray/issues/4693
    Bug: with truncated episodes the last non-terminal step of a sequence was bootstrapped from padding
    (-9999999) instead of the true next state's value."""
    g = 0.5
    r, q, nv = [1, 1, 1], [2, 2, 2], [3, 8, 3]
    lp = col(0.0, 0.0, 0.0)
    out = kernels_on(backend).compute_retrace(col(*r), col(*q), None, flags(0, 0, 0), flags(0, 1, 0),
                                  behaviour_log_probs=lp, target_log_probs=lp, gamma=g,
                                  next_values=col(*nv), backend=backend)
    Q2 = r[2] + g * nv[2]                                  # 2.5
    Q1 = r[1] + g * nv[1]                                  # 5: truncated -> bootstrap kept, no trace from t=2
    Q0 = r[0] + g * (nv[0] + 1.0 * (Q1 - q[1]))            # 4
    check(out, col(Q0, Q1, Q2))


# ----------------------------------------------------------------------------------------------------------------
# eligibility traces
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_eligibility_trace_decays_with_previous_steps_done(backend):
    """https://github.com/SlopDotCash/asi/pull/2350 (also SlopDotCash/asi#2840)
    Bug: the trace was decayed by the *current* transition's discount, so at a terminal step the accumulated
    in-episode trace was zeroed before the terminal TD error was credited (lambda forced to 0 there)."""
    g, lam = 0.5, 1.0
    x = t64([[1, 1], [1, 1], [1, 1], [1, 1]])
    terminated = torch.tensor([[0, 0], [1, 0], [0, 0], [0, 0]], dtype=torch.bool)
    truncated = torch.tensor([[0, 0], [0, 1], [0, 0], [0, 0]], dtype=torch.bool)
    out = kernels_on(backend).compute_eligibility_traces(x, terminated, truncated, gamma=g, lambda_=lam, backend=backend)
    e0 = 1
    e1 = 1 + g * lam * e0     # 1.5: the done step still carries the trace
    e2 = 1                    # reset on the step after the done
    e3 = 1 + g * lam * e2     # 1.5
    check(out, [[e0, e0], [e1, e1], [e2, e2], [e3, e3]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_eligibility_trace_initial_carry_and_reset(backend):
    """https://github.com/SlopDotCash/asi/pull/2959
    Bug: the trace carried in state between updates decayed by the wrong (current) discount; the carry from
    the previous window must decay by gamma*lambda and a done must reset it only for the following step."""
    g, lam = 0.5, 0.5
    x = col(1, 2, 3)
    out = kernels_on(backend).compute_eligibility_traces(x, flags(1, 0, 0), gamma=g, lambda_=lam,
                                             initial=torch.tensor([4.0], dtype=F64), backend=backend)
    e0 = 1 + g * lam * 4      # 2: carry from the previous window (done[-1] = 0)
    e1 = 2                    # reset after the done at t=0
    e2 = 3 + g * lam * e1     # 3.5
    check(out, col(e0, e1, e2))


# ----------------------------------------------------------------------------------------------------------------
# episodic prefix sums
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_prefix_sum_includes_done_step_and_resets_on_truncation(backend):
    """https://github.com/sail-sg/envpool/issues/299 (also weipu-zhang/STORM#16)
    Bug: the episode-return counter was not reset on a time-limit truncation (only on termination), and the
    recorded return omitted the reward of the step that ended the episode (2 instead of 12)."""
    x = t64([[1, 1], [1, 1], [10, 10], [2, 2], [3, 3]])
    terminated = torch.tensor([[0, 0], [0, 0], [0, 1], [0, 0], [0, 0]], dtype=torch.bool)
    truncated = torch.tensor([[0, 0], [0, 0], [1, 0], [0, 0], [0, 0]], dtype=torch.bool)
    out = kernels_on(backend).compute_episodic_prefix_sum(x, terminated, truncated, initial=t64([5, 0]), backend=backend)
    # env 0: running return 5 carried in from the previous window, truncated at t=2
    e0 = [5 + 1, 5 + 1 + 1, 5 + 1 + 1 + 10, 2, 2 + 3]
    # env 1: no carry, terminated at t=2
    e1 = [1, 1 + 1, 1 + 1 + 10, 2, 2 + 3]
    check(out, [[a, b] for a, b in zip(e0, e1)])
