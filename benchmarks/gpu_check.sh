#!/usr/bin/env bash
# The GPU checks of the stopwatch, in one short run (< 5 minutes) on a lent CUDA machine:
#   1. the tests, with CUDA present (the `--device cuda` refusal test skips itself there);
#   2. benchmarks/overhead.py on CUDA: llmbench vs bare generate() vs the seed's path, random Qwen2.5-0.5B, bf16
#      (stamps come after generate()'s tokens.cpu(), i.e. after the device synchronised);
#   3. `llmbench run` on CUDA: TTFT/TPOT, the roofline with the GPU's measured bandwidth, the offload check;
#   4. `llmbench sweep --compile` on CUDA: eager vs torch.compile'd decoding (static cache), bf16.
# Usage (repo root, on the GPU machine): bash benchmarks/gpu_check.sh   -> results under ${OUT:-gpu-out}/
set -euo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA'; print(torch.__version__, torch.cuda.get_device_name(0))" | tee "$OUT/device.txt"
# install llmbench without touching the machine's CUDA torch
python3 -m pip install -q --no-deps -e . && python3 -m pip install -q typer rich psutil pydantic scipy dashscope gguf accelerate pytest hypothesis 2>&1 | tail -2 || true
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.memory --format=csv | tee -a "$OUT/device.txt"
timeout 120 python3 -m pytest -q -x tests/test_stopwatch.py tests/test_runner.py 2>&1 | tail -3 | tee "$OUT/tests.txt"
timeout 150 python3 benchmarks/overhead.py --device cuda --dtype bfloat16 --rounds 5 --tokens 64 | tee "$OUT/overhead.txt"
timeout 120 llmbench run prompts/env_violations.txt --weights random --device cuda --dtype bfloat16 \
    --max-new-tokens 64 -o "$OUT/run-cuda.json" --overwrite -q | tee "$OUT/run.txt"
python3 -c "
import json; s = json.load(open('$OUT/run-cuda.json'))['summary']
print('TTFT', round(s['ttft_ms']['mean'], 2), 'ms; TPOT', round(s['tpot_ms']['mean'], 3), 'ms; bound',
      s['tpot_bound_ms'], 'ms; efficiency', s['tpot_efficiency'])" | tee -a "$OUT/run.txt"
timeout 240 llmbench sweep prompts/env_violations.txt --weights random --device cuda --dtype bfloat16 \
    --cache dynamic,static --compile --max-new-tokens 64 --rounds 2 -o "$OUT/sweep-cuda" -q | tee "$OUT/sweep.txt"
