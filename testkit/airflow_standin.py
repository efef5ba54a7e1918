"""A stand-in for Airflow 3's REST API on loopback that records every request: enough of
/auth/token, /api/v2/assets and /api/v2/assets/events for the asset-event client, plus a
`delay` to play a slow server. Shared by the tests of every door."""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


@dataclass
class Recorded:
    method: str
    path: str
    query: dict
    headers: dict
    body: object


@dataclass
class AirflowStandIn:
    assets: list[dict] = field(default_factory=list)   # [{"id": 1, "uri": "..."}]
    username: str = "admin"
    password: str = "s3cret-pw"
    token: str = "tok-123"
    delay: float = 0.0
    requests: list[Recorded] = field(default_factory=list)

    def start(self) -> "AirflowStandIn":
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _answer(self, code: int, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                parts = urlsplit(self.path)
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                body = json.loads(raw) if raw else None
                standin.requests.append(Recorded(method, parts.path, parse_qs(parts.query), dict(self.headers), body))
                if standin.delay:
                    time.sleep(standin.delay)
                authed = self.headers.get("Authorization") == f"Bearer {standin.token}"
                if method == "POST" and parts.path == "/auth/token":
                    ok = body == {"username": standin.username, "password": standin.password}
                    return self._answer(201 if ok else 401, {"access_token": standin.token} if ok else {})
                if not authed:
                    return self._answer(401, {"detail": "Not authenticated"})
                if method == "GET" and parts.path == "/api/v2/assets":
                    pattern = parse_qs(parts.query).get("uri_pattern", [""])[0].lower()
                    found = [a for a in standin.assets if pattern in a["uri"].lower()]
                    return self._answer(200, {"assets": found, "total_entries": len(found)})
                if method == "POST" and parts.path == "/api/v2/assets/events":
                    if not any(a["id"] == (body or {}).get("asset_id") for a in standin.assets):
                        return self._answer(404, {"detail": "asset not found"})
                    return self._answer(200, {"id": len(standin.requests), **(body or {})})
                return self._answer(404, {"detail": "not found"})

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
