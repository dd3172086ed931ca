#!/usr/bin/env bash
# The one command that runs every test, on a fresh Debian machine too:
# installs PostgreSQL, Redis and Chromium when missing (the test harness
# starts its own throwaway servers from their binaries, and a headless
# browser for the dashboard), then runs vet, staticcheck and the whole suite
# with the race detector and every backend (and the browser) required.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
command -v redis-server >/dev/null 2>&1 || need_pkgs+=(redis-server)
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
	need_pkgs+=(postgresql)
fi
# Headless Chromium, for the dashboard's browser tests (e2e/ui_test.go).
command -v chromium >/dev/null 2>&1 || need_pkgs+=(chromium)
# protoc and the well-known types, for the check that the generated gRPC
# code matches proto/flexiq/v1/flexiq.proto.
command -v protoc >/dev/null 2>&1 || need_pkgs+=(protobuf-compiler)
[ -f /usr/include/google/protobuf/timestamp.proto ] || need_pkgs+=(libprotobuf-dev)
if [ ${#need_pkgs[@]} -gt 0 ]; then
	echo "installing ${need_pkgs[*]}"
	if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
	# The packages start system services; the tests run their own.
	$SUDO service redis-server stop >/dev/null 2>&1 || true
	$SUDO service postgresql stop >/dev/null 2>&1 || true
fi
# The pinned protoc plugins (go install, skipped when already there).
./scripts/protogen.sh --tools

export FLEXIQ_REQUIRE_ALL_BACKENDS=1
echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "not gofmt'd: $unformatted"; exit 1; fi
echo "== go vet"
go vet ./...
echo "== staticcheck"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
echo "== go test -race"
go test -race -count=1 -timeout 20m ./...
echo "== Node.js SDK (sdk/node: npm ci && npm test, against a real fq-node)"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	echo "installing nodejs npm"
	if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
fi
(cd sdk/node && npm ci --no-audit --no-fund && npm test)
