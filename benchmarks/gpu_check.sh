#!/usr/bin/env bash
# The GPU checks, in one run on a lent CUDA machine. The step limits below add up to 480 s (8 minutes), plus
# the offline install (seconds); any failing step fails the script.
#   1. the tests of the stopwatch and the run loop, with CUDA present;
#   2. benchmarks/overhead.py on CUDA: llmbench vs bare generate() vs the seed's path, random Qwen2.5-0.5B, bf16
#      (stamps come after generate()'s tokens.cpu(), i.e. after the device synchronised);
#   3. `llmbench run` on CUDA: TTFT/TPOT, the roofline with the GPU's measured bandwidth, the offload check;
#   4. `llmbench sweep --compile` on CUDA: eager vs torch.compile'd decoding (static cache), bf16.
# The device machine reaches no network: carry the wheels llmbench needs beside the machine's own CUDA torch
# in .whl/ (see the device tool's README: pip download --no-deps ... -d .whl NAME==VERSION).
# Usage (repo root, on the GPU machine): bash benchmarks/gpu_check.sh   -> results under ${OUT:-gpu-out}/
set -euo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA'; print(torch.__version__, torch.cuda.get_device_name(0))" | tee "$OUT/device.txt"
# install llmbench without touching the machine's CUDA torch, from carried wheels only; a failure stops here
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || export PYTHONPATH=${PYTHONPATH:-}:$PWD
python3 -c "import llmbench.cli, llmbench.backends.inprocess, llmbench.drivers.sweep, typer, rich, scipy, pytest" \
  || { echo "llmbench's dependencies are missing on this machine: carry them in .whl/" >&2; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.memory --format=csv | tee -a "$OUT/device.txt"
timeout 90 python3 -m pytest -q -x tests/test_stopwatch.py tests/test_runner.py tests/test_loop.py 2>&1 | tee "$OUT/tests.txt"
timeout 120 python3 benchmarks/overhead.py --device cuda --dtype bfloat16 --rounds 5 --tokens 64 | tee "$OUT/overhead.txt"
timeout 90 python3 -m llmbench run prompts/env_violations.txt --weights random --device cuda --dtype bfloat16 \
    --max-new-tokens 64 -o "$OUT/run-cuda.json" --overwrite -q | tee "$OUT/run.txt"
python3 -c "
import json; s = json.load(open('$OUT/run-cuda.json'))['summary']
print('TTFT', round(s['ttft_ms']['mean'], 2), 'ms; TPOT', round(s['tpot_ms']['mean'], 3), 'ms; bound',
      s['tpot_bound_ms'], 'ms; efficiency', s['tpot_efficiency'])" | tee -a "$OUT/run.txt"
timeout 180 python3 -m llmbench sweep prompts/env_violations.txt --weights random --device cuda --dtype bfloat16 \
    --cache dynamic,static --compile --max-new-tokens 64 --rounds 2 -o "$OUT/sweep-cuda" -q | tee "$OUT/sweep.txt"
