#!/usr/bin/env bash
# Every shipped data file matches the hash recorded when it was copied from its source, and every
# file of a data set is listed (a file added without a hash fails too).
# Usage: data_hashes_test.sh DATA_DIR
set -uo pipefail
data="$1"
source "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
for set in alibaba-gpu-v2023 ngt-sift-5k; do
  dir="$data/$set"
  check "$set has SHA256SUMS" test -f "$dir/SHA256SUMS"
  check "$set files match their hashes" bash -c "cd '$dir' && sha256sum --quiet -c SHA256SUMS"
  listed=$(awk '{print $2}' "$dir/SHA256SUMS" | sort)
  present=$(cd "$dir" && find . -type f ! -name SHA256SUMS ! -name README.md | sed 's|^\./||' | sort)
  check "$set lists every file it ships" test "$listed" = "$present"
done
check "the trace has 2 node lists and 24 pod lists" \
  test "$(ls "$data/alibaba-gpu-v2023/csv" | grep -c '^openb_node_list_')-$(ls "$data/alibaba-gpu-v2023/csv" | grep -c '^openb_pod_list_')" = 2-24
check "the SIFT set has 5,000 vectors" test "$(wc -l <"$data/ngt-sift-5k/sift-dataset-5k.tsv")" = 5000
finish
