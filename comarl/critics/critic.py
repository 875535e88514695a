"""The critic component of the one training loop: values -> GAE advantages, and its own update.

``prepare(rollouts)`` runs once per step, after the rollout and before any
agent's update: it values every joint action of every tree (no gradient),
computes GAE over each branch's turns (``advantages.gae_tree``), returns each
agent's advantages (``Prepared.advantages``; the samples are not written) and
keeps the value targets ``A + b`` (each joint action's lambda-return). ``update(agent, iteration)``
is called by the loop before each of agent ``agent``'s policy passes:
independent critics update agent ``agent``'s critic; a central critic updates
on agent 0's passes.

A Q critic's advantages must not subtract ``Q(h, a)`` itself: that leaves Q's
own TD error, which carries no expected signal once Q fits. The node's value
in the TD terms is the mean of Q over its J sampled joint actions
(``advantages.node_baseline``), and each agent's sample is baselined by the
values of the node's joint actions that do not hold it (leave-one-out,
``advantages.sample_advantages``). It needs K >= 2 (``CriticSettings.validate``)
and cannot bootstrap a branch cut by ``num_turns`` (no sampled action at the
next prompts): the cut counts as terminal, with a warning once per critic.

With a value head on the agent's own model the value loss also reaches the
agent's backbone (or LoRA adapter): those gradients stay in the agent's
``.grad`` and are applied by the agent's own optimizer step that follows.

Data parallelism: advantages are whitened over all ranks' samples, and a
non-finite value loss on any rank makes every rank skip the critic's step.
Under FSDP sharding (``critics.build.shard_critic``) ``prepare`` runs with
the models gathered (the loop's job), and ``update`` runs the same number of
micro-batch forwards and backwards on every rank (FSDP's collectives): a
rank out of inputs runs a zero-loss forward/backward of one token.
"""
from __future__ import annotations

import contextlib
import warnings

from dataclasses import dataclass, field
from typing import Callable

import torch

from ..compute import distributed as dist
from ..compute.stepping import MicroLoss, micro_batched_backward, optimizer_step
from ..objective.advantages import gae_tree, node_baseline, sample_advantages, whiten_across
from ..objective.losses import explained_variance, value_loss
from .settings import CriticSettings
from .value_model import ValueModel


@dataclass
class Prepared:
    """What ``Critic.prepare`` gives the update.

    Attributes:
        metrics: value means, explained variance, advantage means.
        advantages: per agent, per rollout chunk, the [G, K] GAE advantages (whitened over every rank's samples
            when ``train.critic.normalize_advantages``); an agent without samples on this rank: [].
        values: per rollout chunk, the [G, J, C] values the critic gave each joint action (column ``c`` of
            ``train.critic``'s columns), for the sample log (``trees.jsonl``).
    """

    metrics: dict[str, float]
    advantages: list[list[torch.Tensor]]
    values: list[torch.Tensor] = field(default_factory=list)


@dataclass
class _Targets:
    """One column's critic inputs of this step with rollout-time values and GAE targets ([U] each)."""

    ids: list
    old: torch.Tensor
    targets: torch.Tensor


