"""Airflow asset events: after a commit, tell a configured Airflow 3 API server that the
table's asset changed, so DAGs scheduled on `Asset("<canonical uri>")` run.

Airflow 3's REST API takes an asset id, not a URI (`POST /api/v2/assets/events
{"asset_id", "extra"}`), so each event first looks the id up (`GET /api/v2/assets?
uri_pattern=` is a substring match: results are filtered to the exact URI; several assets
may share a URI and each gets the event). A URI no DAG declares has no asset: nothing is
posted. Auth: a static bearer token, or username/password exchanged at `POST /auth/token`
(re-fetched once on a 401). All of this runs on the lineage sender's thread with timeouts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

import requests

from .. import logs

log = logs.get(__name__)

ENV_PREFIX = "DELTA_LINEAGE_AIRFLOW_"
PAGE = 100
MAX_PAGES = 20


@dataclass(frozen=True)
class AirflowConfig:
    url: str                          # the API server's base URL, e.g. http://airflow:8080
    token: Optional[str] = None       # a bearer token (JWT) ...
    username: Optional[str] = None    # ... or credentials for POST /auth/token
    password: Optional[str] = None
    timeout: float = 5.0              # seconds, per HTTP call

    def __repr__(self) -> str:  # never print secrets
        return f"AirflowConfig(url={self.url!r}, auth={'token' if self.token else 'password' if self.username else 'none'})"

    @staticmethod
    def from_env(env: Mapping[str, str]) -> Optional["AirflowConfig"]:
        url = (env.get(ENV_PREFIX + "URL") or "").strip()
        if not url:
            return None
        return AirflowConfig(
            url=url.rstrip("/"),
            token=env.get(ENV_PREFIX + "TOKEN") or None,
            username=env.get(ENV_PREFIX + "USERNAME") or None,
            password=env.get(ENV_PREFIX + "PASSWORD") or None,
            timeout=float(env.get(ENV_PREFIX + "TIMEOUT") or 5.0),
        )


@dataclass(frozen=True)
class AssetEvent:
    uri: str
    extra: dict


class AirflowError(RuntimeError):
    """An Airflow API answer we cannot use (status code only: bodies may echo input)."""


class AirflowAssets:
    def __init__(self, config: AirflowConfig, session: Optional[requests.Session] = None):
        self.config = config
        self.session = session or requests.Session()
        self.session.trust_env = False  # no proxies or .netrc credentials picked up implicitly
        self._token = config.token

    # ---- auth ---------------------------------------------------------------------------------
    def _fetch_token(self) -> str:
        if not self.config.username:
            raise AirflowError("Airflow answered 401 and no username/password is configured")
        r = self.session.post(f"{self.config.url}/auth/token", timeout=self.config.timeout,
                              json={"username": self.config.username, "password": self.config.password or ""})
        if r.status_code not in (200, 201):
            raise AirflowError(f"POST /auth/token answered {r.status_code}")
        return r.json()["access_token"]

    def _call(self, method: str, path: str, **kw) -> requests.Response:
        for attempt in (1, 2):
            if self._token is None and self.config.username:
                self._token = self._fetch_token()
            headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
            r = self.session.request(method, f"{self.config.url}{path}", headers=headers,
                                     timeout=self.config.timeout, **kw)
            if r.status_code == 401 and attempt == 1 and self.config.username:
                self._token = None  # expired: fetch a new one once
                continue
            return r
        return r

    # ---- assets ---------------------------------------------------------------------------------
    def asset_ids(self, uri: str) -> list[int]:
        ids, offset = [], 0
        for _ in range(MAX_PAGES):
            r = self._call("GET", "/api/v2/assets", params={"uri_pattern": uri, "limit": PAGE, "offset": offset})
            if r.status_code != 200:
                raise AirflowError(f"GET /api/v2/assets answered {r.status_code}")
            body = r.json()
            assets = body.get("assets") or []
            ids += [a["id"] for a in assets if a.get("uri") == uri]
            offset += len(assets)
            if not assets or offset >= int(body.get("total_entries") or 0):
                break
        return ids

    def send(self, event: AssetEvent) -> int:
        """Posts the event to every asset with this exact URI; returns how many."""
        ids = self.asset_ids(event.uri)
        if not ids:
            log.info(f"Airflow: no asset is declared for {event.uri}; no asset event posted")
            return 0
        for asset_id in ids:
            r = self._call("POST", "/api/v2/assets/events", json={"asset_id": asset_id, "extra": event.extra})
            if r.status_code not in (200, 201):
                raise AirflowError(f"POST /api/v2/assets/events answered {r.status_code}")
        log.info(f"Airflow: asset event posted for {event.uri} ({len(ids)} asset(s))")
        return len(ids)
