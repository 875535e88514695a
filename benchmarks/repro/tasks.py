"""The grid's tasks: their data split (train / held-out, never overlapping), environments and settings.

TL;DR (preset ``paper``: the MAGRPO paper's reward, equal to the reference code's on stored cases). The hub set
``trl-lib/tldr`` cannot be reached offline and no package ships it, so the grid uses the only TL;DR-style posts the
repository holds, both written for this project (not real Reddit posts): the 24 demo posts bundled with comarl
(``comarl/envs/writing/demo_tldr.jsonl``) and the 12 of ``tests/data/writing/tldr_sample.jsonl``. Training: the
demo's 16 training posts + the first 8 sample posts (24); held-out: the demo's 8 held-out posts + the last 4
sample posts (12). ``split_check`` refuses any post on both sides.

CoopHumanEval (preset ``paper``, 2 turns, ``level_feedback``, the paper's ``sandbox_slice`` 1 and reward shift):
the paper's split, ``train[16:]`` for training and ``train[:16]`` held out, from ``../shared/data``.

Grid v2 (issue 45, ``--folds 3``): all 36 posts in one fixed order (:func:`tldr_posts`, each with a ``post_id``),
post ``i`` in fold ``i % 3``; a fold's run trains on the other 24 posts and is scored on its 12, so over three folds
every post is held out once per seed. :func:`tldr_fold` refuses a fold whose two sides share a post, a title, a
reference TL;DR or any run of 8 words. The prompt-only rows of v2 are scored on all 36 posts.

The paper's paper preset has exactly two writing agents; the single-agent rows need one writer that writes both
parts, so this module adds :class:`SingleWriterEnv` (the same paper reward on the two parts of one response) and,
for the prompt-only pipeline baseline, the second agent's prompt when it sees the first agent's text.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from comarl.envs.base import EnvState, Transition
from comarl.envs.registry import get_env

ROOT = Path(__file__).resolve().parents[2]

TLDR_DEMO_HELDOUT = 8
"""The demo's held-out posts: the last 8 of the 24 bundled ones (as ``comarl demo --task tldr``)."""
TLDR_SAMPLE_HELDOUT = 4
"""Held-out posts taken from the end of tests/data/writing/tldr_sample.jsonl (12 posts)."""
TLDR_FOLDS = 3
"""Grid v2's folds: post ``i`` of the 36 is held out in fold ``i % 3``."""

# ---------------------------------------------------------------- prompts (our own words)
SINGLE_TLDR_PROMPT = (
    "Summarize the post below in two paragraphs.\n\nPost:\n{text}\n\nGuidelines:\n"
    "- First paragraph: a short, factual summary of the main point in one sentence or a few.\n"
    "- Then a line containing only {marker}\n"
    "- Second paragraph: a detailed summary two to three times as long as the first, with a rich vocabulary "
    "and transition words that link its sentences.\n"
)
"""The single writer's prompt: both roles of the paper preset in one response, split at ``marker``."""

PIPELINE_TLDR_PROMPT = (
    "Write a detailed summary of the post below that builds on the short summary another writer gave.\n\n"
    "Post:\n{text}\n\nShort summary (from the other writer):\n{first}\n\nGuidelines:\n"
    "- Expand on the short summary: make yours two to three times as long.\n"
    "- Use a rich vocabulary with many different words.\n"
    "- Link your sentences with transition words so that the text flows.\n"
)
"""The pipeline baseline's second writer: the paper's detailed role, shown the first writer's summary."""

PIPELINE_CODE_NOTE = "\nThe helper `{helper}` that the other agent wrote:\n{first}\n"
"""Appended to the main agent's prompt in the coding pipeline baseline: it sees the helper's code."""

MARKER = "---"


