#!/bin/sh
# Re-vendors the Conduit connector protocol's .proto files into proto/conduit/ from the Go module
# proxy (the modules Conduit itself pins), byte for byte; see proto/conduit/PROVENANCE.md.
# Only needed to move to a new protocol version: the build (make install) uses the vendored copies
# and needs no Go toolchain.
set -eu
cd "$(dirname "$0")/.."
PROTOCOL="github.com/conduitio/conduit-connector-protocol@${PROTOCOL_VERSION:-v0.9.5}"
COMMONS="github.com/conduitio/conduit-commons@${COMMONS_VERSION:-v0.6.0}"
GOPLUGIN="github.com/hashicorp/go-plugin@${GOPLUGIN_VERSION:-v1.8.0}"
OUT=proto/conduit
dir_of() {
    (cd "${TMPDIR:-/tmp}" && go mod download -json "$1") | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}
P=$(dir_of "$PROTOCOL")
C=$(dir_of "$COMMONS")
G=$(dir_of "$GOPLUGIN")
mkdir -p "$OUT/connector/v2" "$OUT/connutils/v1" "$OUT/opencdc/v1" "$OUT/config/v1" "$OUT/schema/v1" "$OUT/plugin"
cp "$P/proto/connector/v2/destination.proto" "$P/proto/connector/v2/specifier.proto" "$OUT/connector/v2/"
cp "$P/proto/connutils/v1/schema.proto" "$OUT/connutils/v1/"
cp "$C/proto/opencdc/v1/opencdc.proto" "$OUT/opencdc/v1/"
cp "$C/proto/config/v1/parameter.proto" "$OUT/config/v1/"
cp "$C/proto/schema/v1/schema.proto" "$OUT/schema/v1/"
cp "$G/internal/plugin/grpc_controller.proto" "$OUT/plugin/"
cp "$P/LICENSE.md" "$OUT/LICENSE.conduit-connector-protocol.md" 2>/dev/null || cp "$P/LICENSE" "$OUT/LICENSE.conduit-connector-protocol"
cp "$C/LICENSE.md" "$OUT/LICENSE.conduit-commons.md" 2>/dev/null || cp "$C/LICENSE" "$OUT/LICENSE.conduit-commons"
cp "$G/LICENSE" "$OUT/LICENSE.go-plugin"
chmod -R u+w "$OUT"
(cd "$OUT" && find . -name '*.proto' | sort | xargs sha256sum) > "$OUT/SHA256SUMS"
echo "vendored $PROTOCOL, $COMMONS, $GOPLUGIN into $OUT"
