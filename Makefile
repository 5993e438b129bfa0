# Vigil: `make run` starts it, `make test` installs what the tests need and runs them all.
GO      ?= go
NPM     ?= npm
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
DESKTOP_TAGS := desktop,production,webkit2_41
STATICCHECK_VERSION := v0.8.2
FUZZTIME ?= 10s
GOBIN   := $(shell $(GO) env GOPATH)/bin

GO_SRC := $(shell find . -name '*.go' -not -path './frontend/*' -not -path './bin/*')
FE_SRC := $(shell find frontend -path frontend/node_modules -prune -o -path frontend/dist -prune -o -path frontend/e2e -prune -o -type f -print 2>/dev/null)
# The built console, committed so that `go install` embeds it (package ui).
UI_DIST := ui/dist

.PHONY: run build desktop frontend ui-check test lint test-go test-goinstall fuzz systest memtest test-frontend e2e smoke test-agents bench bench-replicas screenshots deps-frontend deps-test deps-desktop clean

## run: start Vigil: a desktop window when a display exists, else the headless server.
run:
	@if [ -n "$$DISPLAY$$WAYLAND_DISPLAY" ]; then \
		$(MAKE) --no-print-directory desktop && exec ./bin/vigil; \
	else \
		$(MAKE) --no-print-directory build && exec ./bin/vigil serve; \
	fi

## build: the headless-capable binary (no WebKit needed) with the console embedded
## (rebuilt first when frontend/ changed and npm is there; else the committed ui/dist).
build: $(UI_DIST)/index.html
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/vigil .

## desktop: the binary with the desktop window (needs GTK and WebKitGTK headers).
desktop: $(UI_DIST)/index.html
	bash scripts/deps-desktop.sh build
	$(GO) build -tags $(DESKTOP_TAGS) -ldflags '$(LDFLAGS)' -o bin/vigil .

## frontend: rebuild the console into ui/dist (commit the result with the sources).
frontend: deps-frontend
	cd frontend && $(NPM) run build

frontend/node_modules/.stamp: frontend/package.json frontend/package-lock.json
	@command -v $(NPM) >/dev/null || { echo "npm is required to build the console (apt-get install nodejs npm)"; exit 1; }
	cd frontend && for i in 1 2 3; do \
		$(NPM) ci --no-audit --no-fund --fetch-retries=5 --fetch-timeout=120000 && break; \
		[ $$i = 3 ] && exit 1; echo "npm ci failed; retrying"; sleep 5; \
	done
	touch $@

# Without npm the committed console is used as it is: a clean clone builds with Go alone.
$(UI_DIST)/index.html: $(FE_SRC)
	@if command -v $(NPM) >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory frontend; \
	else echo "npm not found: embedding the committed console in $(UI_DIST) as it is"; fi

## ui-check: fail when the committed console is not what frontend/ builds to.
ui-check: deps-frontend
	NPM=$(NPM) bash scripts/ui-check.sh

deps-frontend: frontend/node_modules/.stamp

deps-desktop:
	@bash scripts/deps-desktop.sh all

# The real MCP servers the MCP gateway tests run (test/mcp/package-lock.json).
test/mcp/node_modules/.stamp: test/mcp/package.json test/mcp/package-lock.json
	@command -v $(NPM) >/dev/null || { echo "npm is required for the MCP gateway tests (apt-get install nodejs npm)"; exit 1; }
	cd test/mcp && for i in 1 2 3; do \
		$(NPM) ci --no-audit --no-fund --fetch-retries=5 --fetch-timeout=120000 && break; \
		[ $$i = 3 ] && exit 1; echo "npm ci failed; retrying"; sleep 5; \
	done
	touch $@

## deps-test: everything the tests need: npm packages, chromium, staticcheck, Xvfb.
deps-test: deps-frontend test/mcp/node_modules/.stamp
	@bash scripts/deps-test.sh
	@test -x $(GOBIN)/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

## test: lint, Go tests with -race, bounded fuzzing, frontend unit and browser tests,
## and the desktop smoke test.
test: deps-test ui-check lint test-go test-goinstall fuzz systest test-frontend e2e smoke

lint: $(UI_DIST)/index.html
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './frontend/*')); \
		if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags no_ui . ./ui/
	$(GOBIN)/staticcheck ./...
	$(GOBIN)/staticcheck -tags no_ui . ./ui/

# VIGIL_REQUIRE_POSTGRES: the PostgreSQL tests fail, not skip, when the server is missing.
test-go: $(UI_DIST)/index.html
	VIGIL_REQUIRE_POSTGRES=1 $(GO) test -race -count=1 ./...
	$(GO) test -race -count=1 -tags no_ui -run 'TestConsole|TestNoUI' . ./ui/

## test-goinstall: `go install github.com/vigil-guardian/vigil@latest` from a module proxy made
## of the working tree, into an empty module cache, serves the committed console (15-35 s
## once the build cache is warm; other modules come from the local cache or proxy.golang.org).
test-goinstall:
	VIGIL_GOINSTALL=1 $(GO) test -count=1 -v -timeout 15m ./test/goinstall/

