"""The soak through the other doors (bench/soak/run.py runs them): one long Airbyte `write` whose records
are each followed by a STATE (a commit each), the real Conduit running a generator pipeline
into the connector, and a backlog offered to the connector as fast as gRPC takes it (through the
plugin handshake, as testkit/conduit_host.py plays Conduit: the real Conduit's generator sends ~5
records at a time, whatever the batch size). Each has its own memory line: the door process and its
engine process."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import psutil

from testkit.conduit_pipeline import Conduit, conduit_binary, replay_oracle
from testkit.delta_read import delta_version, read_delta_table
from testkit.server_process import ROOT, free_port

from ..common.process_memory import MemorySampler
from ..common.door_measures import latency_summary, memory_summary, restarts, scrape

AIRBYTE = [sys.executable, "-m", "delta_destination.doors.airbyte.main"]
PROPERTIES = {"id": {"type": "integer"}, "name": {"type": "string"}, "qty": {"type": "integer"},
              "price": {"type": "number"}, "note": {"type": "string"}}


def airbyte_soak(work: Path, streams: int, rounds: int, records_per_state: int = 50) -> dict:
    """`rounds` times per stream: `records_per_state` records (half of them new keys, half updates of
    stored ones; the stream is append_dedup on `id`), then a STATE. The destination commits before it
    echoes each STATE, so every STATE is a commit; the wait from a STATE to its echo is its latency."""
    work.mkdir(parents=True)
    warehouse = work / "warehouse"
    port = free_port()
    config = {"warehouse": str(warehouse), "default_schema": "soak", "metrics_port": f"127.0.0.1:{port}",
              "flush_interval_seconds": 0}   # a commit as soon as the input pauses: after each STATE
    names = [f"s{i:03d}" for i in range(streams)]
    catalog = {"streams": [{"stream": {"name": n, "json_schema": {"type": "object", "properties": PROPERTIES},
                                       "supported_sync_modes": ["incremental"]},
                            "sync_mode": "incremental", "destination_sync_mode": "append_dedup",
                            "primary_key": [["id"]], "cursor_field": ["id"]} for n in names]}
    (work / "config.json").write_text(json.dumps(config))
    (work / "catalog.json").write_text(json.dumps(catalog))
    proc = subprocess.Popen([*AIRBYTE, "write", "--config", str(work / "config.json"), "--catalog",
                             str(work / "catalog.json")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=ROOT)
    expected: dict[str, dict[int, dict]] = {n: {} for n in names}
    sent_at: dict[str, float] = {}
    latencies: list[float] = []
    echoed = [0]
    errors: list[str] = []

    def read_stdout():
        for raw in proc.stdout:
            msg = json.loads(raw)
            if msg["type"] == "STATE":
                token = msg["state"]["stream"]["stream_state"]["token"]
                latencies.append(time.monotonic() - sent_at.pop(token))
                echoed[0] += 1
            elif msg["type"] == "TRACE" and msg["trace"]["type"] == "ERROR":
                errors.append(msg["trace"]["error"]["message"])

    reader = threading.Thread(target=read_stdout, daemon=True)
    reader.start()
    sampler = MemorySampler(psutil.Process(proc.pid), lambda: echoed[0]).start()
    began = time.monotonic()
    next_id = {n: 1 for n in names}
    for r in range(rounds):
        for n in names:
            rows = expected[n]
            stored = list(rows)[: records_per_state // 2]
            keys = stored + list(range(next_id[n], next_id[n] + records_per_state - len(stored)))
            next_id[n] += records_per_state - len(stored)
            lines = []
            for k in keys:
                data = {"id": k, "name": f"n{k}-{r}", "qty": r, "price": k * 0.5, "note": "x" * (k % 40)}
                rows[k] = data
                lines.append(json.dumps({"type": "RECORD", "record": {"stream": n, "data": data,
                                                                      "emitted_at": 1_700_000_000_000 + r}}))
            token = f"{n}-{r}"
            sent_at[token] = time.monotonic()
            lines.append(json.dumps({"type": "STATE", "state": {"type": "STREAM", "stream": {
                "stream_descriptor": {"name": n}, "stream_state": {"token": token}}}}))
            proc.stdin.write(("\n".join(lines) + "\n").encode())
            proc.stdin.flush()
            # One STATE in flight at a time, as a source that waits for checkpoints: its latency is the commit's.
            waited = time.monotonic()
            while token in sent_at and proc.poll() is None:
                if time.monotonic() - waited > 600:
                    errors.append(f"STATE {token} was not echoed within 600 s")
                    break
                time.sleep(0.005)
            if errors:
                break
        if errors:
            break
    metrics = scrape(port)
    seconds = time.monotonic() - began
    sampler.stop()                      # its last sample while the process still runs
    proc.stdin.close()
    code = proc.wait(600)
    reader.join(60)
    problems = []
    for n in names:
        got = {row["id"]: row for row in read_delta_table(str(warehouse / "soak" / n)).to_pylist()}
        want = expected[n]
        if set(got) != set(want) or any(got[k]["name"] != v["name"] or got[k]["qty"] != v["qty"] for k, v in want.items()):
            problems.append(f"{n}: {len(got)} rows, {len(want)} expected, or values differ")
    commits = streams * rounds
    return {"door": "airbyte", "label": "one write", "streams": streams, "rounds": rounds, "commits": commits,
            "seconds": round(seconds, 1), "exit_code": code, "latency": {"STATE to echo": latency_summary(latencies)},
            "memory": memory_summary(sampler, min(500, commits)), "engine_restarts": restarts(metrics),
            "failed_requests": len(errors) + (code != 0) + (commits - echoed[0]), "failures": errors[:5],
            "tables_equal_to_model": not problems, "problems": problems[:10]}


def generator_yaml(records: int, batch: int, rate: int) -> str:
    return f"""version: "2.2"
