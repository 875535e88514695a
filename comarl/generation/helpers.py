"""The run's helper models (``helpers:`` in a config): built once, placed on their own devices, handed to the
components that use them, freed between uses where the config says so.

A helper is a ``seams.TextGenerator`` (``helper(prompts) -> texts``, one completion per prompt) with three more
members: ``use()`` (a context: the model stays loaded inside it, for a round's several calls), ``metrics()`` (its
counters, logged every step as ``helpers/<name>/...``) and ``close()``.

- :class:`LocalHelper`: a Hugging Face causal LM built like an agent (``AgentConfig`` from the spec, on
  ``spec.device``), frozen, loaded on first use; with ``free_between_uses`` the model is dropped after each use
  (and CUDA's cached blocks handed back) and read again at the next. Its tiny weights and its sampling come from
  its own seed, so using a helper never moves the run's random stream.
- ``hosted.HostedModel``: an OpenAI or Anthropic endpoint.
- :class:`Helpers`: the run's helpers by name; the Team holds it (``Team.helpers``), ``experiment.build_env``
  injects members into environments, the comparator of the iterative rounds takes one from it.

A comparator writes every agent's side of a pair: :func:`helper_seats` gives the rollout one seat per agent (a
text-only stand-in with a byte "tokenizer") and :func:`helper_generator` is the team generator that sends the
seats' prompts to the helper (``generation/team.py``'s contract).
"""
from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import torch

from ..core.config_io import ConfigError
from .helper_settings import HelperSpec, check_helper_names
from .hf import Completions


