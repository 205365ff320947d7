#!/usr/bin/env bash
# Runs one go test selection verbosely for the real-broker targets and prints what matters:
# every line saying SKIPPED (scenarios that need kfake, and why), failures, and the summary. A
# passing package's output is otherwise hidden by go test, which would hide the SKIPPED lines too.
# On failure the whole log is printed. The log is kept in $TMPDIR.
#
#   kfaketest/realkafka/gotest.sh PACKAGE RUN-REGEXP TIMEOUT
set -uo pipefail
pkg=$1 run=$2 timeout=$3
log=$(mktemp "${TMPDIR:-/tmp}/tidemark-test-real.XXXXXX")
${GO:-go} test -race -count=1 -timeout "$timeout" -v -run "$run" "$pkg" >"$log" 2>&1
rc=$?
grep -E '^[a-z]+: .*SKIPPED|^(--- FAIL|FAIL|ok|panic:)' "$log"
if [[ $rc -ne 0 ]]; then
	echo "== $pkg failed (exit $rc); the whole log ($log):"
	cat "$log"
else
	echo "(verbose log: $log)"
fi
exit $rc
