"""MADPO: multi-agent direct preference optimisation on joint responses (online).

Every step the current policy's rollout (K samples per agent, aligned or
cross joint actions, single- or multi-turn) gives each tree node J scored
joint actions; ``comarl.preference.tree_pairs`` turns them into (chosen,
rejected) joint pairs (``train.preference.pairs.pair_selection``, ties dropped,
``pairs_per_item`` per node), and every agent takes one optimizer step on

    -log sigmoid(beta * sum_i [(log pi_i(y_w) - log ref_i(y_w)) - (log pi_i(y_l) - log ref_i(y_l))])

(``losses.joint_dpo_loss``; ``reference_free`` drops the ref terms). Agent i's
gradient goes through its own log-probs only; the other agents' terms are the
values at the same weights, so all agents follow the gradient of one joint loss.
The reference is the agent's starting policy (``comarl.models.reference``: a frozen
copy, or the LoRA base with the adapter off).

Departures from CoMLRL 1.4.3's MADPO: CoMLRL's MADPO (and MADPO-iter) is
reference-free, comarl's default is not; ``train.preference.dpo.reference_free:
true`` gives CoMLRL's loss. Pairs come from the same breadth-first
rollout tree as every other algorithm (CoMLRL samples a separate candidate pool
per item) and are rebuilt from the current policy every step (online); pairs
are taken at every node of a multi-turn tree with the tree's joint returns as
scores; log-probs are at the agents' sampling temperature (as the reference's);
the step uses the loop's micro-batching, clipping, precision and data parallelism.

The three records differ from MAGRPO's in their update and their source, nothing
else: ``madpo`` takes the step's rollout and learns from its pairs
(``updates.OnlineDPO``); ``madpo_iter`` (iterative MADPO) draws its steps' pairs
from rounds with pairs on disk, replay of earlier rounds (``replay: decay_sample``
is CoMLRL's ``lambda_decay`` draw, ``comarl.preference.replay``) and a refreshed
reference (``preference.rounds.DPORounds``) and learns with ``updates.PairDPO``;
``madpo_offline`` walks a pairs file (``train.preference.pairs.pairs_in``,
``preference.pairs_file.PairsFile``) without sampling. None has an advantage estimator.
"""
from __future__ import annotations

from ..core.config_io import ConfigError
from .base import Algorithm, Parts, register_algorithm


def check_dpo(config, agents) -> None:
    """DPO keeps to its reference through its own loss: no KL term (``train.loss.kl_beta`` must be 0), and it has no
    per-token policy loss for truncated importance sampling to weigh (``train.loss.tis_cap``)."""
    if config.loss.kl_beta > 0:
        raise ConfigError(f"train.loss.kl_beta: {config.algorithm} keeps to its reference through the DPO loss; "
                          f"set train.preference.dpo.beta instead (kl_beta must be 0)")
    if config.loss.tis_cap is not None:
        raise ConfigError(f"train.loss.tis_cap: {config.algorithm} learns from a sequence-level DPO loss, which "
                          f"truncated importance sampling does not weigh; leave tis_cap null")


def check_rounds(config, agents) -> None:
    """Rounds write their pairs and checkpoints to ``train.run.output_dir``; ``reference: current`` copies the
    policy, which a LoRA agent's reference (its base with the adapter off) cannot be."""
    check_dpo(config, agents)
    if not config.run.output_dir:
        raise ConfigError(f"train.run.output_dir: {config.algorithm} writes each round's pairs and checkpoints there; "
                          f"set it")
    pref = config.preference
    if pref.iterative.reference == "current" and not pref.dpo.reference_free and any(_is_lora(a) for a in agents):
        raise ConfigError("train.preference.iterative.reference: 'current' needs a frozen copy of the policy; LoRA "
                          "agents' reference is the base with the adapter off (use reference: initial)")


def check_offline(config, agents) -> None:
    """The pairs file must exist and hold pairs (read again by the source); nothing is sampled, so no vLLM."""
    from ..preference.pairs_file import load_pairs_file

    check_dpo(config, agents)
    if config.hardware.generator == "vllm":
        raise ConfigError("train.hardware.generator: madpo_offline learns from a pairs file and samples nothing; "
                          "use generator: hf")
    load_pairs_file(config.preference.pairs.pairs_in)


def dpo_reference(config) -> bool:
    """DPO learns against each agent's frozen reference, unless ``reference_free`` (CoMLRL's form)."""
    return not config.preference.dpo.reference_free


def _is_lora(agent) -> bool:
    """An agent (config or built) whose reference is its own base with the adapter off."""
    cfg = getattr(agent, "config", agent)
    model = getattr(agent, "model", None) if hasattr(agent, "tokenizer") else getattr(cfg, "model", None)
    return getattr(cfg, "lora", None) is not None or (hasattr(model, "disable_adapter")
                                                      and hasattr(model, "peft_config"))


def online_update(parts: Parts):
    from ..updates import OnlineDPO

    cfg = parts.config
    return OnlineDPO(cfg.preference, cfg.rollout, cfg.loss, cfg.hardware, cfg.run.gradient_accumulation_steps,
                     cfg.run.seed, parts.rollout_settings())


def pair_update(parts: Parts):
    from ..updates import PairDPO

    cfg = parts.config
    return PairDPO(cfg.preference.dpo, cfg.loss, cfg.hardware)


def dpo_rounds(parts: Parts):
    from ..preference.rounds import DPORounds, RoundSampler

    return DPORounds(RoundSampler(parts.config, parts.prompt_batches(), parts.lockstep, parts.generator))


def pairs_file(parts: Parts):
    from ..compute import distributed as dist
    from ..preference.pairs_file import PairsFile, load_pairs_file

    cfg = parts.config
    path = cfg.preference.pairs.pairs_in
    pairs = load_pairs_file(path)  # raises unless the path names a file of pairs
    return PairsFile(pairs, path or "", parts.env, cfg.run.batch_size * dist.world_size(),
                     cfg.run.seed, cfg.run.shuffle, cfg.run.epochs, cfg.run.max_steps)


MADPO = register_algorithm(Algorithm("madpo", min_generations=2, update=online_update, check=check_dpo,
                                     reference=dpo_reference,
                                     summary="DPO on joint preference pairs of the rollout (online)"))
MADPO_ITER = register_algorithm(Algorithm("madpo_iter", min_generations=2, update=pair_update, source=dpo_rounds,
                                          check=check_rounds, reference=dpo_reference,
                                          summary="rounds of sampling, pairs written to disk, DPO with replay"))
MADPO_OFFLINE = register_algorithm(Algorithm("madpo_offline", min_generations=1, update=pair_update,
                                             source=pairs_file, check=check_offline, reference=dpo_reference,
                                             summary="DPO on a pairs JSONL file (train.preference.pairs.pairs_in)"))
