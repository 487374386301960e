#!/usr/bin/env bash
# Native Triton checks on a CUDA machine, in one call (a lease is short: README "GPU").
#
#   benchmarks/triton/native_check.sh OUTDIR
#
# Installs the checkout (no dependencies: the machine's torch, triton, numpy, hypothesis), then runs
#   1. `kvconform run --backend triton --profile ci` with KVCONFORM_TRITON_DEVICE=cuda (native, no fallback),
#   2. the Triton kernel tests (`pytest tests/backends -k triton`),
# and leaves in OUTDIR: device.txt (GPU, versions, exit codes), list.txt, run.log, pytest.log and
# gpu-ci.tar.gz (the run's report, JUnit and counterexamples).
# Knobs: PY (python, default python3), JOBS (default 12), RUN_S / TEST_S (time limits, s),
# KVC_RUN_ARGS (extra `kvconform run` arguments, e.g. "--ops write_kv" for a dry run on CPU with
# KVCONFORM_TRITON_DEVICE=cpu).
set -u
out=${1:?usage: native_check.sh OUTDIR}
mkdir -p "$out"
PY=${PY:-python3}
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export KVCONFORM_TRITON_DEVICE=${KVCONFORM_TRITON_DEVICE:-cuda}
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
  "$PY" -c "import sys, numpy, torch, triton; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'torch', torch.__version__, 'triton', triton.__version__)"
} | tee "$out/device.txt"
"$PY" -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 \
  || { tail -20 "$out/install.log"; exit 1; }
"$PY" -m kvconform.conformance.cli list 2>&1 | tee "$out/list.txt"

start=$(date +%s)
# shellcheck disable=SC2086
timeout "${RUN_S:-300}" "$PY" -m kvconform.conformance.cli run --backend triton --profile ci \
  --jobs "${JOBS:-12}" --out /tmp/native-ci ${KVC_RUN_ARGS:-} >"$out/run.log" 2>&1
echo "kvconform run: rc=$? wall=$(( $(date +%s) - start ))s" | tee -a "$out/device.txt"
tail -45 "$out/run.log"
tar czf "$out/native-ci.tar.gz" -C /tmp native-ci 2>/dev/null

start=$(date +%s)
timeout "${TEST_S:-150}" "$PY" -m pytest -n 8 -q tests/backends -k triton >"$out/pytest.log" 2>&1
echo "pytest tests/backends -k triton: rc=$? wall=$(( $(date +%s) - start ))s" | tee -a "$out/device.txt"
tail -25 "$out/pytest.log"
