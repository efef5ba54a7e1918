#!/bin/sh
# Builds the real Conduit (the client the Conduit door is tested against) once and caches it in
# .tools/ (git-ignored); later runs reuse the binary. Prints the binary's path on stdout.
#
# Equivalent to `CGO_ENABLED=0 go install github.com/conduitio/conduit/cmd/conduit@VERSION`, but
# spelled as download + build: some module proxies answer 403 (not 404) for the sub-path
# github.com/conduitio/conduit/cmd/conduit, which makes `go install pkg@version` give up before it
# tries the enclosing module.
# v0.19.0 is the target. Versions the proxy does not serve are skipped, in this order:
# v0.18.0 pins the very same connector protocol (v0.9.5), commons (v0.6.0), connector SDK (v0.14.2)
# and generator (v0.10.4); v0.14.0 pins protocol v0.9.4 (same connector.v2 protos), commons v0.6.0,
# the same generator, and builds with Go >= 1.24.2. .tools/conduit.version says which one was built.
# The checksum database (reached through the proxy) has no entry for the conduit module itself on
# some mirrors, so that one module (exactly: its path, not its dependencies) skips the sumdb check;
# every dependency is still verified against go.sum / the sumdb as usual.
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}github.com/conduitio/conduit"
set -eu
cd "$(dirname "$0")/.."
TOOLS="$PWD/.tools"
BIN="$TOOLS/conduit"
if [ -x "$BIN" ] && [ -s "$TOOLS/conduit.version" ]; then
    echo "$BIN"
    exit 0
fi
command -v go >/dev/null 2>&1 || { echo "need the Go toolchain (go) to build Conduit" >&2; exit 3; }
mkdir -p "$TOOLS"
BUILD="$TOOLS/conduit-build"
for version in ${CONDUIT_VERSION:-v0.19.0 v0.18.0 v0.14.0}; do
    echo "building conduit $version (slow: minutes on 2 cores)" >&2
    rm -rf "$BUILD" && mkdir -p "$BUILD"
    # `go mod download` fetches the module zip (verified), then the build runs inside a copy of
    # it, so Conduit's own go.mod and go.sum pin every dependency exactly as `go install` would.
    if dir=$(cd "$BUILD" && go mod download -json "github.com/conduitio/conduit@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') \
        && [ -n "$dir" ] && cp -R "$dir/." "$BUILD/src" && chmod -R u+w "$BUILD/src" \
        && (cd "$BUILD/src" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags "-X 'github.com/conduitio/conduit/pkg/conduit.version=$version'" -o "$BIN.tmp" ./cmd/conduit >&2); then
        mv "$BIN.tmp" "$BIN"
        echo "$version" > "$TOOLS/conduit.version"
        rm -rf "$BUILD"
        echo "$BIN"
        exit 0
    fi
done
echo "could not build conduit" >&2
exit 1
