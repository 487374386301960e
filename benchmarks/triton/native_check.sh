#!/usr/bin/env bash
# Native Triton checks on a CUDA machine, in one call (a lease is short: README "GPU", issue 30).
#
#   benchmarks/triton/native_check.sh OUTDIR
#
# Installs the checkout (no dependencies: the machine's torch, triton, numpy, hypothesis; plus any wheels in
# $WHEELS, e.g. fla-core and einops for the gated-delta comparison: `pip download fla-core==0.6.0 einops
# --no-deps -d wheels/` here, carried with the tree), then runs the steps of $STEPS in order:
#   ci      `kvconform run --backend triton --profile ci` natively (KVCONFORM_TRITON_DEVICE=cuda, no fallback)
#   tests   the Triton kernel tests (`pytest tests/backends -k triton`)
#   scale   `kvconform run --backend triton --profile scale` (must pass: exit 0)
#   mutant  the int32-offset mutant under the scale profile's KV-write and attention tests (must fail: exit 1)
#   bench   benchmarks/triton/bench_kernels.py (the goals table) -> OUTDIR/bench.json
#   sweep   benchmarks/triton/sweep_attention.py --quick (SWEEP_ONLY: which sweeps) -> OUTDIR/sweep.json
# and leaves in OUTDIR: device.txt (GPU, versions, one verdict line per step), a log per step, the runs'
# reports (native-ci.tar.gz, scale.tar.gz, mutant.tar.gz: report, JUnit, counterexamples), bench.json.
# Knobs: PY (python, default python3), STEPS (default "ci tests scale mutant bench"), JOBS (default 12),
# TEST_JOBS (default 8),
# time limits in seconds CI_S (300) TEST_S (150) SCALE_S (420) MUTANT_S (300) BENCH_S (300) SWEEP_S (420),
# KVC_RUN_ARGS (extra arguments of the ci run), SCALE_PROFILE (default scale), BENCH_ARGS, TEST_K (a -k
# expression narrowing the kernel tests).
# A dry run on a CPU machine checks the script itself (nothing it prints there is a GPU figure):
#   KVCONFORM_TRITON_DEVICE=cpu SCALE_PROFILE=scale-smoke KVC_RUN_ARGS="--ops write_kv" BENCH_ARGS=--smoke \
#   TEST_K=runtime PY=.venv/bin/python benchmarks/triton/native_check.sh /tmp/dry
# (there the mutant step reads UNEXPECTED: scale-smoke pools stay far below 2**31 elements, so it passes).
set -u
out=${1:?usage: native_check.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
PY=${PY:-python3}
STEPS=${STEPS:-"ci tests scale mutant bench"}
SCALE_PROFILE=${SCALE_PROFILE:-scale}
MUTANT=kvconform.backends.triton.offset_mutant:make_backend
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export KVCONFORM_TRITON_DEVICE=${KVCONFORM_TRITON_DEVICE:-cuda}
{
  date -u +%FT%TZ
  git rev-parse HEAD 2>/dev/null | sed 's/^/commit /'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
  "$PY" -c "import sys, numpy, torch, triton; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'torch', torch.__version__, 'triton', triton.__version__)"
} | tee "$out/device.txt"
"$PY" -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 \
  || { tail -20 "$out/install.log"; exit 1; }
if [ -n "${WHEELS:-}" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-deps --no-index "$WHEELS"/*.whl >>"$out/install.log" 2>&1 \
    && echo "installed wheels: $(cd "$WHEELS" && ls *.whl | tr '\n' ' ')" | tee -a "$out/device.txt"
fi
"$PY" -m kvconform.conformance.cli list --backend triton 2>&1 | tee "$out/list.txt"

# verdict NAME RC EXPECTED SECONDS: one line in device.txt
verdict() {
  local ok=OK
  [ "$2" = "$3" ] || ok="UNEXPECTED (expected exit $3)"
  echo "$1: rc=$2 wall=$4s $ok" | tee -a "$out/device.txt"
}

for step in $STEPS; do
  start=$(date +%s)
  case $step in
    ci)
      # shellcheck disable=SC2086
      timeout "${CI_S:-300}" "$PY" -m kvconform.conformance.cli run --backend triton --profile ci \
        --jobs "${JOBS:-12}" --out "$out/native-ci" ${KVC_RUN_ARGS:-} >"$out/ci.log" 2>&1
      rc=$?; verdict "kvconform run --profile ci (native)" $rc 0 $(( $(date +%s) - start ))
      tail -8 "$out/ci.log"; tar czf "$out/native-ci.tar.gz" -C "$out" native-ci 2>/dev/null && rm -rf "$out/native-ci" ;;
    tests)
      # shellcheck disable=SC2086
      timeout "${TEST_S:-150}" "$PY" -m pytest -n "${TEST_JOBS:-8}" -q tests/backends -k "triton${TEST_K:+ and $TEST_K}" \
        >"$out/pytest.log" 2>&1
      rc=$?; verdict "pytest tests/backends -k triton" $rc 0 $(( $(date +%s) - start )); tail -5 "$out/pytest.log" ;;
    scale)
      timeout "${SCALE_S:-420}" "$PY" -m kvconform.conformance.cli run --backend triton --profile "$SCALE_PROFILE" \
        --jobs 1 --out "$out/scale" >"$out/scale.log" 2>&1
      rc=$?; verdict "kvconform run --profile $SCALE_PROFILE (triton)" $rc 0 $(( $(date +%s) - start ))
      tail -12 "$out/scale.log"; tar czf "$out/scale.tar.gz" -C "$out" scale 2>/dev/null && rm -rf "$out/scale" ;;
    mutant)
      # exit 1 expected: the int32-offset mutant must fail where offsets pass 2**31 (a crash counts as failing)
      timeout "${MUTANT_S:-300}" "$PY" -m kvconform.conformance.cli run --backend "$MUTANT" \
        --profile "$SCALE_PROFILE" --ops write_kv,ragged_paged_attention --jobs 1 --out "$out/mutant" \
        -- -k "past_int32_offsets" >"$out/mutant.log" 2>&1
      rc=$?; verdict "int32-offset mutant, --profile $SCALE_PROFILE" $rc 1 $(( $(date +%s) - start ))
      tail -12 "$out/mutant.log"; tar czf "$out/mutant.tar.gz" -C "$out" mutant 2>/dev/null && rm -rf "$out/mutant" ;;
    bench)
      # shellcheck disable=SC2086
      timeout "${BENCH_S:-300}" "$PY" benchmarks/triton/bench_kernels.py --out "$out/bench.json" ${BENCH_ARGS:-} \
        >"$out/bench.log" 2>&1
      rc=$?; verdict "bench_kernels.py ${BENCH_ARGS:-}" $rc 0 $(( $(date +%s) - start ))
      "$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); [print(f'  {k}: {v[\"figure\"]} (goal {v[\"direction\"]} {v[\"goal\"]}, met {v[\"met\"]})') for k, v in r['goals'].items()]; print('  errors:', r['errors'])" "$out/bench.json" 2>&1 | tee -a "$out/device.txt" ;;
    sweep)
      timeout "${SWEEP_S:-420}" "$PY" benchmarks/triton/sweep_attention.py --quick --only "${SWEEP_ONLY:-prefill,decode_b1,mla}" \
        --out "$out/sweep.json" >"$out/sweep.log" 2>&1
      rc=$?; verdict "sweep_attention.py --quick" $rc 0 $(( $(date +%s) - start )); grep -A3 "^==" "$out/sweep.log" ;;
    *) echo "unknown step $step (steps: ci tests scale mutant bench sweep)" | tee -a "$out/device.txt" ;;
  esac
done
