"""Child program of the crash tests: appends deterministic records to a run and reports.

Run it by path, ``python tests/crash/_writer.py MODE --root R --run ID [options]``. Each report
is one JSON object per stdout line, written with a single ``os.write`` (a line is never torn by
a SIGKILL, and nothing sits in a buffer that a fork would duplicate)::

    {"event": "opening", "t": T}   (--announce) about to call Store.open (T: time.monotonic())
    {"event": "open", "pid": P, "gen": G, "seq": S, "t": T, "recovery": "..."}   the run is open
    {"ack": N}            append(record_data(seed, N)) returned: record N is acknowledged
    {"event": "locked", "holder": "...", "waited": T}                    RunLocked, exit 4
    {"event": "write_error", "errno": E, "error": "..."}       CheckpointWriteError, exit 3
    {"event": "holding"}  (--hold) the records are written; the lock is kept until a stdin line
    {"event": "closed"}
    {"event": "exit", "pid": P, "signal": S, "code": C}                  (serve) a worker ended

Modes:

``open``   open the run, append ``--count`` records (forever without it), close (or ``--hold``).
``serve``  a fork server: import once, then for each JSON line on stdin
           (``{"failpoints": "journal.after_write=kill@3", "count": null}``) fork a worker that
           arms those failpoints and runs ``open``, and report how it ended. Forking a warm
           interpreter is what makes hundreds of real SIGKILLs affordable.

The parent imports :func:`record_data` and :func:`segment_records` from here to check the disk.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from crashpoint import _failpoints
from crashpoint.checkpoint import SnapshotPolicy, Store, list_files
from crashpoint.checkpoint._record import decode_payload, encode_json, scan
from crashpoint.errors import CheckpointWriteError, RunLocked

WRITER = Path(__file__).resolve()
EXIT_WRITE_ERROR = 3
EXIT_LOCKED = 4
_TEXT = 'aZ09 é✓"\\\n\t{}[]:,'


def record_data(seed: int, seq: int) -> dict[str, Any]:
    """The data of record ``seq`` of a run seeded with ``seed``: the same in every process."""
    rng = random.Random(f"{seed}:{seq}")
    size = rng.choice((0, 3, 24, 90, 240, 700))
    return {
        "n": seq,
        "blob": rng.randbytes(size).hex(),
        "text": "".join(rng.choice(_TEXT) for _ in range(rng.randint(0, 16))),
        "nums": [rng.randint(-(2**53), 2**53) for _ in range(rng.randint(0, 3))],
        "f": rng.random(),
        "nested": {"ok": rng.random() < 0.5, "none": None, "list": [[], {}]},
    }


def expected_payload(seed: int, seq: int, generation: int) -> bytes:
    """The exact payload bytes a record must have on disk."""
    return encode_json({"s": seq, "g": generation, "d": record_data(seed, seq)})


def segment_records(folder: str | os.PathLike[str]) -> list[tuple[int, int, bytes]]:
    """Every intact record in the run's journal segments as (seq, generation, payload bytes)."""
    out = []
    _snaps, segs = list_files(os.fspath(folder))
    for _first, path in segs:
        with open(path, "rb") as f:
            buf = f.read()
        for _off, _kind, payload in scan(buf).records:
            env = decode_payload(payload)
            out.append((int(env["s"]), int(env["g"]), payload))
    return out


def emit(obj: dict[str, Any]) -> None:
    os.write(1, json.dumps(obj).encode() + b"\n")


def make_store(args: argparse.Namespace) -> Store:
    snaps = (
        SnapshotPolicy(min_bytes=args.snapshot_bytes, ratio=0.0)
        if args.snapshot_bytes
        else SnapshotPolicy(enabled=False)
    )
    return Store(
        args.root,
        durability=args.durability,
        lock_timeout=args.lock_timeout,
        segment_bytes=args.segment_bytes,
        snapshots=snaps,
        reserve_bytes=args.reserve_bytes,
        budget_bytes=args.budget_bytes,
    )


def run_open(args: argparse.Namespace, count: int | None) -> int:
    """Open the run, append, report; return the exit code."""
    store = make_store(args)
    if args.announce:
        emit({"event": "opening", "t": time.monotonic()})
    try:
        j = store.open(args.run)
    except RunLocked as exc:
        emit({"event": "locked", "holder": exc.holder, "waited": exc.waited})
        return EXIT_LOCKED
    try:
        emit(
            {
                "event": "open",
                "pid": os.getpid(),
                "gen": j.generation,
                "seq": j.seq,
                "t": time.monotonic(),
                "recovery": j.recovery.describe(),
                "torn": j.recovery.torn_tail is not None,
                "damage": len(j.recovery.damage),
            }
        )
        done = 0
        while count is None or done < count:
            seq = j.append(record_data(args.seed, j.seq + 1))
            emit({"ack": seq})
            done += 1
        if args.hold:
            emit({"event": "holding", "gen": j.generation, "seq": j.seq})
            sys.stdin.readline()
    except CheckpointWriteError as exc:
        emit({"event": "write_error", "errno": exc.errno, "error": str(exc)})
        return EXIT_WRITE_ERROR
    finally:
        j.close()
    emit({"event": "closed"})
    return 0


def serve(args: argparse.Namespace) -> int:
    """Fork one worker per stdin command; report each worker's end."""
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the server's loop
            code = 1
            try:
                _failpoints.reload(cmd.get("failpoints") or "")
                code = run_open(args, cmd.get("count"))
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        emit(
            {
                "event": "exit",
                "pid": pid,
                "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0,
                "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            }
        )
    return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=("open", "serve"))
    p.add_argument("--root", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--count", type=int, default=None)
    p.add_argument("--hold", action="store_true")
    p.add_argument("--announce", action="store_true", help="report just before Store.open")
    p.add_argument("--durability", default="always")
    p.add_argument("--lock-timeout", type=float, default=0.0)
    p.add_argument("--segment-bytes", type=int, default=8 << 20)
    p.add_argument("--snapshot-bytes", type=int, default=0, help="0: no snapshots")
    p.add_argument("--reserve-bytes", type=int, default=0)
    p.add_argument("--budget-bytes", type=int, default=None)
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.mode == "serve":
        return serve(args)
    return run_open(args, args.count)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
