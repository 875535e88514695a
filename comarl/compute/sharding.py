"""FSDP2 sharding of the agents (``train.hardware.sharding: fsdp``), with data parallelism over the same ranks.

Every agent's model (a LoRA base with all its adapters, and a full
fine-tuning agent's frozen reference copy) is wrapped with
``torch.distributed.fsdp.fully_shard``: once per transformer block (the
classes the model names in ``_no_split_modules``) and once at the root. Each
rank then keeps 1/S of every parameter, gradient and optimiser state, where S
is the shard group size. The mesh is

* 1-D ``(W,)`` over all W ranks when ``train.hardware.fsdp_shard_size`` is 0, or
* 2-D ``(W / S, S)`` (HSDP: shard within groups of S ranks, replicate across
  the W / S groups) when ``fsdp_shard_size`` = S.

Items are still split over all W ranks (data parallel), and losses are
normalised by global counts, so gradients are *summed* over ranks: FSDP's
reduce-scatter (and HSDP's all-reduce) run with a divide factor of 1 and
plain SUM reductions (``set_force_sum_reduction_for_comms``; gloo has no
PREMUL_SUM). FSDP forward and backward are collectives, so ranks must run the
same number of them:

* **Generation, reference and old log-probs** (passes whose count differs per
  rank: a rank may have no item, multi-turn trees differ, decoding lengths
  differ) run inside :func:`gathered`: every FSDP unit is unsharded once
  (one all-gather of the whole model per step) and stays whole, so forwards
  do no communication. Cost: the full parameters in memory during the
  rollout (no gradients or optimiser states), zero communication per token.
  Gathering per block while decoding would all-gather the whole model once
  per generated token and would hang as soon as two ranks stop decoding at
  different lengths. ``train.hardware.fsdp_gather: agent`` gathers one agent per
  generate call instead, the ranks in lockstep (:class:`AgentAtATime`).
* **The update** runs the same number of micro-batches on every rank
  (:func:`lockstep_count`); a rank with fewer runs :func:`idle_backward`
  (a one-token forward with a zero loss), which joins the collectives and
  adds nothing to the gradients.

More modules (a reward model) join the run's mesh and policy with
:meth:`Sharding.add`; :func:`run_sharding` gives the run's ``Sharding`` before
the trainer exists (MARLHF's ``env.reward_model`` is sharded, then fitted,
before the agents are built), and the mesh is built once, so both share it.
"""
from __future__ import annotations

import contextlib
import itertools
import warnings
from typing import Iterable

import torch

from ..core.config_io import ConfigError
from ..core.runtime import MIXED_PRECISION
from . import distributed as dist
from .modules import root_module

# A Hugging Face model's output holds views (hidden states); FSDP2 warns on every such forward that an in-place
# op on one would skip its pre-backward hook. Nothing here modifies model outputs in place.
warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")


