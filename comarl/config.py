"""Experiment configuration: dataclasses filled from YAML and ``key=value`` overrides.

A YAML file has four sections, and a fifth for the frozen helper models it uses::

    agents: [ {model: ..., max_new_tokens: ..., lr: ...}, ... ]   # AgentConfig each
    env:    {name: demo_writing, args: {...}}                      # EnvConfig
    data:   {train: {source, split, limit}, eval: {...}}           # DataConfig
    train:  {algorithm: magrpo, rollout: {num_generations: 4}, run: {batch_size: 4}, ...}   # TrainConfig
    helpers: {coder: {model: ..., device: cuda:1}, judge: {endpoint: {api: chat, model: ...}}}   # HelperSpec each

``train`` has one section per component (``rollout``, ``loss``, ``run``, ``hardware``, ``critic``,
``preference``). The flat keys of earlier configs (``train.num_generations``) are deprecated: they still work
until comarl 0.2, each with a one-line warning naming its section's key (``config_io.DeprecatedKey``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar


from .core.config_io import (ConfigError, Moved, aliased, apply_overrides, canonical, canonical_key, from_dict,
                             moved_out, plain, read_yaml)
from .critics.settings import CriticSettings
from .generation.helper_settings import HelperSpec, check_helper_names
from .generation.vllm_settings import EngineSettings
from .models.agents import AgentConfig
from .objective.losses import KL_ESTIMATORS, NORMALISATIONS
from .preference.judge import JudgeSettings
from .preference.marlhf import RewardModelSettings
from .preference.settings import PreferenceSettings



def _bad(key: str, msg: str):
    raise ConfigError(f"train.{key}: {msg}")


@dataclass
class RolloutConfig:
    """``train.rollout``: how a step samples: the rollout tree (read by ``rollout.RolloutSettings``)."""
    num_generations: int = 4
    """K: samples per agent per node (per item at turn 1)."""
    joint_mode: str = "aligned"
    """aligned: K joint actions (k-th samples together); cross: all K^N combinations."""
    num_turns: int = 1
    """Turns per episode; > 1 branches every joint action through the env transition."""
    discount: float = 1.0
    """gamma: G_t = r_t + gamma * V(child)."""
    early_stop_reward: float | None = None
    """A branch ends when its (mean) reward reaches this value; None = never."""
    early_stop_sibling_mean: float | None = None
    """Every branch of a node ends when the mean reward of the node's joint actions exceeds this (reference rule);
    None = never."""
    max_samples_per_item: int = 4096
    """Refuse configs whose tree would generate more completions per item than this."""
    max_staleness: int = 0
    """0: each step samples with its own weights (on-policy). k >= 1: a generation worker samples step t+k's batch
    while the trainer updates on step t's, with weights k steps old; the loss corrects with the behaviour policy's
    log-probs (docs/overlap.md)."""

    def validate(self) -> None:
        if self.num_generations < 1:
            _bad("rollout.num_generations", f"must be >= 1, got {self.num_generations}")
        if self.joint_mode not in ("aligned", "cross"):
            _bad("rollout.joint_mode", f"must be aligned or cross, got {self.joint_mode!r}")
        if self.num_turns < 1:
            _bad("rollout.num_turns", f"must be >= 1, got {self.num_turns}")
        if not 0 <= self.discount <= 1:
            _bad("rollout.discount", f"must be in [0, 1], got {self.discount}")
        if self.max_samples_per_item < 0:
            _bad("rollout.max_samples_per_item", f"must be >= 0, got {self.max_samples_per_item}")
        if self.max_staleness < 0:
            _bad("rollout.max_staleness", f"must be >= 0, got {self.max_staleness}")


@dataclass
class LossConfig:
    """``train.loss``: how the policy learns from a rollout (read by ``updates.PolicyGradient``, the estimators
    and ``Team.optimizer_step``)."""
    scale_advantages: bool = False
    """Divide advantages by the group std of the returns, every estimator (off: see docs/algorithms.md)."""
    loss_normalization: str = "sequence"
    """sequence (GRPO mean per sequence) | token (mean over all tokens) | constant (Dr. GRPO: / max_new_tokens)."""
    clip_low: float = 0.2
    """Lower clip epsilon of the importance ratio."""
    clip_high: float = 0.2
    """Upper clip epsilon of the importance ratio."""
    ratio_level: str = "token"
    """token (PPO/GRPO) or sequence (GSPO) importance ratio."""
    num_iterations: int = 1
    """Optimisation passes (optimizer steps) over each rollout batch."""
    kl_beta: float = 0.0
    """beta of the KL to the reference policy (0 = off; no reference is built)."""
    kl_estimator: str = "k3"
    """Per-token KL estimator: k1 (logp - ref_logp; kl_mode reward only) or k3 (exp(d) - d - 1, d = ref_logp - logp)."""
    kl_mode: str = "loss"
    """loss (add beta * KL to the loss) or reward (subtract beta * sequence KL from each sample's return)."""
    mask_truncated: bool = False
    """Drop completions that hit max_new_tokens without EOS from the loss (their tokens get weight 0)."""
    disable_dropout: bool = True
    """Dropout off in the update forward too (sampling, old and reference log-probs never use it)."""
    max_grad_norm: float = 1.0
    """Gradient clipping per agent (0 = off)."""
    tis_cap: float | None = None
    """generator vllm or max_staleness >= 1: weigh each token's policy loss by min(exp(trainer logp - sampling logp),
    tis_cap), truncated importance sampling for the engine/trainer mismatch and the lag (docs/vllm.md,
    docs/overlap.md); None = off."""
    entropy_coef: float = 0.0
    """Entropy bonus on the actors' sampled tokens (losses.entropy_bonus); added by the actor-critic algorithms
    (iac, maac); 0 = off."""

    def validate(self) -> None:
        if self.loss_normalization not in NORMALISATIONS:
            _bad("loss.loss_normalization", f"must be one of {list(NORMALISATIONS)}, got {self.loss_normalization!r}")
        if self.ratio_level not in ("token", "sequence"):
            _bad("loss.ratio_level", f"must be token or sequence, got {self.ratio_level!r}")
        if self.clip_low < 0 or self.clip_high < 0:
            _bad("loss.clip_low", "clip epsilons must be >= 0")
        if self.kl_beta < 0:
            _bad("loss.kl_beta", f"must be >= 0, got {self.kl_beta}")
        if self.kl_estimator not in KL_ESTIMATORS:
            _bad("loss.kl_estimator", f"must be one of {list(KL_ESTIMATORS)}, got {self.kl_estimator!r}")
        if self.kl_mode not in ("loss", "reward"):
            _bad("loss.kl_mode", f"must be loss or reward, got {self.kl_mode!r}")
        if self.kl_beta > 0 and self.kl_estimator == "k1" and self.kl_mode == "loss":
            _bad("loss.kl_estimator", "k1 as a loss term has zero expected gradient (it regularises nothing); "
                                 "use kl_estimator: k3, or kl_mode: reward with k1")
        if self.num_iterations < 1:
            _bad("loss.num_iterations", f"must be >= 1, got {self.num_iterations}")
        if self.max_grad_norm < 0:
            _bad("loss.max_grad_norm", f"must be >= 0, got {self.max_grad_norm}")
        if self.tis_cap is not None and not self.tis_cap > 0:
            _bad("loss.tis_cap", f"must be > 0 or null, got {self.tis_cap}")
        if self.entropy_coef < 0:
            _bad("loss.entropy_coef", f"must be >= 0, got {self.entropy_coef}")


@dataclass
class RunConfig:
    """``train.run``: how long the run is and what it writes (read by the loop, the sources and the logger)."""
    epochs: int = 1
    """Passes over the training set (ignored when max_steps > 0)."""
    max_steps: int = 0
    """Stop after this many training steps (0 = run the epochs)."""
    batch_size: int = 4
    """Items per training step (per rank)."""
    gradient_accumulation_steps: int = 1
    """Split each step's items into this many rollout chunks (memory), one optimizer step after all."""
    lr_scheduler: str = "constant"
    """constant | cosine | linear (all with warmup_steps of linear warm-up)."""
    warmup_steps: int = 0
    """Linear warm-up optimizer steps."""
    seed: int = 0
    """Seed for data order, sampling and initialisation."""
    shuffle: bool = True
    """Reshuffle the training items every epoch."""
    eval_steps: int = 0
    """Evaluate on the eval set every this many steps (0 = only when asked)."""
    eval_num_generations: int = 1
    """Samples per item at evaluation."""
    logging_steps: int = 1
    """Write metrics every this many steps."""
    log_samples_steps: int = 10
    """Write sample completions every this many steps (0 = never): samples.jsonl, and trees.jsonl (comarl view)."""
    log_samples_max_kb: int = 256
    """Most KiB of rollout trees (trees.jsonl: texts, rewards, advantages) per logged step: items in batch order
    while they fit, a first item bigger than this with its texts shortened (0 = no trees)."""
    save_steps: int = 0
    """Checkpoint every this many steps (0 = only at the end when output_dir is set)."""
    save_total_limit: int = 2
    """Keep at most this many checkpoints (oldest removed)."""
    checkpoint_checksums: bool = False
    """Also write each checkpoint file's CRC-32, verified on resume (~0.4 s per 540 MB; sizes are always checked)."""
    output_dir: str | None = None
    """Where logs and checkpoints go (None = no files)."""
    resume: str | None = None
    """Checkpoint folder to resume from, or "latest" (newest in output_dir)."""
    overwrite: bool = False
    """Clear the run files (logs, checkpoints, final/) already in output_dir before a fresh run (else refused)."""
    save_on_interrupt: bool = False
    """On Ctrl-C, write a checkpoint of the last finished step before exiting (resume with train.run.resume=latest)."""
    report_to: list[str] = field(default_factory=lambda: ["jsonl", "tensorboard"])
    """Metric sinks: jsonl, tensorboard, wandb."""
    wandb_project: str = "comarl"
    """W&B project when report_to has wandb."""
    progress_bar: bool = True
    """Show a progress bar with step, reward and s/step."""
    max_consecutive_skips: int = 20
    """Stop (with a checkpoint) after this many steps in a row in which no agent's update could be taken (0 = never)."""
    step_timeout_s: float = 0.0
    """A step, weight push, evaluation or checkpoint running longer stops the run: every thread's stack of every
    rank goes to OUTPUT_DIR/stacks/ and one line names where it hung (docs/faults.md; 0 = no limit)."""
    step_timeout_factor: float = 0.0
    """Also stop a step running longer than this multiple of the median step so far (from the 4th step; 0 = off)."""
    max_restarts: int = 0
    """comarl train relaunches a run that died (crash, hang, a killed rank) from its newest verified checkpoint
    at most this many times (also --max-restarts; needs output_dir; docs/faults.md)."""
    restart_backoff_s: float = 10.0
    """Seconds before the first restart, doubled for each further one (at most 300)."""

    def validate(self) -> None:
        for key in ("batch_size", "gradient_accumulation_steps", "epochs", "eval_num_generations", "logging_steps"):
            if getattr(self, key) < 1:
                _bad(f"run.{key}", f"must be >= 1, got {getattr(self, key)}")
        for key in ("max_steps", "warmup_steps", "eval_steps", "save_steps", "log_samples_steps",
                    "log_samples_max_kb", "max_consecutive_skips", "max_restarts", "step_timeout_s",
                    "step_timeout_factor", "restart_backoff_s"):
            if getattr(self, key) < 0:
                _bad(f"run.{key}", f"must be >= 0, got {getattr(self, key)}")
        if self.batch_size % self.gradient_accumulation_steps:
            _bad("run.gradient_accumulation_steps", f"must divide batch_size ({self.batch_size}), "
                                                f"got {self.gradient_accumulation_steps}")
        if self.lr_scheduler not in ("constant", "cosine", "linear"):
            _bad("run.lr_scheduler", f"must be constant, cosine or linear, got {self.lr_scheduler!r}")
        for sink in self.report_to:
            if sink not in ("jsonl", "tensorboard", "wandb"):
                _bad("run.report_to", f"unknown sink {sink!r} (jsonl, tensorboard, wandb)")


@aliased
@dataclass
class HardwareConfig:
    """``train.hardware``: where and how the models run: devices, memory, precision, sharding (read by
    ``training/build.py``, the Team and generation). None of it changes what is learnt, up to float rounding."""
    micro_batch_size: int = 16
    """Sequences per forward/backward pass (memory only; the loss is identical)."""
    prompts_per_generate: int = 0
    """Prompts per generate call, each with its K samples (0 = all of a turn in one call); memory only."""
    agent_devices: list[str] | None = None
    """One device per agent (cpu, cuda, cuda:1) overriding agents.<i>.device; torchrun: cuda = the rank's GPU."""
    reference_device: str | None = None
    """Device of the KL reference models (None = each on its agent's device); e.g. cpu to save GPU memory."""
    gradient_checkpointing: bool = False
    """Recompute each layer's activations in backward: much less activation memory for ~30% more compute."""
    mixed_precision: str = "no"
    """Training forward under autocast: no | bf16 (CUDA or CPU) | fp16 (CUDA, with dynamic loss scaling)."""
    dist_backend: str | None = None
    """torch.distributed backend under torchrun (None = nccl with CUDA, else gloo)."""
    sharding: str = "none"
    """none (each rank holds every agent whole) | fsdp (FSDP2: every agent sharded over the ranks;
    docs/distributed.md)."""
    fsdp_shard_size: int = 0
    """Under sharding=fsdp: ranks per shard group (0 = all ranks, 1-D mesh; S = HSDP, W/S replicas x S shards)."""
    fsdp_gather: str = "team"
    """Under sharding=fsdp, what is whole during generation: team (every agent, once per step) | agent (one at a
    time, per call)."""
    share_prefix: bool = True
    """Encode each prompt once for its K samples (generation, update); models that cannot fall back
    (docs/shared_prefix.md)."""
    batch_adapters: bool = True
    """LoRA agents on one base with equal generation settings share one generate call (docs/lora.md)."""
    generator: str = "hf"
    """Who samples the rollouts: hf (Hugging Face generate) | vllm (a vLLM engine per base model in this process,
    weights pushed after each optimiser step; docs/vllm.md)."""
    vllm: EngineSettings = field(default_factory=EngineSettings)
    """generator vllm: how the engines are built (KV-cache memory, threads, dtype; docs/vllm.md); unused with hf."""

    # the old name (TRL's generation_batch_size counts completions, not prompts); deprecated until comarl 0.2
    generation_batch_size = Moved[int]("prompts_per_generate")

    def validate(self, num_agents: int) -> None:
        """Device, precision, memory and backend keys (docs/distributed.md)."""
        from .core.runtime import MIXED_PRECISION, check_agent_devices

        if self.micro_batch_size < 1:
            _bad("hardware.micro_batch_size", f"must be >= 1, got {self.micro_batch_size}")
        if self.prompts_per_generate < 0:
            _bad("hardware.prompts_per_generate", f"must be >= 0, got {self.prompts_per_generate}")
        check_agent_devices(self.agent_devices, num_agents)
        if self.reference_device is not None and not isinstance(self.reference_device, str):
            raise ConfigError(f"train.hardware.reference_device: must be a device string or null, "
                              f"got {self.reference_device!r}")
        if self.mixed_precision not in MIXED_PRECISION:
            raise ConfigError(f"train.hardware.mixed_precision: must be one of {list(MIXED_PRECISION)}, "
                              f"got {self.mixed_precision!r}")
        if self.dist_backend not in (None, "nccl", "gloo"):
            raise ConfigError(f"train.hardware.dist_backend: must be nccl, gloo or null, got {self.dist_backend!r}")
        if self.sharding not in ("none", "fsdp"):
            raise ConfigError(f"train.hardware.sharding: must be none or fsdp, got {self.sharding!r}")
        if self.fsdp_shard_size < 0:
            raise ConfigError(f"train.hardware.fsdp_shard_size: must be >= 0, got {self.fsdp_shard_size}")
        if self.fsdp_gather not in ("team", "agent"):
            raise ConfigError(f"train.hardware.fsdp_gather: must be team or agent, got {self.fsdp_gather!r}")
        if self.sharding == "fsdp" and self.reference_device is not None:
            raise ConfigError("train.hardware.reference_device: a sharded reference lives on the ranks' devices; "
                              "leave it null with train.hardware.sharding=fsdp")
        self.validate_generator(num_agents)

    def validate_generator(self, num_agents: int) -> None:
        """``generator`` and the hardware it cannot run with (docs/vllm.md, "Supported and refused")."""
        if self.generator not in ("hf", "vllm"):
            raise ConfigError(f"train.hardware.generator: must be hf or vllm, got {self.generator!r}")
        if self.generator != "vllm":
            return
        import os

        far = [d for d in self.agent_devices or [] if d.startswith("cuda:") and d != "cuda:0"]
        if far and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ConfigError(f"train.hardware.agent_devices: under torchrun each rank's vLLM engines run on its own "
                              f"GPU (cuda:LOCAL_RANK), got {far[0]}; give the agents device cuda")
        if far and self.vllm.in_process:
            raise ConfigError(f"train.hardware.agent_devices: an in-process vLLM engine runs on the first visible "
                              f"GPU (cuda:0), got {far[0]}; set train.hardware.vllm.in_process: false to start "
                              f"each agent's engine on its agent's GPU")
        self.vllm.validate("train.hardware.vllm")
        self.vllm.check_agents(num_agents)


SECTIONS = {"rollout": RolloutConfig, "loss": LossConfig, "run": RunConfig, "hardware": HardwareConfig}


@aliased
@dataclass
class TrainConfig:
    """How to train: the algorithm and one section per component that reads it. One docstring line per field.

    Python spells a key as YAML does, by section: ``TrainConfig(rollout=RolloutConfig(num_generations=4),
    run=RunConfig(batch_size=2))``, read as ``cfg.rollout.num_generations``. The flat keys of earlier configs
    (``train.num_generations``, ``TrainConfig(num_generations=4)``, ``cfg.num_generations``) are deprecated
    (the ``Moved`` names below): until comarl 0.2 they still reach their section's key, in YAML, in
    ``key=value`` overrides, as keyword arguments and as attributes, each with a ``DeprecatedKey`` warning.
    """

    algorithm: str = "magrpo"
    """Algorithm name (magrpo, grpo, ...; see comarl.algorithms), or ``package.module:RECORD`` for your own."""
    estimator: str | None = None
    """Advantage estimator replacing a policy-gradient algorithm's own: a name (group_relative, leave_one_out,
    no_baseline, greedy, group_max, token_group) or ``package.module:function``; None: the algorithm's."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """How a step samples (the rollout tree)."""
    loss: LossConfig = field(default_factory=LossConfig)
    """How the policy learns from a rollout (advantages, clipped loss, KL, entropy bonus)."""
    run: RunConfig = field(default_factory=RunConfig)
    """Length, data order, evaluation, logging and checkpoints of the run."""
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    """Devices, memory savers, precision and sharding."""
    critic: CriticSettings = field(default_factory=CriticSettings)
    """Critic of the actor-critic algorithms iac/maac (docs/actor_critic.md); ignored by the others."""
    preference: PreferenceSettings = field(default_factory=PreferenceSettings)
    """Pairs, DPO and round settings of madpo, madpo_iter, madpo_offline (docs/preference.md); ignored by the others."""

    ALIASES: ClassVar[dict[str, str]] = {}
    """Old key -> its path (filled by ``aliased`` from the ``Moved`` names below and ``MOVED_KEYS``)."""
    MOVED_KEYS: ClassVar[dict[str, str]] = {"critic.entropy_coef": "loss.entropy_coef"}
    """Keys that moved from one section to another (an entropy bonus is a policy-loss term, not the critic's)."""

    # The flat keys, deprecated until comarl 0.2: each reads and sets its section's key, with a warning.
    # rollout
    num_generations = Moved[int]("rollout.num_generations")
    joint_mode = Moved[str]("rollout.joint_mode")
    num_turns = Moved[int]("rollout.num_turns")
    discount = Moved[float]("rollout.discount")
    early_stop_reward = Moved[float | None]("rollout.early_stop_reward")
    early_stop_sibling_mean = Moved[float | None]("rollout.early_stop_sibling_mean")
    max_samples_per_item = Moved[int]("rollout.max_samples_per_item")
    # loss
    scale_advantages = Moved[bool]("loss.scale_advantages")
    loss_normalization = Moved[str]("loss.loss_normalization")
    clip_low = Moved[float]("loss.clip_low")
    clip_high = Moved[float]("loss.clip_high")
    ratio_level = Moved[str]("loss.ratio_level")
    num_iterations = Moved[int]("loss.num_iterations")
    kl_beta = Moved[float]("loss.kl_beta")
    kl_estimator = Moved[str]("loss.kl_estimator")
    kl_mode = Moved[str]("loss.kl_mode")
    mask_truncated = Moved[bool]("loss.mask_truncated")
    disable_dropout = Moved[bool]("loss.disable_dropout")
    max_grad_norm = Moved[float]("loss.max_grad_norm")
    tis_cap = Moved[float | None]("loss.tis_cap")
    # run
    epochs = Moved[int]("run.epochs")
    max_steps = Moved[int]("run.max_steps")
    batch_size = Moved[int]("run.batch_size")
    gradient_accumulation_steps = Moved[int]("run.gradient_accumulation_steps")
    lr_scheduler = Moved[str]("run.lr_scheduler")
    warmup_steps = Moved[int]("run.warmup_steps")
    seed = Moved[int]("run.seed")
    shuffle = Moved[bool]("run.shuffle")
    eval_steps = Moved[int]("run.eval_steps")
    eval_num_generations = Moved[int]("run.eval_num_generations")
    logging_steps = Moved[int]("run.logging_steps")
    log_samples_steps = Moved[int]("run.log_samples_steps")
    save_steps = Moved[int]("run.save_steps")
    save_total_limit = Moved[int]("run.save_total_limit")
    checkpoint_checksums = Moved[bool]("run.checkpoint_checksums")
    output_dir = Moved[str | None]("run.output_dir")
    resume = Moved[str | None]("run.resume")
    overwrite = Moved[bool]("run.overwrite")
    save_on_interrupt = Moved[bool]("run.save_on_interrupt")
    report_to = Moved[list[str]]("run.report_to")
    wandb_project = Moved[str]("run.wandb_project")
    progress_bar = Moved[bool]("run.progress_bar")
    max_consecutive_skips = Moved[int]("run.max_consecutive_skips")
    # hardware
    micro_batch_size = Moved[int]("hardware.micro_batch_size")
    generation_batch_size = Moved[int]("hardware.prompts_per_generate")
    agent_devices = Moved[list[str] | None]("hardware.agent_devices")
    reference_device = Moved[str | None]("hardware.reference_device")
    gradient_checkpointing = Moved[bool]("hardware.gradient_checkpointing")
    mixed_precision = Moved[str]("hardware.mixed_precision")
    dist_backend = Moved[str | None]("hardware.dist_backend")
    sharding = Moved[str]("hardware.sharding")
    fsdp_shard_size = Moved[int]("hardware.fsdp_shard_size")
    fsdp_gather = Moved[str]("hardware.fsdp_gather")
    share_prefix = Moved[bool]("hardware.share_prefix")
    batch_adapters = Moved[bool]("hardware.batch_adapters")
    generator = Moved[str]("hardware.generator")
    vllm = Moved[EngineSettings]("hardware.vllm")

    def __post_init__(self) -> None:
        self.place_moved()

    def place_moved(self) -> None:
        """Put the values a section was given under a keyword that moved out of it
        (``CriticSettings(entropy_coef=0.01)``) where they live now (``train.loss.entropy_coef``)."""
        for path, value in moved_out(self.critic).items():
            section, key = path.split(".")[1:]
            now = getattr(getattr(self, section), key)
            if now != getattr(SECTIONS[section](), key) and now != value:
                raise ConfigError(f"train.critic.entropy_coef and {path} are the same key (the first is its old "
                                  f"name); give it once")
            setattr(getattr(self, section), key, value)

    def validate(self, num_agents: int, min_generations: int = 1) -> None:
        self.place_moved()  # a section assigned after construction
        if num_agents < 1:
            raise ConfigError("agents: at least one agent is required (N >= 1)")
        if self.rollout.num_generations < min_generations:
            _bad("rollout.num_generations", f"{self.algorithm} needs K >= {min_generations} (a group baseline), "
                                            f"got {self.rollout.num_generations}")
        self.rollout.validate()
        self.loss.validate()
        self.run.validate()
        self.hardware.validate(num_agents)
        self.critic.validate()
        self.preference.validate()

    def check_generator(self, given: Any = None) -> None:
        """What the chosen generator needs (after the algorithm's checks, whose reasons come first): ``tis_cap``
        an engine's log-probs, vllm an importable ``vllm`` (docs/vllm.md). ``given``: a team generator passed to
        the Trainer, which may bring its own log-probs."""
        from .generation.vllm_settings import vllm_installed

        if self.loss.tis_cap is not None and self.hardware.generator != "vllm" and given is None \
                and not self.rollout.max_staleness:
            _bad("loss.tis_cap", "corrects for the log-probs of a policy other than the trainer's; it needs "
                                 "train.hardware.generator: vllm or train.rollout.max_staleness >= 1 (hf on-policy "
                                 "samples with the trainer's own weights and kernels)")
        if self.hardware.generator != "vllm":
            return
        if not vllm_installed():
            raise ConfigError("train.hardware.generator: vllm is not installed; GPU: pip install -e '.[vllm]' with "
                              "your CUDA torch, CPU: scripts/install_vllm_cpu.sh (docs/vllm.md)")


@dataclass
class DataSource:
    """Where items come from: a hub dataset id or a local file/folder (None = the env's default)."""

    source: str | None = None
    """Hub id or local path."""
    split: str | None = None
    """Dataset split."""
    limit: int | None = None
    """Use only the first `limit` items."""


@dataclass
class DataConfig:
    train: DataSource = field(default_factory=DataSource)
    """Training items."""
    eval: DataSource | None = None
    """Evaluation items (None = no eval set)."""
    allow_overlap: bool = False
    """Let the eval set share items with the training set (refused otherwise; see docs/reproduction.md)."""


@dataclass
class EnvConfig:
    name: str = "demo_writing"
    """Registered environment name (see comarl.envs.registry)."""
    args: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the environment's build(num_agents, **args)."""
    reward_scale: float = 1.0
    """Multiplies every reward before returns, advantages and early termination (processed = scale * raw + shift)."""
    reward_shift: float = 0.0
    """Added to every reward after reward_scale (the reference's reward_processor.shift)."""
    centralized_roles: int = 0
    """0 = one agent per role; R > 0 = one agent writes all R roles in tagged sections
    (comarl.preference.centralized)."""
    centralized_tag: str = "agent_{i}"
    """Section tag of the centralised actor; {i} is the role index."""
    centralized_failure_reward: float = 0.0
    """Reward of a centralised completion whose sections cannot be parsed."""
    reward_model: RewardModelSettings | None = None
    """MARLHF: a joint reward model fitted on a pairs file replaces the reward (docs/preference.md); None = off."""
    judge: JudgeSettings | None = None
    """A helper model (helpers.<name>) scores each joint response, and its score replaces the reward
    (docs/helpers.md); None = off."""
    on_error: str = "raise"
    """An item whose reward or transition raises: raise (stop, naming the item) | zero (score it 0, count it, go on)."""
    stages: Any = None
    """Team graph: agents in stages within a turn, each reading earlier agents' outputs (docs/teams.md); a list
    of stages, or {stages: [...], max_leaves: N}; None = what the environment declares (default: one stage)."""

    def validate(self) -> None:
        import math

        for key in ("reward_scale", "reward_shift"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"env.{key}: expected a finite number, got {value!r}")
        if self.reward_scale == 0:
            raise ConfigError("env.reward_scale: must not be 0 (every reward would become reward_shift)")
        if self.centralized_roles < 0 or "{i}" not in self.centralized_tag:
            raise ConfigError("env.centralized_roles must be >= 0 and env.centralized_tag must contain {i}, got "
                              f"{self.centralized_roles} and {self.centralized_tag!r}")
        if self.reward_model is not None:
            self.reward_model.validate()
        if self.judge is not None:
            self.judge.validate()
            if self.reward_model is not None:
                raise ConfigError("env.judge: the reward is the judge's or env.reward_model's; give one")
        if self.on_error not in ("raise", "zero"):
            raise ConfigError(f"env.on_error: must be raise or zero, got {self.on_error!r}")


@dataclass
class ExperimentConfig:
    agents: list[AgentConfig] = field(default_factory=lambda: [AgentConfig()])
    env: EnvConfig = field(default_factory=EnvConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    helpers: dict[str, HelperSpec] = field(default_factory=dict)
    """Frozen helper models by name (docs/helpers.md): a local model or a hosted endpoint each, used as the coding
    expert (env.args.expert: NAME), the comparator of the preference rounds (train.preference.iterative.comparator:
    helper) or a judge (env.judge.helper); never trained."""

    def validate(self) -> None:
        from .algorithms.base import get_algorithm

        if not self.agents:
            raise ConfigError("agents: at least one agent is required (N >= 1)")
        check_helper_names(self.helpers)
        for name, spec in self.helpers.items():
            spec.validate(f"helpers.{name}")
        it = self.train.preference.iterative
        if it.comparator == "helper" and it.comparator_helper and it.comparator_helper not in self.helpers:
            raise ConfigError(f"train.preference.iterative.comparator_helper: no helper {it.comparator_helper!r} "
                              f"(helpers: {', '.join(sorted(self.helpers)) or 'none are declared'})")
        if self.env.judge is not None and self.env.judge.helper and self.env.judge.helper not in self.helpers:
            raise ConfigError(f"env.judge.helper: no helper {self.env.judge.helper!r} "
                              f"(helpers: {', '.join(sorted(self.helpers)) or 'none are declared'})")
        for i, a in enumerate(self.agents):
            a.validate(f"agents.{i}")
        self.env.validate()
        if self.env.centralized_roles and len(self.agents) != 1:
            raise ConfigError(f"env.centralized_roles: a centralised actor is one agent; {len(self.agents)} are given")
        if self.env.stages is not None:
            from .core.stages import parse_stages

            if self.env.centralized_roles:
                raise ConfigError("env.stages: a centralised actor writes every role in one completion; "
                                  "it has no stages")
            parse_stages(self.env.stages, [a.name or f"agent{i}" for i, a in enumerate(self.agents)]).validate(
                len(self.agents), self.train.rollout.joint_mode)
        alg = get_algorithm(self.train.algorithm)
        self.train.validate(len(self.agents), alg.generations_needed(self.train))
        alg.check_config(self.train, self.agents)
        self.train.check_generator()


# ----------------------------------------------------------------- errors in the user's terms

_FROM_CONFIG = "_comarl_from_config"


def mark_from_config(train: TrainConfig) -> TrainConfig:
    """Record that ``train`` came from a config file or ``key=value`` overrides (``load_config``, the demo), so
    the errors it leads to name dotted keys (``train.run.resume=latest``); a TrainConfig built in Python hears
    about its arguments instead (:func:`python_wording`)."""
    object.__setattr__(train, _FROM_CONFIG, True)
    return train


def from_config(train: TrainConfig) -> bool:
    """Whether ``train`` came from a config file or overrides (:func:`mark_from_config`)."""
    return bool(train.__dict__.get(_FROM_CONFIG, False))


_KEY = re.compile(r"(?<![\w./-])(train|agents\.\d+)\.([a-z_]+(?:\.[a-z_]+)*)(?:=(\S+))?")
_DATA = re.compile(r"(?<![\w./-])data\.(train|eval)(?![\w.])")


def python_wording(message: str) -> str:
    """A message written in config keys, reworded for a Python user: a setting to make becomes the argument
    (``train.run.resume=latest`` -> ``TrainConfig(run=RunConfig(resume="latest"))``), a key the attribute
    (``train.run.output_dir`` -> ``TrainConfig.run.output_dir``, ``agents.0.lr`` -> ``agents[0].lr``),
    ``data.train`` -> ``train_dataset``. Other sections (``env.``, ``data.*.source``) stay as written."""
    def key(m: re.Match) -> str:
        where, path, value = m.group(1), m.group(2), m.group(3)
        tail = ""
        if value is not None:
            stripped = value.rstrip(".,;:)")
            value, tail = stripped, value[len(stripped):]
        if where.startswith("agents."):
            name = f"agents[{where.split('.')[1]}].{path}"
            return (f"{name} = {_python_value(value)}" if value is not None else name) + tail
        parts = path.split(".")
        if parts[0] in TrainConfig.ALIASES:  # an old flat name, in a message not yet reworded
            parts = TrainConfig.ALIASES[parts[0]].split(".") + parts[1:]
        if parts[0] not in {f.name for f in fields(TrainConfig)}:
            return m.group(0)
        if value is None:
            return f"TrainConfig.{'.'.join(parts)}" + tail
        if len(parts) == 1:
            return f"TrainConfig({parts[0]}={_python_value(value)})" + tail
        section = {**SECTIONS, "critic": CriticSettings, "preference": PreferenceSettings}.get(parts[0])
        if len(parts) == 2 and section is not None:
            return f"TrainConfig({parts[0]}={section.__name__}({parts[1]}={_python_value(value)}))" + tail
        return f"TrainConfig.{'.'.join(parts)} = {_python_value(value)}" + tail

    message = _KEY.sub(key, message)
    return _DATA.sub(lambda m: f"{m.group(1)}_dataset", message)


def _python_value(text: str) -> str:
    """A YAML value as Python source: true -> True, null -> None, 3 -> 3, latest -> "latest"."""
    if text in ("true", "false"):
        return text.capitalize()
    if text == "null":
        return "None"
    try:
        float(text)
        return text
    except ValueError:
        return f'"{text}"'


def refuse_hosted_agents(data: dict) -> None:
    """An agent is trained, so it cannot be a hosted endpoint (whose weights are not here): one line naming the key."""
    agents = plain(data.get("agents"))  # an override's value is still Written
    for i, a in enumerate(agents if isinstance(agents, list) else []):
        if isinstance(a, dict) and "endpoint" in a:
            raise ConfigError(f"agents.{i}.endpoint: a hosted endpoint cannot be trained (its weights are not "
                              f"here); declare it under helpers: and use it as a comparator, judge or expert "
                              f"(docs/helpers.md)")


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read a YAML experiment (or start from defaults), apply overrides, validate."""
    data: dict = {}
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"config file {p} does not exist")
        data = read_yaml(p) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: top level must be a mapping with agents/env/data/train")
    refuse_hosted_agents(data)
    data = canonical(ExperimentConfig, data)  # old keys into their sections (warned), so overrides of either meet
    overrides = [canonical_key(ExperimentConfig, ov.split("=", 1)[0].strip()) + "=" + ov.split("=", 1)[1]
                 if "=" in ov else ov for ov in overrides or []]
    apply_overrides(data, overrides)
    refuse_hosted_agents(data)
    cfg = from_dict(ExperimentConfig, data)
    mark_from_config(cfg.train)
    cfg.validate()
    return cfg