def split_two(text: str, marker: str = MARKER, ratio: float = 2.5) -> tuple[str, str, bool]:
    """(first part, second part, marker found) of one response.

    At the first ``marker`` when there is one. Otherwise the reference single-agent evaluation's fallback, made
    deterministic: cut so that the second part is ``ratio`` times the first in characters (the reference draws
    the ratio from U(2, 3)), moved forward to the next space or newline so that no word is cut.

    ``split_two("a b\\n---\\nc d") == ("a b", "c d", True)``; ``split_two("aa bb cc dd ee ff gg")`` cuts after
    6 of 20 characters, moves to the space at 8: ``("aa bb cc", "dd ee ff gg", False)``.
    """
    if marker in text:
        first, second = text.split(marker, 1)
        return first.strip(), second.strip(), True
    text = text.strip()
    cut = int(len(text) / (1 + ratio))
    while cut < len(text) and text[cut] not in " \n":
        cut += 1
    return text[:cut].strip(), text[cut:].strip(), False


class SingleWriterEnv:
    """One writer writes both parts of the paper preset's TL;DR task; the paper reward scores the two parts.

    Composition: ``score(parts) -> (reward, metrics)`` is the two-agent environment's own scorer, so one reward
    function scores every row of the table.
    """

    max_turns = 1

    def __init__(self, score: Callable[[Sequence[str]], tuple[float, dict]], prompt: str = SINGLE_TLDR_PROMPT,
                 marker: str = MARKER):
        self.num_agents = 1
        self.score, self.prompt, self.marker = score, prompt, marker

    def reset(self, item: Mapping[str, Any]) -> EnvState:
        prompt = self.prompt.replace("{marker}", self.marker).replace("{text}", item["text"])
        return EnvState(item=item, prompts=(prompt,))

    def step_batch(self, states: Sequence[EnvState], responses: Sequence[Sequence[str]]) -> list[Transition]:
        out = []
        for _state, resp in zip(states, responses, strict=True):
            first, second, found = split_two(resp[0], self.marker)
            value, metrics = self.score([first, second])
            strict = value if found else 0.0  # what the response earns when only a real split counts
            out.append(Transition(value, True, None, {**metrics, "marker_found": float(found),
                                                      "reward_marker_only": strict}))
        return out


# ---------------------------------------------------------------- task records
@dataclass
class Task:
    """One task of the grid: items, environments and the settings its runs share.

    ``build_env(num_agents, for_training)``: the environment (for training with the paper's reward shift;
    scores are always taken on the raw reward). ``pipeline_prompt(state, first_text)``: the second agent's
    prompt in the pipeline baseline. ``headline``: the metric the tables rank by (``reward`` or an environment
    metric such as ``pass_rate``, comparable between one and two agents).
    """

    name: str
    train_items: list[dict]
    heldout_items: list[dict]
    build_env: Callable[[int, bool], Any]
    pipeline_prompt: Callable[[EnvState, str], str]
    headline: str = "reward"
    metrics: tuple[str, ...] = ()
    max_new_tokens: int = 48
    temperature: float = 0.7
    top_p: float = 0.9
    num_turns: int = 1
    num_generations: int = 4
    batch_size: int = 4
    train_extra: dict = field(default_factory=dict)
    """More train keys by section ({"loss": {"scale_advantages": True}})."""
    reward_max: dict = field(default_factory=dict)
    notes: str = ""


def split_check(name: str, train: list[dict], heldout: list[dict], key: str) -> None:
    """Refuse a split with an item on both sides (by ``key``: the post, the task id)."""
    shared = {it[key] for it in train} & {it[key] for it in heldout}
    if shared:
        first = f"{sorted(shared)[0]!r:.80}"
        raise AssertionError(f"{name}: {len(shared)} held-out item(s) are also training items: {first}")


def tldr_items() -> tuple[list[dict], list[dict]]:
    """(24 training posts, 12 held-out posts); see the module docstring."""
    entry = get_env("tldr")
    with resources.as_file(resources.files("comarl.envs.writing") / "demo_tldr.jsonl") as p:
        demo = entry.load_items(str(p), "train", None)
    sample = entry.load_items(str(ROOT / "tests" / "data" / "writing" / "tldr_sample.jsonl"), "train", None)
    train = demo[:-TLDR_DEMO_HELDOUT] + sample[:-TLDR_SAMPLE_HELDOUT]
    heldout = demo[-TLDR_DEMO_HELDOUT:] + sample[-TLDR_SAMPLE_HELDOUT:]
    split_check("tldr", train, heldout, "prompt")
    return train, heldout


