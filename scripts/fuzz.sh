#!/usr/bin/env bash
# Runs every Go fuzz target for a bounded time (default 10s each). Their seed corpora under
# testdata/fuzz are also run by plain `go test`.
#
# A target fails when the fuzzer finds a failing input (it writes it under testdata/fuzz and
# says "Failing input written"). When the time is up while a worker is still inside one
# slow input, `go test -fuzz` reports "context deadline exceeded" without any failing
# input; that is the fuzzer stopping, not a finding, and is reported as such.
set -uo pipefail
fuzztime="${1:-10s}"
status=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
while IFS= read -r file; do
	pkg="./$(dirname "$file")"
	for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$file" | awk '{print $2}'); do
		echo "fuzz: $pkg $target for $fuzztime"
		if go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "$pkg" 2>&1 | tee "$log"; then
			continue
		fi
		if grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log"; then
			echo "fuzz: $target: stopped inside a slow input when the time was up; no failing input found"
			continue
		fi
		status=1
	done
done < <(grep -rl --include='*_test.go' -E '^func Fuzz' . | sed 's|^\./||' | sort)
exit $status
