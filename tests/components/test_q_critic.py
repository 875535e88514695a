"""A Q critic's advantages use an action-independent baseline (issue #27): at its target it moves the policy as a
V critic does; K = 1 is refused; a num_turns cut warns once."""
import warnings
from types import SimpleNamespace

import pytest
import torch

import comarl
from comarl.core.config_io import ConfigError
from comarl.critics import Critic, CriticSettings
from comarl.critics.inputs import AgentInputs, JointInputs
from comarl.rollout import collect_rollout
from comarl.models.tiny_model import tiny_tokenizer
from toy_tasks import same_word, word
from config_keys import set_keys

ITEMS = [{"n": i} for i in range(8)]


def toy_env(transition=None, max_turns=1):
    return comarl.FunctionEnv(formatters=[lambda it: f"Name a colour ({it['n']}):",
                                          lambda it: f"Pick a colour ({it['n']}):"],
                              reward_fn=same_word, transition_fn=transition, max_turns=max_turns)


def agents(optimizer="adamw", lr=2e-2):
    return [comarl.AgentConfig(model="tiny", max_new_tokens=2, lr=lr, chat_template=False, optimizer=optimizer)
            for _ in range(2)]


def trainer(algorithm, critic=None, k=4, env=None, agent_list=None, **sections):
    cfg = comarl.TrainConfig(algorithm=algorithm, rollout=comarl.RolloutConfig(num_generations=k),
                             run=comarl.RunConfig(batch_size=4, max_steps=1, progress_bar=False, report_to=[], seed=0))
    cfg.critic = critic or CriticSettings(lr=1e-3)
    return comarl.Trainer(agent_list or agents(), env or toy_env(), ITEMS, set_keys(cfg, **sections))


# ---------------------------------------------------------------- fakes
class TableValueModel:
    """A fake value model: the value of a critic input is ``table[its text]`` (0 when absent). ``fit`` copies the
    critic's last targets into the table, so the next ``prepare`` values every input at its target."""

    owns_backbone = True
    head = None

    def __init__(self):
        self.table: dict[tuple, float] = {}

    def encode(self, prompts, responses=None):
        texts = prompts if responses is None else [p + "\x00" + r for p, r in zip(prompts, responses)]
        return [list(t.encode()) for t in texts]

    def values(self, ids):
        return torch.tensor([self.table.get(tuple(x), 0.0) for x in ids])

    def fit(self, targets):
        self.table = {tuple(x): float(t) for x, t in zip(targets.ids, targets.targets)}


def table_critic(kind: str, critic_type: str, n: int, lam: float = 0.95) -> Critic:
    inputs = AgentInputs(critic_type, n) if kind == "independent" else JointInputs(critic_type, joint_words)
    models = [TableValueModel() for _ in range(inputs.columns)]
    return Critic(models, [None] * len(models), inputs, CriticSettings(critic_type=critic_type, gae_lambda=lam),
                  [f"agent{i}" for i in range(n)], gamma=1.0, micro_batch_size=64, max_grad_norm=0.0)


def at_target_advantages(critic: Critic, rollout) -> list[torch.Tensor]:
    """The whitened advantages each agent gets from ``critic`` once its values equal its targets."""
    critic.prepare([rollout])
    for vm, targets in zip(critic.models, critic._targets):
        vm.fit(targets)
    prepared = critic.prepare([rollout])
    for targets in critic._targets:  # a fixed point: the values it read are its new targets
        assert torch.allclose(targets.old, targets.targets)
    return [chunks[0].clone() for chunks in prepared.advantages]


def joint_words(prompts, responses):
    """The central critic's text: the words the agents named (Q), or the prompts (V)."""
    return " ".join(str(word(r)) for r in responses) if responses is not None else " | ".join(prompts)


class ExactQForSequenceClassification(torch.nn.Module):
    """A fake one-label classifier (the class name makes the critic use it as its own head) that is an exact Q
    critic of the toy task: reading ``joint_words``' text "red red" it returns the reward, 1, "red blue" 0. Its
    one parameter, a bias times 0, gives the critic's optimiser something to step without moving Q."""

    def __init__(self, tokenizer):
        super().__init__()
        self.tok = tokenizer
        self.config = SimpleNamespace(num_labels=1)
        self.bias = torch.nn.Parameter(torch.zeros(()))

    def forward(self, input_ids, attention_mask, position_ids=None):
        texts = [self.tok.decode(ids[m.bool()]) for ids, m in zip(input_ids, attention_mask)]
        q = [1.0 if (w := t.split())[0] == w[1] != "None" else 0.0 for t in texts]
        return SimpleNamespace(logits=(torch.tensor(q) + 0.0 * self.bias).unsqueeze(-1))


def weight_delta(t, before):
    return [torch.cat([(p.detach() - b).reshape(-1) for p, b in zip(a.model.parameters(), old)])
            for a, old in zip(t.agents, before)]


def snapshot(t):
    return [[p.detach().clone() for p in a.model.parameters()] for a in t.agents]