def tldr_posts() -> list[dict]:
    """All 36 posts in the grid's fixed order (the demo's 24, then the sample's 12), each with a ``post_id``
    (``demo-00`` .. ``demo-23``, ``sample-00`` .. ``sample-11``); every prompt distinct (checked)."""
    entry = get_env("tldr")
    with resources.as_file(resources.files("comarl.envs.writing") / "demo_tldr.jsonl") as p:
        demo = entry.load_items(str(p), "train", None)
    sample = entry.load_items(str(ROOT / "tests" / "data" / "writing" / "tldr_sample.jsonl"), "train", None)
    posts = [{**it, "post_id": f"demo-{i:02d}"} for i, it in enumerate(demo)]
    posts += [{**it, "post_id": f"sample-{i:02d}"} for i, it in enumerate(sample)]
    if len({p["prompt"] for p in posts}) != len(posts):
        raise AssertionError("tldr: two of the 36 posts have the same prompt")
    return posts


def word_runs(text: str, n: int = 8) -> set[tuple[str, ...]]:
    """Every run of ``n`` consecutive words (lower case, letters, digits and apostrophes) in ``text``.

    ``word_runs("A b, c d", 3) == {("a", "b", "c"), ("b", "c", "d")}``."""
    words = re.findall(r"[a-z0-9']+", text.lower())
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def title_of(item: dict) -> str:
    m = re.search(r"^TITLE:(.*)$", item["prompt"], re.M)
    return m.group(1).strip().lower() if m else ""


def tldr_fold(fold: int, folds: int = TLDR_FOLDS) -> tuple[list[dict], list[dict]]:
    """(training posts, held-out posts) of one fold: post ``i`` of :func:`tldr_posts` is held out in fold
    ``i % folds``. Refuses a split whose sides share a prompt, post text, title, reference TL;DR or 8-word run."""
    if not 0 <= fold < folds:
        raise ValueError(f"tldr fold {fold}: must be in 0..{folds - 1}")
    posts = tldr_posts()
    heldout = [p for i, p in enumerate(posts) if i % folds == fold]
    train = [p for i, p in enumerate(posts) if i % folds != fold]
    name = f"tldr fold {fold}"
    for key in ("prompt", "text", "completion", "post_id"):
        split_check(name, train, heldout, key)
    if {title_of(p) for p in train} & {title_of(p) for p in heldout} - {""}:
        raise AssertionError(f"{name}: a held-out post has the title of a training post")
    seen: set = set()
    for p in train:
        seen |= word_runs(p["text"] + "\n" + p["completion"])
    for p in heldout:
        shared = word_runs(p["text"] + "\n" + p["completion"]) & seen
        if shared:
            raise AssertionError(f"{name}: held-out post {p['post_id']} shares the 8-word run "
                                 f"{' '.join(sorted(shared)[0])!r} with a training post")
    return train, heldout


def tldr_task(split: str = "") -> Task:
    """The TL;DR task. ``split``: "" the v1 split (:func:`tldr_items`); ``all``: grid v2's prompt-only rows, scored
    on all 36 posts (nothing trained); ``fold<k>``: grid v2's fold k (:func:`tldr_fold`)."""
    if split == "":
        train, heldout = tldr_items()
    elif split == "all":
        train, heldout = [], tldr_posts()
    elif split.startswith("fold") and split[4:].isdigit():
        train, heldout = tldr_fold(int(split[4:]))
    else:
        raise ValueError(f"tldr split {split!r}: expected '', 'all' or 'fold<k>'")
    entry = get_env("tldr")

    def build(num_agents: int, for_training: bool):
        pair = entry.build(2, preset="paper")
        return pair if num_agents == 2 else SingleWriterEnv(pair.score)

    def pipeline_prompt(state: EnvState, first: str) -> str:
        return PIPELINE_TLDR_PROMPT.replace("{text}", state.item["text"]).replace("{first}", first.strip())

    return Task("tldr", train, heldout, build, pipeline_prompt, headline="reward",
                metrics=("level", "length_ratio", "unique_ratio", "marker_found", "reward_marker_only"),
                max_new_tokens=48,
                temperature=0.7, top_p=0.9, reward_max={1: 3.0, 2: 3.0},
                notes="paper preset reward (0-3), first turn")


