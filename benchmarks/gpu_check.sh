#!/usr/bin/env bash
# Every GPU path of llmbench, proved in one run on a CUDA machine without network (about 8 minutes at most: the
# step limits below add up to 465 s). It stops at the first thing that does not hold, with one line naming the
# step and the step's log tail, and writes every figure to one file, $OUT/gpu_check.txt, that
# benchmarks/README.md quotes:
#   0. CUDA is there (otherwise: one line "no CUDA: ..." and exit 2, before anything else);
#   1. the stopwatch, loop and telemetry tests with CUDA present;
#   2. `run --device auto --dtype auto` picks CUDA and bfloat16; TTFT, TPOT, the roofline; energy per token,
#      clocks, clock events and memory peaks recorded (machine.gpu); the CPU's own cost (run.cpu);
#   3. the offload check refuses a model forced partly onto the CPU and disk (exit 2, the offload named);
#   4. eager vs --compile TPOT (sweep: dynamic cache eager, static cache compiled);
#   5. `serve` on the GPU streams to the endpoint client (`run --endpoint`), the server's own stamps arrive;
#   6. `ab` between two GPU workers (the same command on both sides): an A/A inside its interval.
# The machine may have only its preinstalled CUDA torch: carry the rest as wheels in .whl/, made here by
# `python scripts/gpu-wheels.py --python-version X.Y` (the device's Python; ~47 MiB), installed with
# --no-index --no-deps. A dependency still missing is named at once.
# Usage (repo root): bash benchmarks/gpu_check.sh     env: OUT (default gpu-out), PYTHON (default python3),
#   GPU_CHECK_DEVICE=cpu: a rehearsal of every step on the CPU (small, no compile, no GPU claims) that proves the
#   script itself where there is no GPU.
set -Eeuo pipefail
PYTHON=${PYTHON:-python3}
OUT=${OUT:-gpu-out}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
cd "$ROOT"
say() { echo "gpu_check: $*" >&2; }

# 0. CUDA, before anything is installed or written
if [ "$DEVICE" = cuda ]; then
  if ! command -v "$PYTHON" >/dev/null 2>&1; then say "no CUDA check possible: $PYTHON not found (set PYTHON)"; exit 2; fi
  "$PYTHON" "$HERE/gpu_check.py" cuda >/dev/null 2>"/tmp/gpu_check.cuda.$$" || {
    line=$(tail -n 1 "/tmp/gpu_check.cuda.$$"); rm -f "/tmp/gpu_check.cuda.$$"
    echo "${line:-gpu_check: no CUDA: $PYTHON could not ask torch}" >&2; exit 2; }
  rm -f "/tmp/gpu_check.cuda.$$"
fi

mkdir -p "$OUT"
FIG="$OUT/gpu_check.txt"
: >"$FIG"
STEP="install"
LOG="$OUT/install.log"
on_error() {
  say "FAILED at step '$STEP' (log: $LOG)"
  [ -f "$LOG" ] && tail -n 15 "$LOG" | sed 's/^/  | /' >&2
  exit 1
}
trap on_error ERR
step() { STEP=$1; LOG="$OUT/$2.log"; : >"$LOG"; echo "== $STEP" >&2; }
# the checks' own failure line is the loudest; the log keeps everything
check() { "$PYTHON" "$HERE/gpu_check.py" "$@" --device "$DEVICE" --figures "$FIG" >>"$LOG" 2> >(tee -a "$LOG" >&2); }

