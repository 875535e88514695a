"""The demo's cooperative writing task, in the spirit of the MAGRPO TL;DR set-up.

Agent 1 writes a short summary of a post, agent 2 a longer one. The team reward
climbs levels (each level only counts when the previous one is reached)::

    L1 (0.25): both responses have >= 1 word, w1 <= short_max, w2 <= long_max
    L2 (0.40): ratio w2 / w1 in [ratio_low, ratio_high] -> 0.40; linear ramp to 0
               at ratio_low - ramp and ratio_high + ramp
    L3 (0.35): distinct-word share of each response, mean, scaled by 0.35

w = whitespace-separated word count. Maximum 1.0; an empty, whitespace-only or
one-token-repeated response scores 0. The text sets are short posts written
for this project: ``DEMO_POSTS`` to train on, ``HELDOUT_POSTS`` (split
``"heldout"``) to score the agents on posts they never saw.
"""
from __future__ import annotations

from dataclasses import dataclass

from .base import FunctionEnv
from .registry import EnvEntry, register_env

DEMO_POSTS = [
    "My neighbour's dog barks every night at three and the whole street is losing sleep over it.",
    "I finally fixed the leaking kitchen tap after watching a short video and buying a two dollar washer.",
    "Our team shipped the new release a week late because the tests kept failing on one old laptop.",
    "I started running in the mornings and after a month I feel calmer and sleep much better.",
    "The bus to work was cancelled again so I walked and found a small bakery on the way.",
    "My grandmother taught me to bake bread and now I make a loaf every Sunday for the family.",
    "We adopted a shy cat from the shelter and after two weeks she sleeps on my keyboard.",
    "I lost my wallet at the market and a stranger returned it with every card still inside.",
    "The library in our town will close on Mondays because the budget was cut this year.",
    "I learned to play three chords on the guitar and wrote a silly song for my sister.",
    "Our garden produced far too many tomatoes this summer so we gave bags of them to neighbours.",
    "My old phone battery lasts two hours now and I cannot decide whether to repair or replace it.",
    "The power went out during the storm and we played cards by candle light all evening.",
    "I tried to cut my own hair during the holidays and now I wear a hat to every meeting.",
    "Our landlord raised the rent again and we are thinking about moving closer to the river.",
    "I volunteered at the food bank on Saturday and met people from every part of the city.",
]

# Never trained on: the demo's before/after score (``load_items(split="heldout")``).
HELDOUT_POSTS = [
    "My upstairs neighbour practises the drums every evening and the ceiling light shakes when he plays.",
    "I planted sunflowers along the fence in spring and now they are taller than the shed.",
    "The coffee machine at the office broke on Monday and nobody has fixed it for a whole week.",
    "I signed up for a pottery class and my first bowl came out of the kiln cracked in half.",
    "Our train stopped for an hour in a tunnel and a child started singing to calm everyone down.",
    "My brother borrowed my car for a weekend and returned it with an empty tank and a new dent.",
    "I gave up sugar in my tea three weeks ago and now sweet drinks taste far too strong to me.",
    "The old oak tree in the park fell during the night and the council says it was hollow inside.",
    "I found a box of my father's letters in the attic and read them all in one long afternoon.",
    "Our school raised money for a new playground by selling cakes every Friday for a term.",
    "My laptop fan makes a loud noise whenever I open more than two browser windows at once.",
    "I moved to a small village last year and still get lost on the way to the post office.",
    "A fox has been digging up our lawn every night and we cannot work out how it gets in.",
    "My friend and I cycled along the coast for four days and camped on a different beach each night.",
    "The new supermarket opened next to the old one and both now have queues out of the door.",
    "I tried to learn Spanish with an app but I mostly remember the words for apple and cheese.",
    "Our heating failed in January and we spent a week wearing coats inside the flat.",
    "My daughter wants a rabbit for her birthday but our building does not allow any pets.",
    "I painted the living room a bright yellow and now my partner says it feels like a waiting room.",
    "The bridge into town is closed for repairs so every trip now takes twenty extra minutes.",
    "I started keeping a diary again and writing a few lines each night helps me fall asleep.",
    "Our band played its first show in a tiny bar and only our parents and two strangers came.",
    "My phone fell into the lake while I was fishing and a diver found it the next morning.",
    "The neighbours built a treehouse for their kids and it now has better windows than our house.",
]


@dataclass(frozen=True)
class DemoReward:
    short_max: int = 12
    long_max: int = 48
    ratio_low: float = 2.0
    ratio_high: float = 3.0
    ramp: float = 1.5
    w1: float = 0.25
    w2: float = 0.40
    w3: float = 0.35

    def __call__(self, responses, item) -> float:
        words = [r.split() for r in responses]
        for w in words:
            if not w or len(set(w)) == 1 and len(w) > 1:
                return 0.0
        n1, n2 = len(words[0]), len(words[1])
        if n1 > self.short_max or n2 > self.long_max:
            return 0.0
        reward = self.w1
        ratio = n2 / n1
        if self.ratio_low <= ratio <= self.ratio_high:
            reward += self.w2
        else:
            gap = self.ratio_low - ratio if ratio < self.ratio_low else ratio - self.ratio_high
            reward += self.w2 * max(0.0, 1.0 - gap / self.ramp)
            return reward
        distinct = sum(len(set(w)) / len(w) for w in words) / 2
        return reward + self.w3 * distinct


def revise_prompts(state, responses) -> list[str]:
    """Multi-turn transition: each agent sees its own answer, its teammate's, and is asked to revise."""
    return [f"{state.item['text']}\nYour summary: {mine}\nYour teammate wrote: {other}\nRevise yours:"
            for mine, other in (responses, responses[::-1])]


def build(num_agents: int = 2, max_turns: int = 1, **args) -> FunctionEnv:
    if num_agents != 2:
        raise ValueError(f"demo_writing has two roles (short, long summary); got {num_agents} agents")
    reward = DemoReward(**args)
    return FunctionEnv(
        formatters=[lambda it: f"Summarise in one short sentence:\n{it['text']}\nSummary:",
                    lambda it: f"Summarise in detail, two to three times longer:\n{it['text']}\nSummary:"],
        reward_fn=reward, transition_fn=revise_prompts if max_turns > 1 else None, max_turns=max_turns)


def load_items(source: str | None = None, split: str | None = None, limit: int | None = None) -> list[dict]:
    """The training posts (``split`` None or "train") or the held-out ones ("heldout"); ``source`` is unused."""
    if split not in (None, "train", "heldout"):
        raise ValueError(f"demo_writing: split must be 'train' or 'heldout', got {split!r}")
    items = [{"text": t} for t in (HELDOUT_POSTS if split == "heldout" else DEMO_POSTS)]
    return items[:limit] if limit else items


register_env("demo_writing", EnvEntry(build, load_items, "two agents: short + longer summary of a post (demo)"))
