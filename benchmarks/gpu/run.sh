#!/usr/bin/env bash
# The GPU check in one call of the device tool (see README.md beside this file): installs the
# wheels that prepare.py put in carry/wheels (no index there), then runs both parts of
# check.py on the GPU. Writes under $OUT: gpu-check.json, gpu-check.md, check.log and
# environment.txt. Arguments go to check.py (e.g. --tokens 128 --repeats 2).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-benchmarks/gpu/out}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    benchmarks/gpu/carry/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    python3 -m pip list 2>/dev/null | grep -iE '^(torch|transformers|tokenizers|pydantic|langchain-core) '
} >"$out/environment.txt" 2>&1 || true
python3 benchmarks/gpu/check.py --device cuda --part all --out "$out" "$@" 2>&1 | tee "$out/check.log"
