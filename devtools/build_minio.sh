#!/usr/bin/env bash
# Build the pinned MinIO from the Go module proxy into BIN, once (`make minio`, `make demo`).
#
#   devtools/build_minio.sh VERSION BIN                 build it now, or wait for the build under way
#   devtools/build_minio.sh --background VERSION BIN    start the build detached and return at once
#
# One build at a time: each holds an flock on BIN's directory's .minio-build.lock, so a second
# caller (`make test` while `make demo`'s background build runs) waits for the first and then
# finds the binary. The binary is built into a scratch dir and renamed into place, so BIN is
# either absent or complete. The background build is niced (the demo keeps the CPU), in its own
# session (a Ctrl-C of the demo does not stop it), and logs to BIN's directory's
# ../minio-build.log (.cache/minio-build.log). devtools/demo.py reads the same lock and log.
set -euo pipefail

background=0
if [ "${1:-}" = "--background" ]; then background=1; shift; fi
[ $# -eq 2 ] || { echo "usage: $0 [--background] VERSION BIN" >&2; exit 2; }
version=$1 bin=$2
bindir=$(dirname "$bin")
mkdir -p "$bindir"
lock=$bindir/.minio-build.lock
log=$(dirname "$bindir")/minio-build.log

[ -x "$bin" ] && exit 0

if [ "$background" = 1 ]; then
  if ! command -v go >/dev/null; then
    echo "MinIO is not built and Go is not installed: the demo runs on moto server; make test needs Go >= 1.24 (CONTRIBUTING.md, Prerequisites)"
    exit 0
  fi
  # Already building (another demo's build): nothing to start.
  if ! flock -n "$lock" true; then
    echo "MinIO is building in the background (log: $log)"
    exit 0
  fi
  echo "building MinIO $version in the background for make test (log: $log)"
  setsid nohup nice -n 19 "$0" "$version" "$bin" >"$log" 2>&1 </dev/null &
  exit 0
fi

exec 9>"$lock"
if ! flock -n 9; then
  echo "waiting for the MinIO build under way in the background (log: $log)"
  flock 9
fi
[ -x "$bin" ] && exit 0

echo "building MinIO $version from the Go module proxy (about 2 minutes with a cold Go cache, once)"
scratch=$bindir/.minio-build
rm -rf "$scratch"
mkdir -p "$scratch"
GOBIN=$scratch GOFLAGS=-trimpath go install "github.com/minio/minio@$version"
mv "$scratch/minio" "$bin"
rmdir "$scratch"
echo "MinIO built: $bin"