# ---------------------------------------------------------------- tests
@pytest.mark.parametrize("joint_mode", ["aligned", "cross"])
def test_critics_at_their_targets_give_q_the_advantages_of_v(joint_mode):
    """One real rollout (2 tiny agents, K = 2, 4 items), four critics held at their targets: independent and
    central, V and Q. Single turn, a V critic's target is the node's mean reward, a Q critic's the reward of its
    input (IAC: the mean over the joint actions holding the sample). Q's leave-one-out advantages are V's times
    K/(K-1) = 2, so whitened they are V's (and so is the gradient); subtracting Q(h, a) gave 0 everywhere."""
    t = trainer("iac", k=2, rollout={"joint_mode": joint_mode})
    rollout = collect_rollout(t.agents, t.env, ITEMS[:4], t.settings)
    rewards = rollout.tree.rewards[..., 0]
    assert rewards.std() > 0  # the toy rewards differ inside some node
    for kind in ("independent", "central"):
        v = at_target_advantages(table_critic(kind, "v", 2), rollout)
        q = at_target_advantages(table_critic(kind, "q", 2), rollout)
        for a_v, a_q in zip(v, q):
            assert a_v.abs().max() > 0.5  # whitened: unit std
            assert torch.allclose(a_q, a_v, atol=1e-6), (kind, a_q, a_v)


def test_exact_q_critic_moves_the_agents_as_the_group_mean_does():
    """The loop test of issue #27: MAAC with an exact Q critic (Q(h, a) = the reward) for one SGD step, against
    MAGRPO on the same rollout (same seed). Single turn, leave-one-out gives A = K/(K-1) (r - mean_j r), MAGRPO's
    advantage times 4/3, then whitened per agent (one positive scale), so every agent's weight change points the
    same way: measured cosine 1.0000 for both agents, |delta| 1.354 vs 0.610 and 1.332 vs 0.600 (the ratio
    2.219 is 1/std of MAGRPO's advantages). Subtracting Q(h, a) itself gave A = 0: the weights did not move."""
    tok = tiny_tokenizer()
    critic = CriticSettings(model=comarl.AgentConfig(model=ExactQForSequenceClassification(tok), tokenizer=tok),
                            critic_type="q", joint_input=joint_words, lr=1e-3)
    runs = {}
    for name, algorithm in (("maac_q", "maac"), ("magrpo", "magrpo")):
        t = trainer(algorithm, critic=critic, agent_list=agents("sgd", lr=0.5), loss={"max_grad_norm": 0.0})
        before = snapshot(t)
        hist = t.train()
        runs[name] = (weight_delta(t, before), hist[-1])
    assert runs["maac_q"][1]["reward/mean"] == runs["magrpo"][1]["reward/mean"]  # the same rollout
    for d_q, d_g in zip(runs["maac_q"][0], runs["magrpo"][0]):
        assert d_g.norm() > 0 and d_q.norm() > 0, (d_q.norm(), d_g.norm())
        assert float(torch.nn.functional.cosine_similarity(d_q, d_g, dim=0)) > 0.9999


def test_q_critic_needs_two_samples_before_any_model_loads():
    """K = 1: a node's mean Q is Q(h, a) itself. Refused, naming the key, before the (unloadable) agents load."""
    missing = [comarl.AgentConfig(model="/no/such/model/dir") for _ in range(2)]
    for algorithm, critic in (("iac", CriticSettings(critic_type="q")),
                              ("maac", CriticSettings(model="tiny", critic_type="q"))):
        with pytest.raises(ConfigError, match=r"TrainConfig.critic.critic_type: q needs "
                                              r"TrainConfig.rollout.num_generations >= 2"):
            trainer(algorithm, critic=critic, k=1, agent_list=missing)
    with pytest.raises(ConfigError, match="num_generations >= 2"):
        CriticSettings(critic_type="q").validate(num_generations=1)
    CriticSettings(critic_type="v").validate(num_generations=1)  # a V critic is its own baseline at K = 1
    CriticSettings(critic_type="q").validate()  # unused settings (critic-free algorithms) are not checked for K


@pytest.mark.parametrize("bootstrap", [True, False])
def test_q_critic_warns_once_that_a_num_turns_cut_is_terminal(bootstrap):
    """The env would go on but num_turns = 1: a Q critic has no action at the next prompts, so the cut is an
    end; with bootstrap_truncated (the default) it says so, once per critic."""
    env = toy_env(transition=lambda state, responses: ["next A", "next B"], max_turns=3)
    t = trainer("iac", critic=CriticSettings(critic_type="q", bootstrap_truncated=bootstrap), k=2, env=env)
    rollouts = [collect_rollout(t.agents, t.env, ITEMS[:2], t.settings) for _ in range(2)]
    assert rollouts[0].tree.truncated.all()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t.critic.prepare(rollouts[:1])
        t.critic.prepare(rollouts[1:])
    said = [w for w in caught if "treated as terminal" in str(w.message)]
    assert len(said) == (1 if bootstrap else 0), [str(w.message) for w in caught]
    # the cut is terminal: single turn, each Q input's target is its reward (mean over its joint actions)
    r = rollouts[1].tree.rewards[..., 0]  # [G, J]; aligned: sample k of agent 0 is joint action k
    assert torch.allclose(t.critic._targets[0].targets, r.reshape(-1).float())
