#!/usr/bin/env bash
# Real-model runs of the published layouts (reports/formats/data, written by make_data.py) with the
# embedded default model, one after another at low priority. Every run resumes where it stopped.
set -u
cd "$(dirname "$0")/../.."
D=reports/formats/data
run() {
  echo "== $(date -u +%H:%M:%S) parley eval $*"
  nice -n 10 .venv/bin/parley eval --no-progress --limit 2 "$@"
  echo "== $(date -u +%H:%M:%S) exit $?"
}
run --dataset $D/controlmad_kks_3.jsonl --protocols single,cot --out reports/formats/kks
run --dataset $D/madke_fever_layout.json --protocols single,rag --out reports/formats/fever
run --dataset $D/madke_mmlu_med_layout.json --protocols single,rag --out reports/formats/mmlu-med
run --preset mad-ciar --protocols cot --dataset $D/ciar_layout.json --out reports/formats/ciar
run --preset madke --dataset $D/madke_nq_layout.json --out reports/formats/madke
# The same folder again with the vote baseline: the finished debates are kept, the votes added.
run --preset madke --same-budget --dataset $D/madke_nq_layout.json --out reports/formats/madke