CODING_SHIFT = {1: -2.1, 2: -4.0}
"""The reference's reward shift before advantages: the single agent's maximum 2.1, the team's 4
(reproduction_coding.md)."""


CODING_FILES = {"coophumaneval": "coophumaneval/che_raw.json", "humaneval": "humaneval/HumanEval.jsonl.gz"}


def humaneval_heldout_items(data_dir: Path) -> tuple[list[dict], list[dict]]:
    """(training problems, held-out problems) of the GPU coding grid (``humaneval164``): all 164 HumanEval
    problems held out; trained on the CoopHumanEval problems that share no entry point, prompt or 8-word run of
    prompt or tests with any HumanEval problem (CoopHumanEval rewrites some HumanEval problems: 19 of its 82 share
    such a run)."""
    held = get_env("humaneval").load_items(str(Path(data_dir) / CODING_FILES["humaneval"]), None, None)
    pool = get_env("coophumaneval").load_items(str(Path(data_dir) / CODING_FILES["coophumaneval"]), None, None)
    seen: set = set()
    for h in held:
        seen |= word_runs(h["prompt"]) | word_runs(str(h.get("test_source") or ""))
    names = {h["entry_point"] for h in held} | {h["prompt"] for h in held}
    train = [c for c in pool if c["entry_point"] not in names and c["prompt"] not in names
             and not (word_runs(c["prompt"]) | word_runs(str(c.get("test_source") or ""))) & seen]
    for key in ("task_id", "prompt", "entry_point"):
        split_check("humaneval164", train, held, key)
    return train, held


def coding_task(data_dir: Path, name: str = "coophumaneval", heldout: int = 16, limit_train: int | None = None,
                sandbox_workers: int = 2) -> Task:
    """CoopHumanEval (or HumanEval) with the paper preset, 2 turns, ``level_feedback``; held out: the first
    ``heldout`` problems (the paper's eval split for CoopHumanEval), trained on the rest. ``humaneval164``: the GPU
    coding grid's split (:func:`humaneval_heldout_items`). ``sandbox_workers``: programs run at once."""
    if name == "humaneval164":
        train, held = humaneval_heldout_items(data_dir)
        entry = get_env("humaneval")
    else:
        entry = get_env(name)
        rows = entry.load_items(str(Path(data_dir) / CODING_FILES[name]), None, None)
        held, train = rows[:heldout], rows[heldout:]
    if limit_train:
        train = train[:limit_train]
    split_check(name, train, held, "task_id")
    args = dict(preset="paper", max_turns=2, feedback="level_feedback", sandbox_slice=1,
                sandbox={"test_timeout_s": 10, "total_timeout_s": 60}, workers=sandbox_workers)

    def build(num_agents: int, for_training: bool):
        env = entry.build(num_agents, mode="helper_main" if num_agents == 2 else "single", **args)
        if for_training:
            from comarl.envs.reward_processing import ProcessedRewardEnv

            return ProcessedRewardEnv(env, 1.0, CODING_SHIFT[num_agents])
        return env

    def pipeline_prompt(state: EnvState, first: str) -> str:
        return state.prompts[1] + PIPELINE_CODE_NOTE.format(helper="aux", first=first.strip())

    return Task(name, train, held, build, pipeline_prompt, headline="pass_rate",
                metrics=("pass_rate", "passed_all", "compiled"), max_new_tokens=128, temperature=0.6, top_p=0.6,
                num_turns=2, num_generations=2, batch_size=2,
                train_extra={"rollout": {"early_stop_sibling_mean": -0.2}, "loss": {"scale_advantages": True}},
                reward_max={1: 2.1, 2: 4.0}, notes="paper preset, 2 turns, level_feedback; score after the last turn")


def close_env(env) -> None:
    """Stop an environment's workers (the coding sandbox), through a reward wrapper too."""
    inner = getattr(env, "env", env)
    if hasattr(inner, "close"):
        inner.close()


def finite(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)
