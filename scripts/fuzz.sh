#!/usr/bin/env bash
# Runs every Go fuzz target for a bounded time (default 10s each). Their seed corpora under
# testdata/fuzz are also run by plain `go test`.
set -euo pipefail
fuzztime="${1:-10s}"
status=0
while IFS= read -r file; do
	pkg="./$(dirname "$file")"
	for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$file" | awk '{print $2}'); do
		echo "fuzz: $pkg $target for $fuzztime"
		if ! go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "$pkg"; then
			status=1
		fi
	done
done < <(grep -rl --include='*_test.go' -E '^func Fuzz' . | sed 's|^\./||' | sort)
exit $status
