"""Which generator samples a run's completions (``--generator hf|vllm``), and vLLM for agents without a trainer.

``hf`` is Hugging Face ``generate`` (comarl's default). ``vllm`` samples with vLLM engines in the run's process
(docs/vllm.md): a trained run sets ``train.hardware.generator: vllm`` and scores with the trainer's generator, whose
engines follow the optimiser steps; a prompt-only run builds one :class:`VLLMGenerator` per agent
(:class:`PerAgentVLLM`), so the pipeline baseline can ask its agents one at a time. A condition vLLM serves
slower keeps HF, and its row says why (:func:`generator_for`).
"""
from __future__ import annotations

from typing import Sequence

GENERATORS = ("hf", "vllm")

LORA_ON_CPU = ("LoRA agents on the CPU engine sample slower than HF's mixed-adapter batch for short prompts "
               "(docs/vllm.md): kept on hf")


def generator_for(cond, opts) -> tuple[str, str | None]:
    """(the generator a run of ``cond`` uses, why it is not the one asked for, or None)."""
    if opts.generator not in GENERATORS:
        raise SystemExit(f"--generator: must be one of {', '.join(GENERATORS)}, got {opts.generator!r}")
    if opts.generator == "vllm" and cond.lora and opts.device == "cpu":
        return "hf", LORA_ON_CPU
    return opts.generator, None


def engine_settings(opts, seed: int):
    """The engines' settings, sized for a small shared CPU: a KV cache of ``opts.vllm_kv_cache_gib`` per engine,
    the run's torch threads, the run's seed."""
    from comarl.generation.vllm_settings import EngineSettings

    return EngineSettings(cpu_kv_cache_gib=opts.vllm_kv_cache_gib, cpu_threads=opts.threads or None, seed=seed)


class PerAgentVLLM:
    """A team generator over untrained agents: one :class:`VLLMGenerator` (one engine) per agent, so a call may
    name any sub-team (the pipeline baseline samples its first agent alone). Full-weight agents get one engine
    each either way; :meth:`close` stops them."""

    def __init__(self, agents: Sequence, settings):
        from comarl.generation.vllm_generator import VLLMGenerator

        self.generators: dict[int, object] = {}
        try:
            for a in agents:
                self.generators[id(a)] = VLLMGenerator([a], settings)
        except BaseException:
            self.close()
            raise

    def __call__(self, agents: Sequence, prompt_ids: list, k: int, **kw) -> list:
        missing = [a.name for a in agents if id(a) not in self.generators]
        if missing:
            raise ValueError(f"PerAgentVLLM: no engine for agent(s) {missing}")
        return [self.generators[id(a)].generate_for_agents([a], [p], k, **kw)[0] for a, p in zip(agents, prompt_ids)]

    def close(self) -> None:
        for g in self.generators.values():
            g.close()
        self.generators.clear()