if compgen -G ".whl/*.whl" >/dev/null; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu_check_site .whl/*.whl >>"$LOG" 2>&1
  export PYTHONPATH=/tmp/gpu_check_site:$ROOT${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
mods="llmbench.cli llmbench.backends.inprocess llmbench.serve llmbench.drivers.sweep typer rich pydantic msgspec
      transformers accelerate fastapi uvicorn httpx httpx_sse tiktoken pytest"
[ "$DEVICE" = cuda ] && mods="$mods pynvml"
"$PYTHON" - $mods >>"$LOG" 2>&1 <<'EOF' || { say "missing on this machine: $(tail -n 1 "$LOG") (carry wheels in .whl/: scripts/gpu-wheels.py)"; exit 1; }
import importlib, sys
missing = []
for m in sys.argv[1:]:
    try:
        importlib.import_module(m)
    except Exception as e:
        missing.append(f"{m} ({type(e).__name__})")
print(", ".join(missing) if missing else "all imports found")
sys.exit(1 if missing else 0)
EOF
LLMBENCH=("$PYTHON" -m llmbench)
if [ "$DEVICE" = cuda ]; then
  "$PYTHON" "$HERE/gpu_check.py" cuda --figures "$FIG" >/dev/null
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.memory,power.limit \
    --format=csv >>"$FIG" 2>&1 || true
  PROMPTS=prompts/env_violations.txt TOKENS=64 ROUNDS=2 DTYPE=bfloat16 COMPILE=--compile N=8
else  # the rehearsal: 3 prompts, a few tokens, no torch.compile (minutes on a CPU)
  PROMPTS=prompts/env_violations.txt TOKENS=6 ROUNDS=1 DTYPE="" COMPILE="" N=3
fi
# the sweep and ab measure the first N prompts (each setup, each side, each repeat goes over them)
grep -v '^[[:space:]]*$' prompts/env_violations.txt | head -n "$N" >"$OUT/prompts-first$N.txt"
SHORT=$OUT/prompts-first$N.txt
[ "$DEVICE" = cuda ] || PROMPTS=$SHORT
rm -rf "$OUT/sweep" "$OUT/ab" "$OUT/tiny-model"  # this script's own outputs of an earlier try
echo "# llmbench gpu_check, $(date -u +%FT%TZ), device $DEVICE, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')" >>"$FIG"

step "1. stopwatch, loop and telemetry tests" tests
timeout 60 "$PYTHON" -m pytest -q -x -p no:cacheprovider tests/unit/test_stopwatch.py tests/unit/test_loop.py \
  tests/unit/test_telemetry.py >>"$LOG" 2>&1
tail -n 1 "$LOG" | sed 's/^/tests: /' >>"$FIG"

step "2. run --device auto --dtype auto: CUDA, bfloat16, energy and clocks recorded" run
timeout 60 "${LLMBENCH[@]}" run "$PROMPTS" --weights random --device auto --dtype auto --max-new-tokens "$TOKENS" \
  --ignore-eos -o "$OUT/run-auto.json" --overwrite -q >>"$LOG" 2>&1
check run "$OUT/run-auto.json" ${DTYPE:+--dtype "$DTYPE"} --title "run --device auto --dtype auto"

step "3. the offload check refuses weights on the CPU and disk" offload
"$PYTHON" "$HERE/gpu_check.py" tiny-model "$OUT/tiny-model" >>"$LOG" 2>&1
MAP=$("$PYTHON" "$HERE/gpu_check.py" offload-map --device "$DEVICE")
rc=0
timeout 45 "${LLMBENCH[@]}" run "$PROMPTS" --model "$OUT/tiny-model" --device "$DEVICE" --device-map "$MAP" \
  --max-new-tokens 4 -o "$OUT/offloaded.json" --overwrite -q >>"$LOG" 2>&1 || rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "on disk: model.layers.0" "$LOG" || [ -e "$OUT/offloaded.json" ]; then
  say "step '$STEP': an offloaded model was not refused (exit $rc, expected 2 and the offload named)"; false
fi
printf '## offload check\nrefused (exit 2): %s\n\n' "$(grep -m1 "weights are offloaded" "$LOG")" >>"$FIG"

step "4. eager vs --compile TPOT" sweep
timeout 150 "${LLMBENCH[@]}" sweep "$SHORT" --weights random --device "$DEVICE" --dtype "${DTYPE:-float32}" \
  --cache dynamic,static $COMPILE --max-new-tokens "$TOKENS" --ignore-eos --rounds "$ROUNDS" -o "$OUT/sweep" -q \
  >>"$LOG" 2>&1
check sweep "$OUT/sweep"

step "5. serve on the device -> run --endpoint" serve
PORT=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"${LLMBENCH[@]}" serve --weights random --device "$DEVICE" ${DTYPE:+--dtype "$DTYPE"} --port "$PORT" \
  >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 60); do  # 30 s for the server to load
  "$PYTHON" -c "import httpx,sys; sys.exit(httpx.get('http://127.0.0.1:$PORT/health').status_code != 200)" \
    2>/dev/null && break
  kill -0 $SERVER 2>/dev/null || { cat "$OUT/server.log" >>"$LOG"; say "step '$STEP': the server exited"; false; }
  sleep 0.5
done
timeout 30 "${LLMBENCH[@]}" run "$PROMPTS" --endpoint "http://127.0.0.1:$PORT" --max-new-tokens "$TOKENS" \
  --ignore-eos -o "$OUT/endpoint.json" --overwrite -q >>"$LOG" 2>&1
kill $SERVER; wait $SERVER 2>/dev/null || true
check endpoint "$OUT/endpoint.json"

step "6. ab between two workers on the device: an A/A inside its interval" ab
WORKER="$PYTHON -m llmbench worker --weights random --device $DEVICE ${DTYPE:+--dtype $DTYPE}"
timeout 90 "${LLMBENCH[@]}" ab "$SHORT" --base "$WORKER" --head "$WORKER" --max-new-tokens "$TOKENS" \
  --ignore-eos --repeats 2 -o "$OUT/ab" -q >>"$LOG" 2>&1
check ab "$OUT/ab"

trap - ERR
echo "gpu_check: every step held on $DEVICE; figures in $FIG" >&2
