"""The fixed text of docs/results.md: its introduction, set-up and commands (``str.format`` fields filled by
``render``)."""

INTRO = """# Reproduction at small scale: does team training beat untrained teams and single agents?

The MAGRPO paper's claim is that training a team with MAGRPO beats untrained teams (one agent, two agents in
parallel, a pipeline) and single-agent training on collaborative writing and coding. This page checks that ordering
with comarl on a real model that runs offline on the project's 2-core CPU, SmolLM2-135M-Instruct. It is rendered by
`benchmarks/reproduce.py` from {sources}. Every number below is a row of those files (the last table names each
row's key).

**Read it as a small-scale check, not the paper's numbers.** A 135M model, 10 optimiser steps per trained run and
36 TL;DR-style posts written for this project (not real Reddit posts) are far from the paper's 1.7B-4B models,
thousands of steps and real posts.
"""

INTRO_V2 = """
**Grid v2** (issue 45) fixes what grid v1 could not conclude: every one of the 36 posts is held out once
per seed (3 folds of 12; a fold's runs train on the other 24); differences are paired by post and seed, with a
standard error that includes post-to-post variance; the tests are one-sided, Holm-corrected, and need a minimum
effect fixed in advance; the single writer is scored three ways; and the completions' lengths are on the page.
"""

SETUP = """## Set-up

- **Model**: {model}; every agent a full copy; CPU, float32.
- **Trained runs**: {steps} optimiser steps of 4 posts x K = 4 samples per agent (the same joint samples and steps
  for every method), learning rate {lr:g}, at most 48 new tokens per agent (the single writer, which writes both
  parts, 96), temperature {temp}, top-p {top_p}. MAAC: one central critic (a third SmolLM2).
- **Folds (grid v2)**: the 36 posts in a fixed order (the 24 demo posts of `comarl/envs/writing/demo_tldr.jsonl`,
  then the 12 of `tests/data/writing/tldr_sample.jsonl`); post i is held out in fold i mod 3. A fold's runs train on
  the other 24 posts. Each fold is refused unless its two sides share no post text, title, reference TL;DR or run
  of 8 words (`repro.tasks.tldr_fold`), and every row records its training and held-out post ids. The prompt-only
  rows score all 36 posts in one run.
- **Held-out score**: {hs} sampled completions per agent and post under the run's seed (so seeds differ for the
  prompt-only rows too); a post's score is the mean over its samples. A fold run's score *before training* is its
  prompt-only twin's (`parallel` for two agents, `single` for one; scored on all 36 posts) on the fold's 12 posts:
  the same model, prompts, sampling settings and seed, but other random draws (the draws depend on the whole
  batch), so before and after are two samples of the untrained and trained agents, not one draw measured twice.
  The curves' middle points are the trainer's own evaluation on the fold's posts (`eval_steps` 6).
- **Three scorings** of every kept sample (`repro.rescore`): *reward (fallback split)*, the paper preset's reward
  as the reference computes it (max 3.0); a single writer's one response is split at its `---` line, or, without
  one, by the reference's fallback cut at a 1:2.5 length ratio. *Reward (`---` required)*: the same, counted 0 for a
  single-writer response without the line; a team's agents write their parts separately, so for a team it is its
  reward. *ROUGE-L (summary sentence)*: ROUGE-L F1 (`rouge-score`, stemmed) of the summary sentence against the
  post's reference TL;DR, where the summary sentence is the first sentence of at least 3 words in the opening text
  (the single writer's response, a team's first agent's completion) before any `---` line; a sentence ends at `.`,
  `!` or `?` followed by a space, or at a line break, and a leading label such as `TITLE:` is dropped first (the
  135M writers often echo the post's `SUBREDDIT:` / `TITLE:` / `POST:` lines); none found scores 0. One rule for
  every condition, so no length ratio decides it. (The label and 3-word parts were added after reading the first
  v2 row's texts, before any comparison was computed.) Every row keeps every sample's texts, so any scoring can be
  recomputed from the results file.
- **Statistics** (`repro.stats`): a comparison's table is A - B per (seed, post). Its standard error is the {se}:
  post, seed, training run (seed x fold) and residual as random effects, estimated from the table's mean squares
  (a negative component taken as 0), with Satterthwaite's degrees of freedom; 95% intervals from Student's t; the
  test one-sided in the paper's direction, Holm-corrected over all of a task's tests. *Holds* needs that p below
  0.05, the interval above 0 and a difference of at least the minimum fixed before grid v2's rows were read (0.1
  reward, 0.03 ROUGE-L, 0.05 pass rate: `repro.analysis.MINIMUM`). A row with one seed has its s.e. over posts only
  (marked †) and gets no verdict.
- **TL;DR data**: `trl-lib/tldr` is not reachable offline and no package ships it, so there are **no real Reddit
  posts** here: the 36 TL;DR-style posts the repository holds were written for this project. The reward is the
  `paper` preset's (equal to the reference code's on stored cases, max 3.0).
- **Coding data (grid v1)**: CoopHumanEval from `../shared/data`, the paper's split (train `train[16:]`, held out
  `train[:16]`), preset `paper`, 2 turns with `level_feedback` (`sandbox_slice` 1), reward shift as the reference
  (-4 team, -2.1 single), temperature 0.6, top-p 0.6, 128 new tokens (the paper: 256), 2 problems x K = 2 per step.
- **Departures from the paper's set-up**, besides scale: the agents see SmolLM2's chat template (the paper's models
  read raw text; a 135M instruct model needs its template to answer at all), and the learning rate is raised for
  a run of {steps} steps.
- **Cost columns**: wall time of the whole run (model load, scoring, training with its evaluations), seconds per
  training step and training samples per second (the steps' own time, rollout + update, without the evaluations),
  peak RSS of the run's own process, and the 1-minute load average at its start and end: the machine is shared with
  other developers and the grid runs niced at one torch thread, so times vary with the load.
- **Generator** (who samples the rollouts and the held-out scores): {generators}. `hf` is Hugging Face `generate`;
  `vllm` is vLLM engines in the run's process (`--generator vllm`, docs/vllm.md).
"""

WHY_HF = """\
- **Why every row here samples with `hf`**: the grid keeps one generator so that two rows differ only in their
  method (vLLM draws other random numbers). On this CPU vLLM would not change the picture much: a full-weight
  demo-sized step took 0.79x HF's time with vLLM (benchmarks/README.md, one measurement). On a GPU, pass
  `--generator vllm`.
"""

COMMANDS = """## Commands

```bash
# grid v2 (resumes: runs already in the results file are skipped; a killed run loses only itself)
nice -n 15 python benchmarks/reproduce.py run --folds 3 --threads 1 \\
    --results benchmarks/results/results_v2.jsonl --logs runs/repro-v2/logs
# this page and the plots from the two results files alone
python benchmarks/reproduce.py render --results benchmarks/results/results.jsonl \\
    --v2 benchmarks/results/results_v2.jsonl
# grid v1 (issue 31): the 12-post split, TL;DR and CoopHumanEval
nice -n 10 python benchmarks/reproduce.py run --results benchmarks/results/results.jsonl --logs runs/repro/logs
# the coding comparison on one GPU (HumanEval's 164 problems held out; about 10 minutes on an H100/H200)
bash benchmarks/gpu_coding_grid.sh
```
"""
