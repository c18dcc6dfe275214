#!/usr/bin/env bash
# Build the reference pipeline's s5cmd from the Go module proxy at a pinned version.
# `go install github.com/peak/s5cmd/v2@VERSION` is refused by the proxy's deprecation
# lookup here, so build it from a throwaway module that requires the pinned version.
set -euo pipefail
version="$1" out="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
cd "$dir"
printf 'module s5cmdbuild\n\ngo 1.22\n\nrequire github.com/peak/s5cmd/v2 %s\n' "$version" > go.mod
printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/peak/s5cmd/v2"\n' > tools.go
go mod tidy
GOFLAGS=-trimpath go build -o "$out" github.com/peak/s5cmd/v2
echo "built s5cmd $version -> $out"