def free_memory() -> None:
    """Collect what nothing references any more and hand CUDA's cached blocks back."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class LocalHelper:
    """A frozen Hugging Face causal LM on ``spec.device`` (module docstring).

    Attributes:
        loads: how many times the model was built (1 for a resident helper; one per use with
            ``free_between_uses``).
        calls: generate calls so far.
    """

    def __init__(self, name: str, spec: HelperSpec):
        if spec.model is None:
            raise ConfigError(f"helpers.{name}: a local helper needs model")
        self.name, self.spec = name, spec
        self.loads = self.calls = self.tokens_out = 0
        self._agent: Any = None
        self._depth = 0  # open use() scopes

    def __repr__(self) -> str:
        return f"LocalHelper({self.name!r}, model={self.spec.model!r}, device={self.spec.device!r})"

    @property
    def loaded(self) -> bool:
        return self._agent is not None

    def agent_config(self):
        from ..models.agents import AgentConfig

        s = self.spec
        return AgentConfig(model=s.model, name=f"helper:{self.name}", max_new_tokens=s.max_new_tokens,
                           temperature=s.temperature, top_p=s.top_p, chat_template=s.chat_template,
                           system_prompt=s.system_prompt, structured=False, dtype=s.dtype, device=s.device,
                           model_kwargs=dict(s.model_kwargs))

    def load(self):
        """The built agent (building it on ``spec.device`` when not loaded), frozen and in eval mode."""
        if self._agent is None:
            from ..models.agents import build_agents

            with self._own_stream(0):
                agent = build_agents([self.agent_config()])[0]
            agent.model.requires_grad_(False)
            agent.model.eval()
            self._agent, self.loads = agent, self.loads + 1
        return self._agent

    @contextlib.contextmanager
    def _own_stream(self, offset: int) -> Iterator[None]:
        """The helper's own random stream (seed, offset); the run's streams are as they were afterwards."""
        dev = torch.device(self.spec.device)
        with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" and torch.cuda.is_available() else []):
            torch.manual_seed(self.spec.seed * 1_000_003 + offset)
            yield

    @contextlib.contextmanager
    def use(self) -> Iterator["LocalHelper"]:
        """Keep the model loaded across the calls inside (a round's sampling); released on exit when
        ``free_between_uses``."""
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1
            if self._depth == 0:
                self.release()

    def __call__(self, prompts: Sequence[str]) -> list[str]:
        from .hf import generate

        if not prompts:
            return []
        with self.use():
            agent = self.load()
            self.calls += 1
            with self._own_stream(self.calls):
                comp = generate(agent, agent.encode_prompts(list(prompts)), 1)
            self.tokens_out += sum(len(ids) for ids in comp.ids)
            return list(comp.texts)

    def release(self) -> None:
        """With ``free_between_uses`` (and no ``use()`` scope open): drop the model and hand its memory back."""
        if self.spec.free_between_uses and self._depth == 0 and self._agent is not None:
            self._agent = None
            free_memory()

    def metrics(self) -> dict[str, float]:
        return {f"helpers/{self.name}/calls": float(self.calls), f"helpers/{self.name}/loads": float(self.loads),
                f"helpers/{self.name}/tokens_out": float(self.tokens_out)}

    def close(self) -> None:
        self._agent = None


def build_helper(name: str, spec: HelperSpec):
    """A helper from its settings (validated here): a hosted endpoint's client (the key read now) or a local
    model (built on first use, or by :meth:`Helpers.place`)."""
    spec.validate(f"helpers.{name}")
    if spec.endpoint is not None:
        from .hosted import HostedModel

        return HostedModel(name, spec)
    return LocalHelper(name, spec)


@dataclass
class Helpers:
    """The run's helpers by name (``helpers:``), held by the Team."""

    by_name: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def build(cls, specs: Mapping[str, HelperSpec] | None) -> "Helpers":
        specs = dict(specs or {})
        check_helper_names(specs)
        return cls({name: build_helper(name, spec) for name, spec in specs.items()})

    def get(self, name: str, key: str):
        """The helper ``name``; a ConfigError naming ``key`` (the config key that named it) when there is none."""
        if name not in self.by_name:
            have = ", ".join(sorted(self.by_name)) or "none are declared"
            raise ConfigError(f"{key}: no helper {name!r} (helpers: {have}); declare it under helpers: "
                              f"(docs/helpers.md)")
        return self.by_name[name]

    def add(self, name: str, helper: Any, key: str) -> None:
        if name in self.by_name:
            raise ConfigError(f"{key}: a helper named {name!r} is declared already; name it instead")
        self.by_name[name] = helper

    def __contains__(self, name: str) -> bool:
        return name in self.by_name

    def __iter__(self):
        return iter(self.by_name.values())

    def __len__(self) -> int:
        return len(self.by_name)

    def place(self) -> None:
        """Build the local helpers that stay loaded (``free_between_uses: false``) on their devices now, as the
        agents are (the others are read at each use)."""
        for h in self:
            if isinstance(h, LocalHelper) and not h.spec.free_between_uses:
                h.load()

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for h in self:
            out.update(h.metrics())
        return out

    def close(self) -> None:
        for h in self:
            h.close()


# ----------------------------------------------------------------- a helper in the agents' seats (comparators)
class ByteCodec:
    """A seat's "tokenizer": UTF-8 bytes as ids, so texts pass the rollout's token plumbing unchanged."""

    eos_token_id = None
    pad_token_id = None

    @staticmethod
    def encode(text: str) -> list[int]:
        return list(str(text).encode("utf-8"))

    @staticmethod
    def decode(ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return bytes(ids).decode("utf-8", errors="replace")

    @staticmethod
    def get_vocab() -> dict[str, int]:
        return {f"<0x{i:02X}>": i for i in range(256)}


@dataclass
class SeatConfig:
    structured: bool = False
    """A helper writes free text: a prompt's output schema is not forced on it."""


@dataclass
class HelperSeat:
    """Agent ``index``'s place in a rollout that a helper writes (a comparator's side of the pairs)."""

    helper: Any
    name: str
    index: int
    config: SeatConfig = field(default_factory=SeatConfig)
    tokenizer: ByteCodec = field(default_factory=ByteCodec)
    model: Any = None
    device: str = "cpu"

    def encode_prompts(self, texts: list[str]) -> list[list[int]]:
        return [ByteCodec.encode(str(t)) for t in texts]


def helper_seats(helper: Any, agents: Sequence[Any]) -> list[HelperSeat]:
    """One seat per agent, every one written by ``helper``."""
    return [HelperSeat(helper, f"{getattr(a, 'name', f'agent{i}')}@helper", i) for i, a in enumerate(agents)]


def helper_generator(agents: Sequence[HelperSeat], prompt_ids: list[list[list[int]]], k: int, greedy: bool = False,
                     **_: Any) -> list[Completions]:
    """The team generator of helper seats: every seat's prompts, K times each, in one call per helper (so a hosted
    helper's ``concurrency`` spreads all of them); one ``Completions`` per seat, in seat order. The helper samples
    at its own temperature (``greedy`` and the agents' batching keys do not apply)."""
    helpers: dict[int, Any] = {}
    asks: dict[int, list[str]] = {}
    for seat, ids in zip(agents, prompt_ids):
        helpers[id(seat.helper)] = seat.helper
        asks.setdefault(id(seat.helper), []).extend(ByteCodec.decode(p) for p in ids for _ in range(k))
    answers = {key: iter(helpers[key](texts)) for key, texts in asks.items()}
    out = []
    for seat, ids in zip(agents, prompt_ids):
        texts = [next(answers[id(seat.helper)]) for _ in range(len(ids) * k)]
        out.append(Completions(list(ids), [ByteCodec.encode(t) for t in texts], [False] * len(texts), texts, k))
    return out


__all__ = ["ByteCodec", "HelperSeat", "Helpers", "LocalHelper", "build_helper", "free_memory", "helper_generator",
           "helper_seats"]