pipelines:
  - id: soak
    status: running
    connectors:
      - id: src
        type: source
        plugin: builtin:generator
        settings:
          collections.events.format.type: structured
          collections.events.format.options.id: int
          collections.events.format.options.name: string
          collections.events.format.options.amount: int
          collections.events.operations: create,update,delete,snapshot
          recordCount: "{records}"
          rate: "{rate}"
          sdk.schema.extract.payload.enabled: "false"
          sdk.schema.extract.key.enabled: "false"
      - id: dst
        type: destination
        plugin: standalone:delta-lake@v0.1.0
        settings:
          warehouse: "${{DELTA_ROOT}}"
          engine: "${{DELTA_ENGINE}}"
          metrics_port: "${{METRICS_PORT}}"
          sdk.batch.size: "{batch}"
          sdk.batch.delay: "1s"
      - id: oracle
        type: destination
        plugin: builtin:file
        settings:
          path: ${{WORK}}/oracle.jsonl
"""


def conduit_soak(work: Path, records: int, batch: int, rate: int = 5000, label: str = "generator pipeline",
                 connector_root: Path = ROOT) -> dict:
    """The real Conduit: a generator of `records` records into the connector, `batch` per commit.
    `connector_root`: the checkout whose package the connector runs (another one: --compare-with)."""
    import os

    work.mkdir(parents=True)
    binary = conduit_binary()
    port = free_port()
    os.environ["METRICS_PORT"] = f"127.0.0.1:{port}"   # Conduit expands it in the pipeline file
    saved_path = os.environ.get("PYTHONPATH")
    if connector_root != ROOT:         # Conduit passes its environment on to the connector
        os.environ["PYTHONPATH"] = str(connector_root)
    try:
        c = Conduit(binary, work, generator_yaml(records, batch, rate))
    finally:
        if saved_path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved_path
    began = time.monotonic()
    try:
        connector = psutil.Process(c.connector_pid())
        sampler = MemorySampler(connector, c.acked, find=lambda: psutil.Process(c.connector_pid())).start()
        deadline = time.monotonic() + 4 * 3600
        while c.acked() < records:
            assert c.proc.poll() is None and time.monotonic() < deadline, c.log()[-4000:]
            time.sleep(1.0)
        seconds = time.monotonic() - began
        metrics = scrape(port)
        sampler.stop()
    finally:
        code = c.interrupt()
    lines = c.oracle_lines()
    want = replay_oracle(lines)
    got = {row["key"]: row for row in read_delta_table(str(work / "wh" / "conduit" / "events")).to_pylist()}
    problems = []
    if set(got) != set(want) or any(got[k]["name"] != v["name"] for k, v in want.items()):
        problems.append(f"events: {len(got)} rows, {len(want)} expected, or values differ")
    # The generator's rate, not `batch`, decides how many records a commit holds (~5 at its rate here).
    commits = delta_version(str(work / "wh" / "conduit" / "events"))
    log = c.log()
    return {"door": "conduit", "label": label, "records": records, "batch": batch, "commits": commits,
            "seconds": round(seconds, 1), "exit_code": code, "records_per_s": round(records / seconds),
            "memory": memory_summary(sampler, records // 10), "engine_restarts": restarts(metrics),
            "failed_requests": int(code != 0) + len([x for x in log.splitlines() if '"nack' in x]),
            "connector_warnings": _connector_warnings(log),
            "failures": [], "tables_equal_to_model": not problems, "problems": problems}


def _connector_warnings(log: str) -> int:
    """Warnings the connector itself logged (Conduit re-logs each of its lines at the line's level)."""
    n = 0
    for line in log.splitlines():
        if '"plugin_name":"delta-lake"' not in line:
            continue
        try:
            n += json.loads(line).get("level") in ("warn", "error")
        except ValueError:
            continue
    return n


def conduit_backlog_soak(work: Path, records: int, batch: int, label: str = "",
                         connector_root: Path = ROOT, extra_env: Optional[dict] = None) -> dict:
    """`records` new keys (~300 bytes each) offered to the connector as fast as gRPC takes them, in
    commits of `batch`: the backlog a connector meets after a pause or an initial snapshot.
    `extra_env`: more of the connector's environment (its engine inherits it), to try a setting."""
    from testkit.conduit_host import PluginProcess
    from testkit.conduit_records import backlog_records, connector_config

    work.mkdir(parents=True)
    port = free_port()
    p = PluginProcess(work / "plugin.log", root=connector_root, extra_env=extra_env)
    try:
        # A delay longer than a batch takes to fill: batches of exactly `batch`.
        run = p.open(connector_config(work / "wh", metrics_port=f"127.0.0.1:{port}",
                                      **{"sdk.batch.size": batch, "sdk.batch.delay": "10s"}))
        sampler = MemorySampler(psutil.Process(p.proc.pid), lambda: len(run.acks), period=1.0).start()
        began = time.monotonic()
        run.send_lazily(backlog_records(records))
        acks = run.wait_acks(records, timeout=3600)
        seconds = time.monotonic() - began
        metrics = scrape(port)
        sampler.stop()
        errors = [a.error for a in acks if a.error]
        in_order = [int(a.position) for a in acks] == list(range(1, records + 1))
        p.stop(str(records).encode())
        run.close()
        p.teardown()
        p.kill_gracefully()
    finally:
        p.close()
    log = p.log_text()
    table = str(work / "wh" / "conduit" / "backlog")
    rows = read_delta_table(table).num_rows
    problems = [] if rows == records and in_order else [f"backlog: {rows} rows, {records} expected, or acks out of order"]
    return {"door": "conduit", "label": label or f"{records:,}-record backlog", "records": records, "batch": batch,
            "commits": delta_version(table), "seconds": round(seconds, 1), "records_per_s": round(records / seconds),
            "memory": memory_summary(sampler, records // 10), "engine_restarts": restarts(metrics),
            "connector_warnings": sum(1 for line in log.splitlines() if '"@level": "warn' in line or
                                      '"@level": "error' in line),
            "failed_requests": len(acks) < records or len(errors), "failures": errors[:5],
            "tables_equal_to_model": not problems, "problems": problems}