fuzz:
	@bash scripts/fuzz.sh $(FUZZTIME)

SOAK ?= 60s
## systest: crash test (SIGKILL under load) and bounded soak test against the built binary.
systest: build
	VIGIL_BIN=$(CURDIR)/bin/vigil VIGIL_SOAK=$(SOAK) VIGIL_REQUIRE_POSTGRES=1 $(GO) test -count=1 -v -timeout 20m ./test/

## memtest: 1000 held steps of 1 MiB against the built binary; the server's RSS must stay
## under 3x the held bytes (about 2 GB through the server, under a minute; not in `test`);
## and 200 stalled live clients replaying big steps (RSS growth bounded, about 30 s).
memtest: build
	VIGIL_BIN=$(CURDIR)/bin/vigil VIGIL_MEMTEST=1 $(GO) test -count=1 -v -timeout 5m -run 'TestHeldStepMemory|TestLiveReplayMemory' ./test/

test-frontend: deps-frontend
	cd frontend && $(NPM) run check && $(NPM) test

e2e: build
	cd frontend && VIGIL_BIN=$(CURDIR)/bin/vigil $(NPM) run e2e

## test-agents: the real Claude Code, Codex and Gemini CLI (from npm, ~1.3 GB, kept in
## AGENTS_DIR) against loopback fakes of their model APIs, guarded by `vigil hook`. Opt-in:
## not part of `make test`.
AGENTS_DIR ?= $(CURDIR)/.agents
test-agents: build
	bash scripts/test-agents.sh $(AGENTS_DIR)

## smoke: the desktop window under Xvfb (skipped, saying so, when its packages cannot be
## installed: not root and not present).
smoke: $(UI_DIST)/index.html
	@if bash scripts/deps-desktop.sh all; then \
		$(GO) build -tags $(DESKTOP_TAGS) -ldflags '$(LDFLAGS)' -o bin/vigil-desktop . && \
		bash scripts/desktop-smoke.sh bin/vigil-desktop bin/desktop-smoke.png; \
	else echo "desktop smoke: skipped (desktop packages missing)"; fi

# The OPA side of make bench's comparison: its own module (bench/opa), so OPA stays out of
# Vigil's go.mod; built once, again only when its sources change.
bin/opa-bench: bench/opa/main.go bench/opa/policy.rego bench/opa/go.mod bench/opa/go.sum
	cd bench/opa && $(GO) build -o ../../bin/opa-bench .

## bench: the load generator against the no-op floor, with and without 100 rules, the
## realistic rules at three session lengths (one agent also with the two guardians
## interleaved in 1 s slices) and against OPA, and many sessions.
bench: build bin/opa-bench
	$(GO) build -o bin/loadgen ./bench/loadgen
	./bin/loadgen -vigil ./bin/vigil -concurrency 1,8,32 -duration 3s -rounds 5
	./bin/loadgen -vigil ./bin/vigil -rules bench/rules100.yaml -concurrency 1,8,32 -duration 3s -rounds 5
	for n in 20 300 1000; do \
		./bin/loadgen -vigil ./bin/vigil -rules bench/rules-realistic.yaml -vs-no-rules -session-steps $$n -concurrency 1,32 -duration 3s -rounds 5 || exit 1; \
		./bin/loadgen -vigil ./bin/vigil -rules bench/rules-realistic.yaml -vs-no-rules -interleave 1s -session-steps $$n -concurrency 1 -duration 3s -rounds 5 || exit 1; \
	done
	./bin/loadgen -vigil ./bin/vigil -rules bench/rules-realistic.yaml -opa bin/opa-bench -concurrency 32 -duration 3s -rounds 5
	./bin/loadgen -vigil ./bin/vigil -sessions 100,20000,100000 -concurrency 32 -duration 3s -rounds 5

## screenshots: the README's tour pictures (docs/img/tour-*.png) from the real console: a
## temporary `vigil serve`, agents over /aos, chromium. Opt-in: not part of `make test`.
## Its binary is built without the git version, so the pictures do not name a commit.
screenshots: $(UI_DIST)/index.html
	$(GO) build -o bin/vigil-screenshots .
	cd frontend && VIGIL_BIN=$(CURDIR)/bin/vigil-screenshots node e2e/screenshots.mjs $(CURDIR)/docs/img

## bench-replicas: one guardian on SQLite vs one, two and three replicas on PostgreSQL
## (a throwaway server), agents spread round-robin over the replicas (docs/replicas.md).
bench-replicas: build
	$(GO) build -o bin/loadgen ./bench/loadgen
	$(GO) run ./bench/replicas -vigil ./bin/vigil -loadgen ./bin/loadgen -rules bench/rules100.yaml -concurrency 8,32 -duration 3s -rounds 3

clean:
	rm -rf bin frontend/node_modules frontend/dist
