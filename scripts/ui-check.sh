#!/usr/bin/env bash
# ui-check: the console committed in ui/dist must be what the sources in frontend/ build to,
# since `go install` embeds ui/dist as committed. The Vite build is reproducible, so a fresh
# build (into a temporary directory, leaving the tree alone) is compared byte for byte.
#
# Two ways to be out of date, both failing with the same advice:
#  - ui/dist differs from a fresh build of frontend/ (sources changed, console not rebuilt);
#  - frontend/ is as committed but ui/dist is not (rebuilt, e.g. by `make build`, and the
#    result not committed), which is how a stale commit shows once make has rebuilt it.
set -euo pipefail
cd "$(dirname "$0")/.."
NPM=${NPM:-npm}
advice="the committed console is out of date: run \`make frontend\` and commit ui/dist"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! (cd frontend && "$NPM" run build -- --outDir "$tmp/dist" --emptyOutDir) >"$tmp/log" 2>&1; then
	cat "$tmp/log"
	echo "ui-check: the console in frontend/ does not build" >&2
	exit 1
fi
if ! diff -rq "$tmp/dist" ui/dist >"$tmp/diff"; then
	sed -e "s#$tmp/dist#fresh build#g" "$tmp/diff" | head -n 20
	echo "$advice" >&2
	exit 1
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1 &&
	[ -z "$(git status --porcelain -- frontend)" ] && [ -n "$(git status --porcelain -- ui/dist)" ]; then
	git status --short -- ui/dist | head -n 20
	echo "$advice" >&2
	exit 1
fi
echo "ui-check: ui/dist is the build of frontend/"
