"""Fivetran's build pipeline for Python destinations, as its binary build guide describes it:
at the repository root `main.py`, `requirements.txt` and an executable, not world-writable
`build.sh`; the pipeline runs build.sh, then `pyinstaller --onefile main.py` with no
configuration of ours, and launches `dist/main --port N`.

The slow test does exactly that in a fresh copy of the repository (the files git would
check out) and a fresh virtualenv, then runs the public tester inputs through the binary.
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from delta_destination import frozen
from delta_destination.frozen import embed
from buildkit import requirements as reqs
from testkit.server_process import ROOT, TESTER_INPUTS, RunningServer
from testkit.tester import input_files

PYINSTALLER = "pyinstaller==6.22.3"  # what the pipeline installs (`pip install pyinstaller`), pinned here


def test_root_files_of_the_pipeline():
    assert (ROOT / "main.py").is_file()
    assert (ROOT / "requirements.txt").is_file()
    mode = (ROOT / "build.sh").stat().st_mode
    assert mode & stat.S_IXUSR, "build.sh must be executable"
    assert not mode & stat.S_IWOTH, "build.sh must not be world-writable"
    # git records the executable bit: a fresh clone gets an executable build.sh
    out = subprocess.run(["git", "ls-files", "-s", "build.sh"], cwd=ROOT, capture_output=True, text=True).stdout
    assert out.startswith("100755"), out


def test_requirements_txt_is_generated_from_pyproject():
    """One source of truth: pyproject.toml's dependencies; requirements.txt is their pinned
    runtime closure as this project's venv resolved it (`python -m buildkit.requirements`)."""
    text = (ROOT / "requirements.txt").read_text()
    pinned = reqs.parse(text)
    direct = reqs.direct_requirements()
    for r in direct:
        name = canonicalize_name(r.name)
        assert name in pinned, f"{r.name} from pyproject.toml is missing in requirements.txt"
    assert text.startswith(reqs.HEADER)
    found = reqs.problems(pinned, direct)
    assert not found, ("requirements.txt does not match pyproject.toml; regenerate it with "
                       "`.venv/bin/python -m buildkit.requirements > requirements.txt`:\n" + "\n".join(found))


def test_requirements_drift_is_detected():
    from packaging.requirements import Requirement

    pinned = reqs.parse((ROOT / "requirements.txt").read_text())
    direct = reqs.direct_requirements()
    assert reqs.problems({**pinned, "grpcio": "1.0.0"}, direct)[0].startswith("grpcio==1.0.0 does not satisfy")
    assert "pyarrow is needed at run time but not pinned" in reqs.problems(
        {k: v for k, v in pinned.items() if k != "pyarrow"}, direct)
    assert "left-pad is pinned but nothing needs it" in reqs.problems({**pinned, "left-pad": "1.0"}, direct)
    assert any("requests" in p for p in reqs.problems(pinned, direct + [Requirement("requests==2.0")]))


def test_requirements_parse_refuses_loose_pins():
    assert reqs.parse("a==1.0\n# c\nB_c==2.0.post1  # x\n") == {"a": "1.0", "b-c": "2.0.post1"}
    with pytest.raises(ValueError):
        reqs.parse("pandas>=2.2\n")


def test_embedded_files_are_restored_only_where_missing(tmp_path):
    files = {"pkg/sub/data.json": b'{"a": [1, 2]}', "other.txt": b"x" * 1000}
    module = embed.render(files)
    ns: dict = {}
    exec(compile(module, "bundled_files.py", "exec"), ns)  # the generated module is plain Python
    (tmp_path / "other.txt").write_bytes(b"kept")
    written = frozen.restore(ns["FILES"], str(tmp_path))
    assert written == [str(tmp_path / "pkg" / "sub" / "data.json")]
    assert (tmp_path / "pkg" / "sub" / "data.json").read_bytes() == files["pkg/sub/data.json"]
    assert (tmp_path / "other.txt").read_bytes() == b"kept"
    assert set(frozen.DATA_FILES) == {"pyspark/errors/error-conditions.json"}


