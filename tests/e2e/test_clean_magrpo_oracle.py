"""The single-file MAGRPO (examples/clean_magrpo.py) as an independent oracle for comarl's trainer.

Two tiny agents on the README's task (a brief and a detailed summary, rewarded when the detailed one is two to
three times longer). comarl trains two steps; on each step's samples (the same prompt and completion ids, the
same team returns), the single file's own advantages, log-probs, loss and AdamW steps run on a copy of the
starting weights. After each step both must hold the same weights: the trainer's group baseline, token
normalisation, clipping and optimiser (through all its layers) equal twenty lines of plain PyTorch.
"""
import copy
import importlib.util
import sys
from pathlib import Path

import torch

import comarl

ROOT = Path(__file__).resolve().parents[2]


def _clean():
    spec = importlib.util.spec_from_file_location("clean_magrpo", ROOT / "examples" / "clean_magrpo.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass resolves its annotations through its module
    spec.loader.exec_module(mod)
    return mod


def test_two_trainer_steps_equal_the_single_file_on_the_same_samples():
    clean = _clean()
    args = clean.Args(k=4, max_new_tokens=12, lr=1e-3, max_grad_norm=1.0)
    env = comarl.FunctionEnv(formatters=[lambda it: clean.prompts_of(it["text"])[0],
                                         lambda it: clean.prompts_of(it["text"])[1]],
                             reward_fn=lambda responses, it: clean.reward(*responses))
    agents = [comarl.AgentConfig(model="tiny", max_new_tokens=args.max_new_tokens, lr=args.lr,
                                 model_kwargs={"seed": i}) for i in range(2)]
    cfg = comarl.TrainConfig(algorithm="magrpo", rollout=comarl.RolloutConfig(num_generations=args.k),
                             run=comarl.RunConfig(batch_size=2, max_steps=2, seed=0, progress_bar=False, report_to=[],
                                                  log_samples_steps=0),
                             loss=comarl.LossConfig(max_grad_norm=args.max_grad_norm),
                             hardware=comarl.HardwareConfig(micro_batch_size=64))
    t = comarl.Trainer(agents, env, [{"text": x} for x in clean.ITEMS], cfg)
    oracle = [copy.deepcopy(a.model) for a in t.agents]
    optimizers = [torch.optim.AdamW(m.parameters(), lr=args.lr, weight_decay=0.0) for m in oracle]
    steps = []
    real = t.update.step

    def step(team, batch, n):
        out = real(team, batch, n)
        steps.append(out)
        weights = [{k: v.detach().clone() for k, v in a.model.named_parameters()} for a in team.agents]
        for i, (model, opt) in enumerate(zip(oracle, optimizers)):
            [samples] = [r.agents[i] for r in out.rollouts]
            adv = clean.group_advantages(samples.returns.float()).reshape(-1)
            clean.update(model, opt, samples.prompt_ids, samples.completion_ids, adv,
                         t.agents[i].tokenizer.pad_token_id, args.max_grad_norm)
            for name, p in model.named_parameters():
                assert torch.allclose(p.detach(), weights[i][name], atol=2e-5, rtol=1e-4), (n, i, name)
        return out

    t.update.step = step
    t.train()
    assert len(steps) == 2
    moved = [any(r.agents[0].returns.std() > 0 for r in s.rollouts) for s in steps]
    assert any(moved), "a step whose returns all agree would leave both sides' weights alone: no test"
