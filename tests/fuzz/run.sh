#!/usr/bin/env bash
# `make fuzz`: runs each fuzz target for FUZZ_SECONDS seconds (default 60), one after another (the
# machine is shared), on a copy of its seed corpus with its dictionary, and prints the executions,
# coverage and findings of each. New inputs and findings stay under BUILD_DIR/fuzz-runs/<target>/;
# the seed corpus in the repository is not touched.
# Usage: run.sh BUILD_DIR [TARGET...]   (targets: http_request sse path request_scan usage_scan config
#   json_body request_text, and the services' readers)
# Exit status: 1 when a target found something (its reproducer is in .../findings/).
set -uo pipefail
build=${1:?usage: run.sh BUILD_DIR [TARGET...]}
shift
seconds=${FUZZ_SECONDS:-60}
here=$(cd "$(dirname "$0")" && pwd)
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(http_request sse path request_scan usage_scan translate config json_body request_text mlflow_request qdrant_request feast_body)
declare -A DICT=([http_request]=http [path]=http [sse]=sse [request_scan]=json [usage_scan]=json [translate]=sse [config]=yaml
  [json_body]=json [request_text]=http [mlflow_request]=json [qdrant_request]=json [feast_body]=json)

found=0
rows=()
for t in "${targets[@]}"; do
  bin="$build/tests/fuzz/fuzz_$t"
  if [[ ! -x "$bin" ]]; then
    echo "run.sh: $bin is not built (cmake --build $build --target infera_fuzzers)" >&2
    exit 2
  fi
  dir="$build/fuzz-runs/$t"
  mkdir -p "$dir/corpus" "$dir/findings"
  echo "== fuzz_$t: ${seconds}s" >&2
  "$bin" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
    -dict="$here/dict/${DICT[$t]}.dict" -artifact_prefix="$dir/findings/" \
    "$dir/corpus" "$here/corpus/$t" >"$dir/log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/log" | grep -o '[0-9]*$' | tail -1)
  rate=$(grep -o 'exec/s: [0-9]*' "$dir/log" | tail -1 | grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' "$dir/log" | tail -1 | grep -o '[0-9]*$')
  inputs=$(find "$dir/corpus" -type f | wc -l)
  findings=$(find "$dir/findings" -type f | wc -l)
  if [[ $rc -ne 0 || $findings -gt 0 ]]; then
    found=1
    grep -m1 -E 'FUZZ FINDING|ERROR: (AddressSanitizer|libFuzzer)|runtime error' "$dir/log" >&2
    echo "   reproducer(s): $dir/findings/ (log: $dir/log)" >&2
  fi
  rows+=("$(printf '%-14s %12s %9s %7s %8s %9s' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "$inputs" "$findings")")
done
printf '%-14s %12s %9s %7s %8s %9s\n' target executions exec/s cov corpus+ findings
printf '%s\n' "${rows[@]}"
exit $found