def _checkout(dest: Path) -> None:
    """The files a clone of this working tree has (tracked and new, not ignored ones)."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = ROOT / name
        if not src.exists():
            continue  # deleted in the working tree
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(src.read_bytes())
        os.chmod(target, src.stat().st_mode & 0o777)


def _run(cmd, cwd, env, log: Path):
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(map(str, cmd))}\n".encode())
        out.flush()
        done = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    assert done.returncode == 0, f"{cmd} failed; see {log}:\n" + log.read_text(errors="replace")[-4000:]


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    work = tmp_path_factory.mktemp("pipeline")
    repo = work / "repo"
    _checkout(repo)
    log = work / "build.log"
    venv = work / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], work, None, log)
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}
    env.pop("PYTHONPATH", None)
    env.pop("PYTHON", None)
    _run(["python", "-m", "pip", "install", "-q", "-r", "requirements.txt"], repo, env, log)
    _run(["./build.sh"], repo, env, log)
    _run(["python", "-m", "pip", "install", "-q", PYINSTALLER], repo, env, log)
    started = time.monotonic()
    _run(["pyinstaller", "--onefile", "main.py"], repo, env, log)
    exe = repo / "dist" / "main"
    assert exe.is_file() and os.access(exe, os.X_OK)
    print(f"\nPyInstaller build: {time.monotonic() - started:.0f}s, dist/main {exe.stat().st_size / 1e6:.0f} MB")
    return exe


@pytest.fixture(scope="module")
def binary_server(binary, tmp_path_factory):
    base = tmp_path_factory.mktemp("binsrv")
    started = time.monotonic()
    # Not this test's Python environment: the binary must carry everything itself.
    env = {"PYTHONPATH": "", "PATH": "/usr/bin:/bin", "HOME": str(base)}
    srv = RunningServer(base / "warehouse", base / "server.log", command=[str(binary)], env=env, ready_timeout=180)
    print(f"\ndist/main serving after {time.monotonic() - started:.1f}s")
    yield srv
    srv.stop()
    log = Path(srv.log_path).read_text(errors="replace")
    assert '"SEVERE"' not in log, log[-3000:]


INPUT_FILES = input_files(TESTER_INPUTS)


@pytest.mark.slow
@pytest.mark.parametrize("live_only", [False, True], ids=["history", "live"])
def test_binary_passes_the_tester_inputs(binary_server, live_only):
    from delta_destination.doors.fivetran.batch_files import Compression
    from testkit import tester as tc

    assert INPUT_FILES
    problems = []
    for i, rel in enumerate(INPUT_FILES):
        log = []
        result = tc.run_input_file(binary_server.stub, binary_server.warehouse, TESTER_INPUTS / rel,
                                   f"bin_{'live' if live_only else 'hist'}_{i}", live_only=live_only,
                                   compression=Compression.ZSTD, run_migrations=rel.startswith("schema_migrations_"),
                                   log=log.append)
        problems += [f"{rel}: {p}" for p in result.problems]
        if not result.ok:
            print("\n".join(log))
    assert not problems, "\n".join(problems)


def _extraction_dirs(pid: int) -> set[str]:
    """The PyInstaller extraction folders (_MEIxxxxxx) whose files a process has mapped."""
    dirs = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        if "/_MEI" in path:
            dirs.add(path[:path.index("/", path.index("/_MEI") + 1)])
    return dirs


@pytest.mark.slow
def test_the_binary_runs_its_engine_as_a_process_of_its_own(binary_server, binary):
    """The binary starts itself again as the supervised Sail engine (`main sail-engine`), which
    uses the files the binary already unpacked (no second extraction), and ends with it."""
    import psutil

    from testkit.processes import sail_engines_below

    (engine,) = sail_engines_below(binary_server.proc.pid)
    assert engine.cmdline()[:2] == [str(binary), "sail-engine"]
    # The onefile bootloader runs the program in a child of its own: the server is that child.
    server = [p for p in psutil.Process(binary_server.proc.pid).children() if p.pid != engine.pid] or \
        [psutil.Process(binary_server.proc.pid)]
    mine = _extraction_dirs(engine.pid)
    assert mine and mine <= set().union(*(_extraction_dirs(p.pid) for p in server)), mine
