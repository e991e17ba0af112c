"""Child program: write until the disk refuses, free space, reopen, and report what survived.

Run by path: ``python tests/crash/_disk_fill.py --root R --run ID --seed S`` plus one way to
run out of room:

``--filler PATH --filler-bytes N``  write N bytes to PATH first (on a small tmpfs this leaves a
                                    few KiB for the store); freeing space deletes it.
``--fsize BYTES``                   ``RLIMIT_FSIZE`` = BYTES with SIGXFSZ ignored, so a write past
                                    it fails with EFBIG; freeing space raises the limit again.

The whole sequence runs in this one process (a tmpfs in a private mount namespace vanishes with
it): append until ``CheckpointWriteError`` → try once more → close → free → reopen → compare
every record with what was acknowledged → append a few more. It prints one JSON report on
stdout; the test asserts on it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sys
import traceback
from typing import Any

from _writer import record_data

from crashpoint._fsio import FsOps
from crashpoint.checkpoint import Store
from crashpoint.checkpoint._record import encode_json, scan
from crashpoint.errors import CheckpointWriteError

MAX_APPENDS = 100_000
MORE_AFTER_REOPEN = 3


class CountingFs(FsOps):
    """The real thing, counting writes the OS took only in part (the torn-tail makers)."""

    def __init__(self) -> None:
        self.short_writes = 0

    def write(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            if n < len(view):
                self.short_writes += 1
            view = view[n:]


def fs_facts(path: str) -> dict[str, Any]:
    st = os.statvfs(path)
    kind = ""
    with open("/proc/self/mounts") as f:
        best = ""
        real = os.path.realpath(path)
        for line in f:
            _dev, mnt, typ = line.split()[:3]
            if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, kind = mnt, typ
    return {"type": kind, "bytes": st.f_blocks * st.f_frsize, "free": st.f_bavail * st.f_frsize}


def matches(records: list[Any], seed: int, upto: int) -> str:
    """'' if ``records`` are exactly records 1..upto, else what differs."""
    if len(records) != upto:
        return f"{len(records)} records, expected {upto}"
    for i, data in enumerate(records, start=1):
        if encode_json(data) != encode_json(record_data(seed, i)):
            return f"record {i} differs"
    return ""


def run(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {}
    if args.filler:
        with open(args.filler, "wb") as f:
            f.write(b"\xa5" * args.filler_bytes)
            f.flush()
            os.fsync(f.fileno())
    if args.fsize:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (args.fsize, hard))
    os.makedirs(args.root, exist_ok=True)
    report["fs"] = fs_facts(args.root)

    counting = CountingFs()
    store = Store(args.root, reserve_bytes=0, fs=counting)
    j = store.open(args.run)
    report["gen"] = j.generation
    error: CheckpointWriteError | None = None
    acked = 0
    for _ in range(MAX_APPENDS):
        size_before = os.path.getsize(j._path)
        try:
            acked = j.append(record_data(args.seed, j.seq + 1))
        except CheckpointWriteError as exc:
            error = exc
            break
    if error is None:
        report["never_failed"] = True
        j.close()
        return report
    segment = j._path
    report.update(
        acked=acked,
        errno=error.errno,
        error=str(error),
        is_oserror=isinstance(error, OSError),
        size_before=size_before,
        size_after=os.path.getsize(segment),
        short_writes=counting.short_writes,
    )
    buf = open(segment, "rb").read()  # noqa: SIM115 - one read, closed by refcount
    res = scan(buf)
    report["scan_after"] = {"records": len(res.records), "stop": res.stop, "end": res.end}
    try:  # a journal that failed stays stopped until it is reopened
        j.append(record_data(args.seed, acked + 1))
        report["again"] = "accepted"
    except CheckpointWriteError as exc:
        report["again"] = exc.errno
    report["size_after_again"] = os.path.getsize(segment)
    j.close()

    if args.filler:
        os.unlink(args.filler)
    if args.fsize:
        _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    report["fs_freed"] = fs_facts(args.root)

    with Store(args.root, reserve_bytes=0).open(args.run) as j2:
        report["reopen"] = {
            "gen": j2.generation,
            "seq": j2.seq,
            "recovery": j2.recovery.describe(),
            "torn": j2.recovery.torn_tail is not None,
            "damage": len(j2.recovery.damage),
            "mismatch": matches(j2.state.get("records", []), args.seed, acked),
        }
        for _ in range(MORE_AFTER_REOPEN):
            j2.append(record_data(args.seed, j2.seq + 1))
    loaded = Store(args.root, reserve_bytes=0).read(args.run)
    report["final"] = {
        "seq": loaded.seq,
        "mismatch": matches(loaded.state["records"], args.seed, loaded.seq),
    }
    return report


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--filler", default="")
    p.add_argument("--filler-bytes", type=int, default=0)
    p.add_argument("--fsize", type=int, default=0)
    args = p.parse_args(argv)
    try:
        report = run(args)
    except BaseException as exc:  # report it: the parent shows it with the JSON
        report = {"crashed": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    os.write(1, json.dumps(report).encode() + b"\n")
    return 0 if "crashed" not in report else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