def _mean_by_index(x: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    """``out[u] = mean of x[g, j] over index[g, j] == u``: one target per critic input (index -1: none).
    [G, J] -> [size]."""
    flat, x = index.reshape(-1), x.reshape(-1).to(torch.float64)
    if bool((flat < 0).any()):
        keep = flat >= 0
        flat, x = flat[keep], x[keep]
    summed = torch.zeros(size, dtype=torch.float64).index_add_(0, flat, x)
    count = torch.zeros(size, dtype=torch.float64).index_add_(0, flat, torch.ones(len(flat), dtype=torch.float64))
    return summed / count.clamp(min=1)


class Critic:
    """C value functions (one per agent, or one central) with their optimizers and input rules.

    Args:
        models: one :class:`ValueModel` per column.
        optimizers: one per column, over ``models[c].parameters()``.
        inputs: ``AgentInputs`` (IAC) or ``JointInputs`` (MAAC), see ``critics/inputs.py``.
        settings: ``train.critic``.
        agent_names: the agents' names (metric prefixes; a central critic logs as ``critic``).
        gamma, micro_batch_size, max_grad_norm: from ``train``.
    """

    def __init__(self, models: list[ValueModel], optimizers: list[torch.optim.Optimizer], inputs,
                 settings: CriticSettings, agent_names: list[str], gamma: float, micro_batch_size: int,
                 max_grad_norm: float):
        self.models, self.optimizers, self.inputs, self.settings = models, optimizers, inputs, settings
        self.agent_names = list(agent_names)
        self.names = ["critic"] if inputs.central else self.agent_names  # metric prefix per column
        self.gamma, self.micro, self.max_grad_norm = gamma, micro_batch_size, max_grad_norm
        self._targets: list[_Targets | None] = [None] * len(models)
        self.last_skipped = False  # the last update's step was skipped (a non-finite value loss on some rank)
        # the collectives (all_reduce_sum, all_reduce_max, all_reduce_grads); a test's fake ranks
        self.comm = dist.Collectives()
        self.sharded = False  # set by ``shard_critic`` (FSDP mesh): ``update`` then runs in lockstep over ranks
        self._warned_q_cut = False  # a Q critic warns once that a num_turns cut counts as terminal

    @property
    def central(self) -> bool:
        return self.inputs.central

    @property
    def on_agents(self) -> bool:
        """Value heads on the agents' own models (their backbones are the agents')."""
        return any(not vm.owns_backbone for vm in self.models)

    def modules(self) -> list[torch.nn.Module]:
        return [m for vm in self.models for m in vm.modules()]

    def checkpoint_modules(self) -> dict[str, tuple[torch.nn.Module, torch.optim.Optimizer]]:
        """``{"critic<c>": (what column c's optimiser trains, as one module; that optimiser)}``: what a sharded
        checkpoint writes with DCP per column (``ValueModel.trained_module``)."""
        return {f"critic{c}": (vm.trained_module(), opt) for c, (vm, opt) in enumerate(zip(self.models,
                                                                                           self.optimizers))}

    # ----------------------------------------------------------------- values and advantages
    def _values(self, vm: ValueModel, ids: list[list[int]]) -> torch.Tensor:
        with torch.no_grad():
            return torch.cat([vm.values(ids[a:a + self.micro]).cpu() for a in range(0, len(ids), self.micro)]
                             ).to(torch.float64) if ids else torch.zeros(0, dtype=torch.float64)

    def _column_values(self, r, c: int) -> tuple:
        """Column ``c``'s critic inputs of rollout ``r`` and their values: (Units, token ids, [U] values,
        ``{(g, j): bootstrap value}`` of the branches the turn limit cut)."""
        st, inputs, tree, vm = self.settings, self.inputs, r.tree, self.models[c]
        ks = [int(a.returns.shape[1]) if a.returns.dim() == 2 else 0 for a in r.agents]
        units = inputs.units(tree, [s.texts for s in r.agents], c, ks)
        unit_ids = vm.encode(units.prompts, units.responses)
        boot = {}
        if st.critic_type == "q" and st.bootstrap_truncated and tree.next_prompts:
            self._warn_q_cut()
        if st.critic_type == "v" and st.bootstrap_truncated and tree.next_prompts:
            keys = sorted(tree.next_prompts)
            bv = self._values(vm, vm.encode([inputs.bootstrap(tree.next_prompts[key], c) for key in keys]))
            boot = dict(zip(keys, bv.tolist()))
        return units, unit_ids, self._values(vm, unit_ids), boot

    def _warn_q_cut(self) -> None:
        if self._warned_q_cut:
            return
        self._warned_q_cut = True
        warnings.warn("train.critic.critic_type=q: a branch cut by train.rollout.num_turns (the environment would go "
                      "on) is treated as terminal: a Q critic has no sampled action at the next prompts to value, so "
                      "those returns miss the rest of the episode (bootstrap_truncated applies to v critics only; "
                      "use critic_type: v, or raise num_turns). Warned once.", RuntimeWarning, stacklevel=3)

    def column_modules(self, c: int) -> list[torch.nn.Module]:
        """What column ``c``'s values run through: its backbone (an agent's model, for a head on the agent) and
        head (to gather under sharding)."""
        vm = self.models[c]
        return list({id(m): m for m in [vm.backbone] + vm.modules()}.values())

    def prepare(self, rollouts: list, scope: Callable | None = None) -> Prepared:
        """Values, GAE advantages (returned, per agent and rollout) and value targets.

        ``rollouts`` may be empty (a rank without items); the advantages are whitened over every rank's
        samples, so every rank must call this. ``scope(c)``: a context in which
        column ``c``'s value model is whole (sharded models gathered one column at a time); every rank enters
        each column's once, in column order, whatever its rollouts."""
        st, inputs = self.settings, self.inputs
        cols = range(inputs.columns)
        per_column = []  # [C][rollout] (Units, ids, values, bootstrap)
        for c in cols:
            with scope(c) if scope is not None else contextlib.nullcontext():
                per_column.append([self._column_values(r, c) for r in rollouts])
        ids: list[list] = [[] for _ in cols]
        old: list[list] = [[] for _ in cols]
        tgt: list[list] = [[] for _ in cols]
        raw_adv: dict[int, list] = {}
        all_values: list[torch.Tensor] = []
        for n_r, r in enumerate(rollouts):
            tree, n = r.tree, len(r.agents)
            rewards = inputs.rewards(tree).to(torch.float64)
            values = torch.zeros((*tree.child.shape, inputs.columns), dtype=torch.float64)  # [G, J, C]
            boot = torch.zeros_like(values)
            unit_lists = []
            for c in cols:
                units, unit_ids, v, cut = per_column[c][n_r]
                values[:, :, c] = v[units.index] if not tree.staged else \
                    torch.where(units.index >= 0, v[units.index.clamp(min=0)] if len(v) else 0.0, 0.0)
                for (g, j), val in cut.items():
                    boot[g, j, c] = val
                unit_lists.append((units, unit_ids, v))
            all_values.append(values.float())
            if tree.staged:  # a team graph: stage edges undiscounted, nodes of different widths, pass-through nodes
                valid = tree.valid()
                valued = torch.ones(tree.num_nodes, inputs.columns, dtype=torch.bool) if inputs.central else \
                    tree.acting()
                adv = gae_tree(rewards, values, tree.child, self.gamma, st.gae_lambda, boot,
                               tree.discounts(self.gamma), valid, valued)
                targets = adv + node_baseline(values, valid).unsqueeze(1)
            else:
                adv = gae_tree(rewards, values, tree.child, self.gamma, st.gae_lambda, boot)
                targets = adv + node_baseline(values).unsqueeze(1)  # lambda-return of each joint action
            for c, (units, unit_ids, v) in zip(cols, unit_lists):
                ids[c] += unit_ids
                old[c].append(v)
                tgt[c].append(_mean_by_index(targets[:, :, c], units.index, len(unit_ids)))
            for i in range(n):  # [G, K]: its joint actions' lambda-returns minus the other joint actions' values
                c, k = inputs.column(i), int(r.agents[i].returns.shape[1])
                if tree.staged:  # the nodes where agent i acts, in the order of its groups
                    nodes = tree.agent_nodes(i)
                    part = sample_advantages(adv[nodes][:, :, c], values[nodes][:, :, c],
                                             tree.joints[nodes][:, :, i], k)
                else:
                    part = sample_advantages(adv[:, :, c], values[:, :, c], tree.joints[0, :, i], k)
                raw_adv.setdefault(i, []).append(part)
        metrics: dict[str, float] = {}
        empty = torch.zeros(0, dtype=torch.float64)
        for c in cols:
            o, t = torch.cat(old[c] or [empty]), torch.cat(tgt[c] or [empty])
            self._targets[c] = _Targets(ids[c], o.float(), t.float())
            if len(o):  # a rank without items reports nothing (the metrics are averaged over ranks)
                metrics[f"{self.names[c]}/value_mean"] = float(o.mean())
                metrics[f"{self.names[c]}/explained_var"] = explained_variance(o, t)
        advantages: list[list[torch.Tensor]] = []
        for i in range(len(self.agent_names)):  # every agent on every rank: the whitening is collective
            parts = raw_adv.get(i, [])
            flat = torch.cat([p.reshape(-1) for p in parts] or [empty])
            if len(flat):
                metrics[f"{self.agent_names[i]}/advantage_mean"] = float(flat.mean())
            norm = whiten_across(flat, self.comm.all_reduce_sum) if st.normalize_advantages else flat
            mine, start = [], 0
            for p in parts:
                mine.append(norm[start:start + p.numel()].reshape(p.shape).float())
                start += p.numel()
            advantages.append(mine)
        return Prepared(metrics, advantages, all_values)

    # ----------------------------------------------------------------- update
    def update(self, agent: int, iteration: int) -> dict[str, float]:
        """One optimizer step of the critic attached to ``agent`` on this step's targets (see module doc).

        Every rank calls it: the value loss is normalised by the global count, a
        non-finite loss on any rank skips the step on all, and (sharded) every
        rank runs the largest number of micro-batches of any rank."""
        self.last_skipped = False
        if self.central and agent != 0:
            return {}
        c = self.inputs.column(agent)
        vm, opt, data, st = self.models[c], self.optimizers[c], self._targets[c], self.settings
        if data is None:
            raise RuntimeError("Critic.update before Critic.prepare: no value targets for this step")
        n = len(data.ids)
        n_total = self.comm.all_reduce_sum(n)
        spans = [(a, min(a + self.micro, n)) for a in range(0, n, self.micro)]
        value_losses: list[float] = []  # the value loss without its coefficient (the metric)

        def loss_of(m: int) -> MicroLoss:
            a, b = spans[m]
            new = vm.values(data.ids[a:b])
            loss = value_loss(new, data.old[a:b].to(new.device), data.targets[a:b].to(new.device), st.value_clip)
            loss = loss * (b - a) / max(n_total, 1)
            if torch.isfinite(loss):
                value_losses.append(float(loss.detach()))
            # a non-finite loss under sharding backpropagates zero through this forward instead: no non-finite
            # gradient reaches an agent's backbone that carries a value head (its own step reads it next)
            return MicroLoss(st.value_loss_coef * loss, zero=new.sum() * 0.0)

        done = micro_batched_backward(len(spans), loss_of, idle=lambda: self._idle_backward(vm),
                                      lockstep=(lambda k: int(self.comm.all_reduce_max(k))) if self.sharded else None)

        def reduce_grads() -> None:
            for m in vm.modules():
                self.comm.all_reduce_grads(m)  # leaves FSDP's (already reduced) DTensor gradients alone

        def skipped() -> None:
            self.last_skipped = True

        self.last_skipped = False
        optimizer_step(vm.parameters(), opt, bad=not done.finite, max_grad_norm=self.max_grad_norm,
                       reduce_grads=reduce_grads, on_skip=skipped, all_reduce_sum=self.comm.all_reduce_sum)
        return {f"{self.names[c]}/value_loss": self.comm.all_reduce_sum(sum(value_losses))} if iteration == 0 else {}

    @staticmethod
    def _idle_backward(vm: ValueModel) -> None:
        """A one-token forward/backward through the value model with a zero loss: adds nothing to any gradient."""
        (vm.values([[vm.pad_id]]).sum() * 0.0).backward()

    # ----------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict:
        return {"models": [{"head": vm.head.state_dict() if vm.head is not None else None,
                            "backbone": vm.backbone.state_dict() if vm.owns_backbone else None} for vm in self.models],
                "optimizers": [o.state_dict() for o in self.optimizers]}

    def load_state_dict(self, state: dict) -> None:
        if len(state["models"]) != len(self.models):
            raise ValueError(f"train.run.resume: the checkpoint has {len(state['models'])} critics, this run "
                             f"{len(self.models)} (iac vs maac?)")
        for vm, saved in zip(self.models, state["models"]):
            if vm.head is not None:
                vm.head.load_state_dict(saved["head"])
            if vm.owns_backbone:
                vm.backbone.load_state_dict(saved["backbone"])
        for o, saved in zip(self.optimizers, state["optimizers"]):
            o.load_state_dict(saved)
