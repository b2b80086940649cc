#!/usr/bin/env bash
# Install the engines llmbench measures beside transformers, into the active Python environment, offline-safe
# (package registries only):
#   - OpenVINO GenAI and ONNX Runtime GenAI (+ its model builder's needs): llmbench[openvino,onnxruntime];
#   - llama-cpp-python, compiled from source (PyPI has only an sdist) for the instruction sets this CPU reports:
#     -march=native would also bake in AMX on some Xeons, which the guest can't run (SIGILL at the first eval), so
#     native detection is off and the sets are named from /proc/cpuinfo;
#   - llama.cpp's convert_hf_to_gguf.py (+ conversion/, gguf-py/), which llama-cpp-python's wheel does not ship,
#     taken from the same source archive;
#   - optimum-intel's OpenVINO exporter in a venv of its own: it pins transformers<5.6, older than llmbench's.
# Tools go to ${XDG_DATA_HOME:-~/.local/share}/llmbench/tools, where llmbench looks for them
# (LLMBENCH_LLAMA_CPP_CONVERTER and LLMBENCH_OPTIMUM_CLI override).
# Usage: scripts/install-engines.sh [all|llamacpp|openvino|onnxruntime ...]   (from the repository root)
# Takes ~6 min on 2 cores, most of it compiling llama.cpp.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_CPP_PYTHON=${LLAMA_CPP_PYTHON:-0.3.36}
OPTIMUM_INTEL=${OPTIMUM_INTEL:-2.2.0}
TOOLS=${XDG_DATA_HOME:-$HOME/.local/share}/llmbench/tools
want=${*:-all}
has() { [[ " $want " == *" all "* || " $want " == *" $1 "* ]]; }
mkdir -p "$TOOLS"

if has openvino || has onnxruntime; then
  extras=()
  has openvino && extras+=(openvino)
  has onnxruntime && extras+=(onnxruntime)
  echo "== llmbench[$(IFS=,; echo "${extras[*]}")]"
  pip install -q -e ".[$(IFS=,; echo "${extras[*]}")]"
fi

if has llamacpp; then
  src=$(mktemp -d)
  trap 'rm -rf "$src"' EXIT
  echo "== llama-cpp-python $LLAMA_CPP_PYTHON from source (for this CPU's instruction sets; minutes)"
  pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_CPP_PYTHON" -d "$src"
  archive=$(ls "$src"/llama_cpp_python-*.tar.gz)
  if [ "$(uname -m)" = x86_64 ]; then
    # The instruction sets this CPU reports, named one by one: the kind's CPU varies (AVX-512 BF16 on one day,
    # AVX2 only on another), and -march=native would also take AMX, which the guests can't run. CI builds on the
    # machine that runs it; elsewhere set CMAKE_ARGS yourself.
    cpu=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
    on() { local f; for f in "$@"; do [[ "$cpu" == *" $f "* ]] || { echo OFF; return; }; done; echo ON; }
    export CMAKE_ARGS=${CMAKE_ARGS:-"-DGGML_NATIVE=OFF -DGGML_AVX=$(on avx) -DGGML_AVX2=$(on avx2) -DGGML_FMA=$(on fma) \
-DGGML_F16C=$(on f16c) -DGGML_AVX512=$(on avx512f avx512cd avx512vl avx512dq avx512bw) \
-DGGML_AVX512_VNNI=$(on avx512_vnni) -DGGML_AVX512_BF16=$(on avx512_bf16) -DGGML_AVX_VNNI=$(on avx_vnni) \
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"}
    echo "   CMAKE_ARGS=$CMAKE_ARGS"
  fi
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) pip install -q --no-cache-dir "$archive"
  pip install -q -e ".[llamacpp]"  # gguf, sentencepiece (llama-cpp-python is satisfied by the build above)
  echo "== llama.cpp's converter -> $TOOLS/llama.cpp"
  rm -rf "$TOOLS/llama.cpp" && mkdir -p "$TOOLS/llama.cpp"
  top=$(basename "$archive" .tar.gz)  # an sdist's one top folder is named like the archive
  tar -xzf "$archive" -C "$TOOLS/llama.cpp" --strip-components=3 \
    "$top/vendor/llama.cpp/convert_hf_to_gguf.py" "$top/vendor/llama.cpp/conversion" "$top/vendor/llama.cpp/gguf-py"
fi

if has openvino; then
  echo "== optimum-intel $OPTIMUM_INTEL (OpenVINO's exporter) -> $TOOLS/ov-export"
  python3 -m venv "$TOOLS/ov-export"
  "$TOOLS/ov-export/bin/pip" install -q --upgrade pip
  torch=$(python -c 'import importlib.metadata as m; print(m.version("torch").split("+")[0])' 2>/dev/null || echo 2.13.0)
  "$TOOLS/ov-export/bin/pip" install -q "torch==$torch" "optimum-intel[openvino]==$OPTIMUM_INTEL"
  # optimum-intel requires torchvision, whose PyPI build does not load beside the CPU torch (and breaks
  # transformers' imports); exporting a language model never uses it
  "$TOOLS/ov-export/bin/pip" uninstall -q -y torchvision
fi
llmbench engines