def mesh_shape(world_size: int, shard_size: int) -> tuple[int, ...]:
    """``(W,)`` for ``shard_size`` 0, else ``(W // S, S)`` (replicas x shards); errors name the key."""
    if shard_size == 0:
        return (world_size,)
    if shard_size < 0 or world_size % shard_size:
        raise ConfigError(f"train.hardware.fsdp_shard_size: must divide the number of ranks ({world_size}), "
                          f"got {shard_size}")
    return (world_size // shard_size, shard_size)


_MESHES: dict[tuple, object] = {}


def build_mesh(shard_size: int, device_type: str):
    """The device mesh of all ranks (see :func:`mesh_shape`); built once per process group and shape, so a
    reward model sharded before the trainer exists (``env.reward_model``) lives on the agents' mesh."""
    from torch.distributed.device_mesh import init_device_mesh

    shape = mesh_shape(dist.world_size(), shard_size)
    key = (id(torch.distributed.group.WORLD), shape, device_type)
    if key not in _MESHES:
        names = ("shard",) if len(shape) == 1 else ("replicate", "shard")
        _MESHES[key] = init_device_mesh(device_type, shape, mesh_dim_names=names)
    return _MESHES[key]


def mixed_precision_policy(mode: str):
    """``train.hardware.mixed_precision`` -> FSDP2 ``MixedPrecisionPolicy`` (None for ``no``).

    bf16 / fp16: parameters are all-gathered and computed in that dtype, gradients
    are reduced in float32 into the float32 sharded master weights (fp16: the loss
    scaler unscales the sharded gradients once per step, ``LossScaler(sharded=True)``).
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy

    dtype = MIXED_PRECISION[mode]
    if dtype is None:
        return None
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


def block_modules(model: torch.nn.Module, where: str) -> list[torch.nn.Module]:
    """The transformer blocks of ``model``: modules of a class named in some ``_no_split_modules``."""
    names: set[str] = set()
    for m in model.modules():
        names.update(getattr(m, "_no_split_modules", None) or ())
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    if not blocks:
        raise ConfigError(f"train.hardware.sharding=fsdp: {where}'s model ({type(model).__name__}) names no "
                          f"transformer block class (_no_split_modules) to shard by")
    return blocks


def shard_module(model: torch.nn.Module, mesh, mp_policy, where: str, by_block: bool = True) -> None:
    """``fully_shard`` each block of ``model`` (``by_block``; a small head has none) and then its root,
    gradients summed (not averaged) over ranks."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    kwargs = {"mesh": mesh} if mp_policy is None else {"mesh": mesh, "mp_policy": mp_policy}
    for block in block_modules(model, where) if by_block else []:
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(1.0)
            m.set_force_sum_reduction_for_comms(True)


def shard_target(module: torch.nn.Module) -> torch.nn.Module:
    """Where the FSDP root goes: a ``PeftModel``'s inner causal LM, whose forward every call passes through
    (``PeftModel.generate`` skips the PeftModel's own forward, and FSDP needs its root's forward first)."""
    return module.get_base_model() if hasattr(module, "get_base_model") else module  # type: ignore[operator]


def is_sharded(model) -> bool:
    """Whether ``model``'s parameters are FSDP shards (DTensors)."""
    from torch.distributed.tensor import DTensor

    return isinstance(next(iter(root_module(model).parameters())), DTensor)


class Sharding:
    """The mesh a run's sharded modules (agents', references', critics, reward models) live on and the
    mixed-precision policy they share."""

    def __init__(self, mesh, mp_policy=None):
        self.mesh = mesh
        self.mp_policy = mp_policy

    def add(self, module: torch.nn.Module, where: str, by_block: bool = True) -> torch.nn.Module:
        """Shard one more module on this mesh (an agent, a reference copy, a critic backbone, a value head
        with ``by_block=False``, a reward model); every rank calls it. Build its optimiser afterwards: FSDP
        swaps the parameters.

        Rank 0's weights are what every rank ends with: rank 0 keeps its whole state (on the CPU when the
        module was built there) while FSDP shards the module, then sends each tensor so that every rank
        keeps its shard (``set_model_state_dict(broadcast_from_rank0=True)``), and its buffers. So the other
        ranks may build the module on the ``meta`` device (``agents.build_agents(meta=True)``): they never
        hold it whole, and FSDP moves rank 0's blocks to the device one at a time.
        """
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        target = shard_target(module)
        on_meta = any(t.is_meta for t in itertools.chain(target.parameters(), target.buffers()))
        full = target.state_dict() if dist.rank() == 0 else {}  # detached: FSDP's moves do not touch them
        shard_module(target, self.mesh, self.mp_policy, where, by_block)
        if on_meta:
            target.to_empty(device=self.device)
        set_model_state_dict(target, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
        with torch.no_grad():
            for b in target.buffers():  # non-persistent buffers (rotary frequencies) are in no state dict
                torch.distributed.broadcast(b, 0)
        return module

    @property
    def device(self) -> torch.device:
        """This rank's device of the mesh (its GPU, or the CPU under gloo)."""
        if self.mesh.device_type == "cuda":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device(self.mesh.device_type)

    @contextlib.contextmanager
    def gathered(self, models: Iterable):
        """Run the block with the whole of ``models`` (agent models, LoRA views, reference copies) on every rank.

        Every rank must enter it together, with the same models (one
        all-gather per FSDP unit on entry); inside, forwards do no
        communication, so ranks may run different numbers of them. Parameters
        go back to their shards on exit.
        """
        from torch.distributed.fsdp import FSDPModule

        roots = {id(r): r for r in map(root_module, models)}.values()  # LoRA views of one base: one gather
        units = []  # (FSDP unit, its reshard_after_forward outside: blocks True, the root False as FSDP sets it)
        for r in roots:
            found = [m for m in r.modules() if isinstance(m, FSDPModule)]
            units += [(m, m is not found[0]) for m in found]
        for u, _ in units:
            u.set_reshard_after_forward(False, recurse=False)
            u.unshard()
        try:
            yield
        finally:
            for u, after in units:
                u.reshard()
                u.set_reshard_after_forward(after, recurse=False)


class AgentAtATime:
    """``RolloutSettings.lockstep`` for ``train.hardware.fsdp_gather: agent``: generation gathers one agent (one
    shared LoRA base) per call instead of the whole team per step, and the ranks keep in step.

    Every rank must enter the same scopes in the same order, so a rank with nothing left to generate
    still enters them (``rollout.join_rollout``, ``rollout.nodes.join_generation``) and the turn loop ends only when
    :meth:`any` says that no rank has work left.
    """

    def __init__(self, sharding: Sharding):
        self.sharding = sharding

    def scope(self, agents):
        return self.sharding.gathered([a.model for a in agents])

    @staticmethod
    def any(flag: bool) -> bool:
        return dist.all_reduce_max(int(bool(flag))) > 0

    @staticmethod
    def max(n: int) -> int:
        return lockstep_count(n)


def run_sharding(cfg, device_type: str) -> Sharding | None:
    """The run's :class:`Sharding` with no module yet: mesh and mixed-precision policy of ``cfg``
    (``train.*``); None when not sharding or not distributed (call ``dist.init_from_env`` first)."""
    if cfg.hardware.sharding == "none" or not dist.is_distributed():
        return None
    return Sharding(build_mesh(cfg.hardware.fsdp_shard_size, device_type),
                    mixed_precision_policy(cfg.hardware.mixed_precision))


def built_on_rank0(build, configs: list) -> list:
    """Agents built for a sharded run: ``build(configs, meta=...)`` with each config's device set to the CPU
    on rank 0 and to ``meta`` elsewhere (no weights read; :meth:`Sharding.add` sends rank 0's), then every
    agent's config given its configured device back, where the sharding puts its shards."""
    import dataclasses

    meta = dist.rank() != 0
    built = build([dataclasses.replace(c, device="meta" if meta else "cpu") for c in configs], meta=meta)
    for a, c in zip(built, configs):
        a.config = dataclasses.replace(a.config, device=c.device)
    return built


def shard_agents(agents, references, cfg) -> Sharding | None:
    """Shard every distinct agent model and reference copy (``train.hardware.sharding``); None when not sharding.

    A single process has nothing to shard with: models stay whole (a sharded
    checkpoint still loads into them).
    """
    here = agents[0].device  # a rank-0 build is still on the CPU (rank 0) or meta: its config names the device
    sharding = run_sharding(cfg, here.type if here.type not in ("cpu", "meta") else
                            torch.device(agents[0].config.device).type)
    if sharding is None:
        return None
    roots: dict[int, tuple[torch.nn.Module, str]] = {}
    for a in agents:
        roots.setdefault(id(root_module(a.model)), (root_module(a.model), a.name))
    for ref, a in zip(references, agents):
        if ref is not None and getattr(ref, "model", None) is not None:
            roots.setdefault(id(ref.model), (ref.model, f"{a.name}'s reference"))
    for module, where in roots.values():
        sharding.add(module, where)
    return sharding


def lockstep_count(n: int) -> int:
    """The largest ``n`` over ranks: how many micro-batches every rank runs under sharding."""
    return int(dist.all_reduce_max(n))


def idle_backward(model, pad_id: int) -> None:
    """A forward/backward that joins FSDP's collectives and adds zero to every gradient (a rank out of items)."""
    device = next(model.parameters()).device
    ids = torch.full((1, 1), pad_id, dtype=torch.long, device=device)
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    (logits.float().sum() * 0.0).backward()


def full_state_dict(module: torch.nn.Module, keep: bool) -> dict[str, torch.Tensor]:
    """``module.state_dict()`` with every shard gathered, one tensor at a time; collective.

    Every rank must call it; only where ``keep`` is true are the full tensors
    kept (on the CPU), elsewhere the dict is empty.
    """
    from torch.distributed.tensor import DTensor

    out = {}
    for k, v in module.state_dict().items():
        full = v.full_tensor() if isinstance(v, DTensor) else v
        if keep:
            out[k] = full.detach().cpu()
    return out


def local_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes this rank holds for ``tensors`` (a DTensor counts its local shard)."""
    from torch.distributed.tensor import DTensor

    total = 0
    for t in tensors:
        if t is None:
            continue
        local = t.to_local() if isinstance(t, DTensor) else t
        total += local.numel() * local.element_size()
    return total

