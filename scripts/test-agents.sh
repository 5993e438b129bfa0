#!/usr/bin/env bash
# Installs the real coding-agent CLIs from npm (about 1.3 GB together) into $1 and runs
# test/agents against them: each CLI talks to a scripted loopback fake of its model API,
# with Vigil's hook installed by `vigil hook install`. Needs node and npm; no network
# beyond the npm registry, no API keys.
set -euo pipefail
dir=${1:?usage: test-agents.sh AGENTS_DIR}
mkdir -p "$dir"
if [ ! -x "$dir/node_modules/.bin/claude" ] || [ ! -x "$dir/node_modules/.bin/codex" ] || [ ! -x "$dir/node_modules/.bin/gemini" ]; then
	command -v npm >/dev/null || { echo "npm is required (apt-get install nodejs npm)"; exit 1; }
	npm install --no-audit --no-fund --prefix "$dir" @anthropic-ai/claude-code @openai/codex @google/gemini-cli
fi
for cli in claude codex gemini; do
	printf '%s: %s\n' "$cli" "$("$dir/node_modules/.bin/$cli" --version 2>/dev/null | head -1)"
done
VIGIL_BIN="$(pwd)/bin/vigil" VIGIL_AGENTS_BIN="$dir/node_modules/.bin" \
	go test -tags agents -count=1 -v -timeout 15m ./test/agents/
