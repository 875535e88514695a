"""The critic component of the one training loop: values -> GAE advantages, and its own update.

``prepare(rollouts)`` runs once per step, after the rollout and before any
agent's update: it values every joint action of every tree (no gradient),
computes GAE over each branch's turns (``advantages.gae_tree``), writes each
agent's advantages to ``AgentSamples.critic_advantages`` and keeps the value
targets ``A + V``. ``update(agent, iteration)`` is called by the loop before
each of agent ``agent``'s policy passes: independent critics update agent
``agent``'s critic; a central critic updates on agent 0's passes.

With a value head on the agent's own model the value loss also reaches the
agent's backbone (or LoRA adapter): those gradients stay in the agent's
``.grad`` and are applied by the agent's own optimizer step that follows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..advantages import gae_tree, whiten
from ..losses import explained_variance, value_loss
from .settings import CriticSettings
from .value_model import ValueModel


@dataclass
class _Targets:
    """One column's critic inputs of this step with rollout-time values and GAE targets ([U] each)."""

    ids: list
    old: torch.Tensor
    targets: torch.Tensor


def _mean_by_index(x: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    """``out[u] = mean of x[g, j] over index[g, j] == u``: one target per critic input. [G, J] -> [size]."""
    flat = index.reshape(-1)
    summed = torch.zeros(size, dtype=torch.float64).index_add_(0, flat, x.reshape(-1).to(torch.float64))
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

    @property
    def central(self) -> bool:
        return self.inputs.central

    def modules(self) -> list[torch.nn.Module]:
        return [m for vm in self.models for m in vm.modules()]

    # ----------------------------------------------------------------- values and advantages
    def _values(self, vm: ValueModel, ids: list[list[int]]) -> torch.Tensor:
        with torch.no_grad():
            return torch.cat([vm.values(ids[a:a + self.micro]).cpu() for a in range(0, len(ids), self.micro)]
                             ).to(torch.float64) if ids else torch.zeros(0, dtype=torch.float64)

    def _value_tree(self, r) -> tuple[torch.Tensor, torch.Tensor, list]:
        """Values [G, J, C] of every joint action, bootstrap values [G, J, C] of cut branches, and per column
        the critic inputs (Units, token ids, [U] values)."""
        st, inputs, tree = self.settings, self.inputs, r.tree
        k = r.agents[0].returns.shape[1]
        texts = [s.texts for s in r.agents]
        shape = (*tree.child.shape, inputs.columns)
        values = torch.zeros(shape, dtype=torch.float64)
        boot = torch.zeros(shape, dtype=torch.float64)
        columns = []
        for c, vm in enumerate(self.models):
            units = inputs.units(tree, texts, c, k)
            unit_ids = vm.encode(units.prompts, units.responses)
            v = self._values(vm, unit_ids)
            values[:, :, c] = v[units.index]
            if st.critic_type == "v" and st.bootstrap_truncated and tree.next_prompts:
                keys = sorted(tree.next_prompts)
                bv = self._values(vm, vm.encode([inputs.bootstrap(tree.next_prompts[key], c) for key in keys]))
                for (g, j), val in zip(keys, bv):
                    boot[g, j, c] = val
            columns.append((units, unit_ids, v))
        return values, boot, columns

    def prepare(self, rollouts: list) -> dict[str, float]:
        """Values, GAE advantages (into each ``AgentSamples.critic_advantages``) and value targets."""
        st, inputs = self.settings, self.inputs
        cols = range(inputs.columns)
        ids: list[list] = [[] for _ in cols]
        old: list[list] = [[] for _ in cols]
        tgt: list[list] = [[] for _ in cols]
        raw_adv: dict[int, list] = {}
        for r in rollouts:
            tree, n, k = r.tree, len(r.agents), r.agents[0].returns.shape[1]
            rewards = inputs.rewards(tree).to(torch.float64)
            values, boot, unit_lists = self._value_tree(r)
            adv = gae_tree(rewards, values, tree.child, self.gamma, st.gae_lambda, boot)
            targets = adv + values
            for c, (units, unit_ids, v) in zip(cols, unit_lists):
                ids[c] += unit_ids
                old[c].append(v)
                tgt[c].append(_mean_by_index(targets[:, :, c], units.index, len(unit_ids)))
            for i in range(n):
                onehot = (tree.joints[:, i].unsqueeze(1) == torch.arange(k)).to(torch.float64)  # [J, K]
                per_sample = adv[:, :, inputs.column(i)] @ onehot / onehot.sum(0).clamp(min=1)  # [G, K]
                raw_adv.setdefault(i, []).append(per_sample)
        metrics: dict[str, float] = {}
        for c in cols:
            o, t = torch.cat(old[c]), torch.cat(tgt[c])
            self._targets[c] = _Targets(ids[c], o.float(), t.float())
            metrics[f"{self.names[c]}/value_mean"] = float(o.mean()) if len(o) else 0.0
            metrics[f"{self.names[c]}/explained_var"] = explained_variance(o, t)
        for i, parts in raw_adv.items():
            flat = torch.cat([p.reshape(-1) for p in parts])
            metrics[f"{self.agent_names[i]}/advantage_mean"] = float(flat.mean())
            norm = whiten(flat) if st.normalize_advantages else flat
            start = 0
            for r, p in zip(rollouts, parts):
                r.agents[i].critic_advantages = norm[start:start + p.numel()].reshape(p.shape).float()
                start += p.numel()
        return metrics

    # ----------------------------------------------------------------- update
    def update(self, agent: int, iteration: int, all_reduce_sum: Callable = lambda x: x,
               all_reduce_grads: Callable = lambda m: None) -> dict[str, float]:
        """One optimizer step of the critic attached to ``agent`` on this step's targets (see module doc)."""
        if self.central and agent != 0:
            return {}
        c = self.inputs.column(agent)
        vm, opt, data, st = self.models[c], self.optimizers[c], self._targets[c], self.settings
        if data is None:
            raise RuntimeError("Critic.update before Critic.prepare: no value targets for this step")
        n_total = all_reduce_sum(len(data.ids))
        total, finite = 0.0, True
        for a in range(0, len(data.ids), self.micro):
            b = min(a + self.micro, len(data.ids))
            new = vm.values(data.ids[a:b])
            loss = value_loss(new, data.old[a:b].to(new.device), data.targets[a:b].to(new.device), st.value_clip)
            loss = loss * (b - a) / max(n_total, 1)
            if not torch.isfinite(loss):
                finite = False
                break
            (st.value_loss_coef * loss).backward()
            total += float(loss.detach())
        params = vm.parameters()
        for m in vm.modules():
            all_reduce_grads(m)
        grads = [p.grad for p in params if p.grad is not None]
        if finite and grads:
            if self.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
            opt.step()
        opt.zero_grad(set_to_none=True)
        out = {f"{self.names[c]}/value_loss": all_reduce_sum(total)} if iteration == 0 else {}
        return out

    # ----------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict:
        return {"models": [{"head": vm.head.state_dict() if vm.head is not None else None,
                            "backbone": vm.backbone.state_dict() if vm.owns_backbone else None} for vm in self.models],
                "optimizers": [o.state_dict() for o in self.optimizers]}

    def load_state_dict(self, state: dict) -> None:
        if len(state["models"]) != len(self.models):
            raise ValueError(f"train.resume: the checkpoint has {len(state['models'])} critics, this run "
                             f"{len(self.models)} (iac vs maac?)")
        for vm, saved in zip(self.models, state["models"]):
            if vm.head is not None:
                vm.head.load_state_dict(saved["head"])
            if vm.owns_backbone:
                vm.backbone.load_state_dict(saved["backbone"])
        for o, saved in zip(self.optimizers, state["optimizers"]):
            o.load_state_dict(saved)
