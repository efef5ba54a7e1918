"""The go-plugin handshake (hashicorp/go-plugin, docs/guide-plugin-write-non-go.md).

The host starts us with a magic cookie and the app protocol versions it speaks in the
environment, and reads ONE line from our stdout: `CORE|APP|NETWORK|ADDRESS|PROTOCOL`. Anything
printed before it breaks the launch, so it is written by main before anything heavy is imported.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .errors import HandshakeError

COOKIE_KEY = "CONDUIT_PLUGIN_MAGIC_COOKIE"
COOKIE_VALUE = "204e8e812c3a1bb73b838928c575b42a105dd2e9aa449be481bc4590486df53f"
VERSIONS_KEY = "PLUGIN_PROTOCOL_VERSIONS"
CORE_PROTOCOL_VERSION = 1      # go-plugin's own protocol, always 1
APP_PROTOCOL_VERSION = 2       # Conduit connector protocol v2 (the only one served)


@dataclass(frozen=True)
class Handshake:
    app_version: int
    address: str               # host:port of our gRPC server (TCP on loopback)

    def line(self) -> str:
        return f"{CORE_PROTOCOL_VERSION}|{self.app_version}|tcp|{self.address}|grpc"


def negotiate(env: Mapping[str, str]) -> int:
    """The app protocol version to serve, from the host's environment. A missing or wrong cookie
    means a person ran the binary by hand: say so instead of printing a handshake."""
    if env.get(COOKIE_KEY) != COOKIE_VALUE:
        raise HandshakeError(
            "this is a Conduit connector plugin: Conduit starts it (put it in Conduit's connectors directory); "
            "it is not meant to be run directly")
    offered = env.get(VERSIONS_KEY, "")
    versions = set()
    for part in offered.split(","):
        part = part.strip()
        if part.isdigit():
            versions.add(int(part))
    if offered.strip() and APP_PROTOCOL_VERSION not in versions:
        raise HandshakeError(f"the host offers connector protocol versions {offered!r}; this plugin serves only v2")
    return APP_PROTOCOL_VERSION


@dataclass(frozen=True)
class ParsedHandshake:
    core_version: int
    app_version: int
    network: str
    address: str
    protocol: str


def parse(line: str) -> ParsedHandshake:
    """The host side (used by the test harness): what go-plugin checks in the line."""
    parts = line.strip().split("|")
    if len(parts) < 5:
        raise HandshakeError(f"malformed handshake line ({len(parts)} fields)")
    core, app, network, address, protocol = parts[:5]
    if core != str(CORE_PROTOCOL_VERSION):
        raise HandshakeError(f"incompatible core protocol version {core!r}")
    if network not in ("tcp", "unix"):
        raise HandshakeError(f"unknown network {network!r}")
    if protocol != "grpc":
        raise HandshakeError(f"unsupported plugin protocol {protocol!r}")
    return ParsedHandshake(int(core), int(app), network, address, protocol)
