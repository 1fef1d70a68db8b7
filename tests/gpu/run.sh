#!/usr/bin/env bash
# The CUDA tier: every test marked `gpu` or `cuda` (evaluator models on CUDA, cosyvoice3 on a GPU: one device for every
# stage, bf16/tf32 steps, DDP over NCCL on one GPU, reload), in one process, under
# 8 minutes on one GPU. Run it from the repository root of an installed checkout (make install-test, with a CUDA
# build of torch where the GPU needs one): bash tests/gpu/run.sh. On a machine without CUDA every test skips.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-.venv/bin/python}"
"$PYTHON" - <<'PY'
import ctranslate2, torch
print(f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}, "
      f"devices: {torch.cuda.device_count()}, ctranslate2 cuda devices: {ctranslate2.get_cuda_device_count()}")
PY
started=$(date +%s)
timeout 480 "$PYTHON" -m pytest -q -p no:cacheprovider -n 0 -m "gpu or cuda" -ra --durations=10 tests "$@"
echo "gpu tier ran in $(( $(date +%s) - started )) s"
