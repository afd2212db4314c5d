#!/usr/bin/env bash
# One device call of the lent GPU machine: lambda-returns' overflow check on CUDA, the quick kernel pass of
# scripts/bench_kernels.py (no torch.compile), then as many torch.compile baselines at the three T <= 32 shapes
# as fit, into the same JSON, all within TOTAL seconds (default 530). Files go to $OUT (default ./gpu-out),
# named after the GPU, the date and TAG: pass TAG=$(git rev-parse --short HEAD) from this machine, since the
# device copy's git log can be stale (its default is that copy's short commit).
# Needs the offline bundle (.gpu-bundle, from ../shared/gpu-node/make_bundle.sh) carried beside the checkout.
# With HOST_GATE=1 it first samples the host's speed (scripts/host_gate.py) and exits with the gate's code (3 when
# the host is slow) with nothing else run, so that the caller can give the machine back and try a fresh start.
# Usage: TAG=<commit> TOTAL=400 [HOST_GATE=1] bash scripts/gpu_quick_pass.sh   (console output also in $OUT/call-log.txt)
set -u
START=$(date +%s)
TOTAL=${TOTAL:-530}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/call-log.txt") 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .gpu-bundle/whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/.gpu-bundle/site:$PWD
TAG=${TAG:-$(git rev-parse --short HEAD 2>/dev/null || echo tree)}
nvidia-smi --query-gpu=name,clocks.current.sm,clocks.current.memory --format=csv
echo "$TAG (working tree)"
slug=$(python3 -c "import re, torch; print(re.sub(r'[^a-z0-9]+', '-', torch.cuda.get_device_name().lower()).strip('-'))")
day=$(date -u +%F)
json=$OUT/kernels-$slug-$day-$TAG-quick.json
if [ "${HOST_GATE:-0}" = 1 ]; then
  python3 scripts/host_gate.py --out "$OUT/host-gate-$slug-$day-$TAG.json"
  gate=$?  # 3: a slow host, worth a fresh start; anything else non-zero is a failure to look at
  [ "$gate" = 0 ] || { echo "host gate rc=$gate"; exit "$gate"; }
fi
timeout 60 python3 scripts/check_lambda_mixture.py --out "$OUT/lambda-mixture-check-$slug-$day-$TAG.json" | tail -5
echo "lambda rc=${PIPESTATUS[0]}"
timeout 330 python3 scripts/bench_kernels.py --quick --no-compile --out "$json" --md "${json%.json}.md"
echo "bench rc=$?"
left=$((TOTAL - ($(date +%s) - START) - 10))
echo "compile budget ${left} s"
if [ "$left" -gt 60 ]; then
  timeout "$left" python3 scripts/bench_kernels.py --quick --compile-into "$json" \
    --compile-shapes 4096x16,32768x16,16384x32 --md "${json%.json}.md"
  echo "compile rc=$?"
fi
