#!/usr/bin/env bash
# Regenerates the Go code of proto/flexiq/v1/flexiq.proto into
# grpcapi/flexiqv1, with pinned generators so that every machine writes the
# same bytes (grpcapi/flexiqv1's drift test runs this script and compares).
#
#   scripts/protogen.sh            install the tools if needed, regenerate in place
#   scripts/protogen.sh DIR        generate into DIR instead (DIR/grpcapi/flexiqv1/…)
#   scripts/protogen.sh --tools    only install the tools
#
# protoc comes from Debian (protobuf-compiler, with libprotobuf-dev for the
# well-known types), installed with apt when missing. The plugins are
# installed with go install into $GOBIN (default $(go env GOPATH)/bin):
# protoc-gen-go at the version of google.golang.org/protobuf in go.mod (the
# runtime the generated code runs on), protoc-gen-go-grpc at the version
# pinned below.
set -euo pipefail
cd "$(dirname "$0")/.."

PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
PROTOC_GEN_GO_VERSION=$(go list -m -f '{{.Version}}' google.golang.org/protobuf)
GOBIN=${GOBIN:-$(go env GOPATH)/bin}
# Where the well-known types (google/protobuf/timestamp.proto) live.
PROTO_INCLUDE=${PROTO_INCLUDE:-/usr/include}

if ! command -v protoc >/dev/null 2>&1 || [ ! -f "$PROTO_INCLUDE/google/protobuf/timestamp.proto" ]; then
	# PROTOGEN_NO_INSTALL (the drift test) refuses to touch the system.
	if [ -n "${PROTOGEN_NO_INSTALL:-}" ] || ! command -v apt-get >/dev/null 2>&1; then
		echo "protogen: protoc or $PROTO_INCLUDE/google/protobuf/timestamp.proto is missing; install protobuf-compiler and libprotobuf-dev" >&2
		exit 1
	fi
	echo "installing protobuf-compiler"
	if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq protobuf-compiler libprotobuf-dev >/dev/null
fi

# install_plugin NAME PACKAGE VERSION: go install it unless GOBIN already
# holds that version (each prints its version with --version).
install_plugin() {
	local name=$1 pkg=$2 version=$3 have
	have=$("$GOBIN/$name" --version 2>/dev/null | awk '{print $2}' || true)
	if [ "${have#v}" = "${version#v}" ]; then
		return
	fi
	echo "installing $name $version"
	GOBIN=$GOBIN GOFLAGS= go install "$pkg@$version"
}
install_plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
install_plugin protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"

if [ "${1:-}" = "--tools" ]; then
	exit 0
fi

out=${1:-.}
mkdir -p "$out"
protoc -I proto -I "$PROTO_INCLUDE" \
	--plugin=protoc-gen-go="$GOBIN/protoc-gen-go" \
	--plugin=protoc-gen-go-grpc="$GOBIN/protoc-gen-go-grpc" \
	--go_out="$out" --go_opt=module=github.com/flexiq/flexiq \
	--go-grpc_out="$out" --go-grpc_opt=module=github.com/flexiq/flexiq \
	proto/flexiq/v1/flexiq.proto
