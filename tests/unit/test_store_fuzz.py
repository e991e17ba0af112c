"""Every read is total: mutated real stores yield a prefix, a repair or CheckpointCorrupt.

A template store is built once with the library (runs with steps, effects, an effect left in
doubt, a pause, a finished run, a raw journal; small segments and snapshots, so each run has
several files). Each example copies it, mutates it (flipped bytes, truncations, insertions,
zeroed ranges, forged frame headers, and records re-encoded WITH VALID CHECKSUMS around odd
payloads: deep nesting, huge numbers, NaN, lone surrogates, wrong types; odd meta.json and lock
files), then calls every read: ``Store.read``, ``Store.verify``, ``Store.runs``, ``plan``,
``open_run`` / ``Store.open`` (with ``on_corrupt`` raise and rollback, then a reopen), and the
operator commands in-process (``crashpoint.cli.main``). Only ``CheckpointCorrupt`` (or the
documented ``RunDeadLettered`` of a run that says it is dead) may escape the API; the CLI
returns one of its exit codes. ``verify`` and ``read`` must agree, and after a rollback the run
must reopen clean.

The default run takes a seeded corpus of crafted cases and a small Hypothesis sample; the
``slow`` test runs 10,000 mutated stores (``pytest -m slow tests/unit/test_store_fuzz.py``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
import struct
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from crashpoint.checkpoint import (
    Checkpointing,
    SnapshotPolicy,
    Store,
    open_run,
    plan,
    run_reducer,
)
from crashpoint.checkpoint._record import HEADER, scan
from crashpoint.cli import main
from crashpoint.errors import CheckpointCorrupt, RunDeadLettered, RunPaused

RUNS = ("done", "busy", "paused", "raw")  # "raw" is a plain journal (records_reducer)
CLI_CODES = {0, 1, 2}  # ok, found (damage, stale), error with a one-line message

# -- the template store -------------------------------------------------------------------

# tmpfs where there is one: the stores are real files, and fsync (every open syncs) is cheap
_SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _boom(payload: Any, key: str) -> Any:
    raise ConnectionError("the crash came in the in-doubt window")


@cache
def template() -> dict[str, bytes]:
    """Relative path -> bytes of a real store built with the library (built once)."""
    root = tempfile.mkdtemp(prefix="cp-fuzz-template-", dir=_SCRATCH)
    try:
        store = Store(
            root,
            durability="none",
            segment_bytes=600,
            snapshots=SnapshotPolicy(min_bytes=900, ratio=0.5),
        )
        steps = [f"s{i}" for i in range(8)]
        for attempt in range(2):  # two generations: a second attempt replays
            with open_run(store, "done", steps=steps, checkpointing=Checkpointing()) as run:
                for i, name in enumerate(steps):
                    run.step(
                        name,
                        lambda i=i: {
                            "i": i,
                            "text": "x" * 40,
                            "f": i / 3,
                            "nested": [[i, {"k": [i]}]],
                        },
                    )
                    if i % 3 == 0:
                        run.effect("email", {"to": f"u{i}@example.com"}, lambda p, k: {"id": k})
                if attempt:
                    run.finish({"ok": True, "n": len(steps)})
        with open_run(store, "busy", steps=steps) as run:
            for i, name in enumerate(steps[:5]):
                run.step(name, lambda i=i: ["r", i, None, True, 1.5e300])
            run.begin(steps[5])
            with contextlib.suppress(ConnectionError):
                run.effect("charge", {"amount": 12}, _boom, policy="ask")
        with open_run(store, "paused", steps=["a", "review", "b"]) as run:
            run.step("a", lambda: "A" * 100)
            with contextlib.suppress(RunPaused):
                run.approval("review", {"diff": "+1 -1"})
        plain = Store(
            root, durability="none", segment_bytes=600, snapshots=SnapshotPolicy(enabled=False)
        )
        with plain.open("raw") as j:
            for i in range(30):
                j.append({"n": i, "blob": "y" * 30})
            j.set_meta(status="running", note="a raw journal")
        # a crash mid-append: a torn tail at the end of busy's last segment
        _, segs = _files_of(os.path.join(root, "busy"))
        with open(segs[-1], "ab") as f:
            f.write(HEADER.pack(b"CP", 1, 0, 500, 0, 0)[:10])
        out = {}
        for dirpath, _dirs, names in os.walk(root):
            for n in names:
                p = os.path.join(dirpath, n)
                with open(p, "rb") as f:
                    out[os.path.relpath(p, root)] = f.read()
        return out
    finally:
        shutil.rmtree(root)


def _files_of(folder: str) -> tuple[list[str], list[str]]:
    names = sorted(os.listdir(folder))
    return (
        [os.path.join(folder, n) for n in names if n.startswith("snap-")],
        [os.path.join(folder, n) for n in names if n.startswith("seg-")],
    )


def test_the_template_has_what_the_fuzzer_needs() -> None:
    t = template()
    for rid in RUNS:
        assert f"{rid}/lock" in t
        assert f"{rid}/meta.json" in t
    assert sum(1 for p in t if p.startswith("done/seg-")) >= 2
    assert any(p.startswith("done/snap-") for p in t)
    assert sum(1 for p in t if p.startswith("raw/seg-")) >= 2
    with _materialize(t) as root:  # and it reads clean (a torn tail is not damage)
        s = Store(root)
        assert all(not d for d, _ in s.verify().values())
        assert {ln.action for ln in plan(s, "busy")} >= {"replay", "in-doubt", "run"}
        assert s.verify("busy")["busy"][1], "busy ends in a torn tail"


# -- mutations ----------------------------------------------------------------------------

#: Raw JSON texts that the store never writes (or writes only in other places).
ODD_RAW: tuple[bytes, ...] = (
    b"[" * 257 + b"]" * 257,
    b"[" * 5000 + b"]" * 5000,
    b'{"a":' * 300 + b"1" + b"}" * 300,
    b"[" * 100000,
    b'"' + b"[" * 3000 + b'"',
    b"[" + b",".join([b"[]"] * 3000) + b"]",
    b"1e400",
    b"-1e400",
    b"9" * 400 + b".5",
    b"1" + b"0" * 5000,
    b"1" + b"0" * 4000,
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"-1",
    b"0",
    b"1.5",
    b"2e308",
    b"9223372036854775808",
    b"4611686018427387904",
    b"1e-400",
    b"-0",
    b'"\\ud800"',
    b'"\\udc00x"',
    b'"\\ud83d\\ude00"',
    b'"\\u0000"',
    b'"\xff\xfe"',
    b"null",
    b"true",
    b"false",
    b"[]",
    b"{}",
    b'"x"',
    b"[1,2]",
    b'{"t":"step"}',
    b'{"t":"finish","status":"weird"}',
    b'{"t":"open","steps":"abc","attempt":1e400}',
    b'{"t":"intent","key":[],"kind":1}',
    b'{"t":"decision","name":"review","approved":1}',
    b'{"t":"pause"}',
    b'{"t":7}',
    b'"step"',
    b"1 2",
    b"",
    b"{",
    b'{"s":1,"g":1,"d":1,"x":1}',
)

_PLACEHOLDER = "\x00odd\x00"
_PLACEHOLDER_JSON = json.dumps(_PLACEHOLDER).encode()


def _frame(payload: bytes, kind: int, *, version: int = 1, length: int | None = None) -> bytes:
    """A record with valid checksums (and, to forge headers, any version and length)."""
    n = len(payload) if length is None else length
    head = struct.pack("<2sBBII", b"CP", version, kind, n, zlib.crc32(payload))
    return head + struct.pack("<I", zlib.crc32(head)) + payload


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


def _with_odd(obj: Any, pick: int, raw: bytes) -> bytes:
    """``obj`` as JSON with the node at path number ``pick`` replaced by the raw text ``raw``."""
    paths = list(_paths(obj))
    path = paths[pick % len(paths)]
    if not path:
        return raw
    node = obj
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = _PLACEHOLDER
    text = json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass").replace(_PLACEHOLDER_JSON, raw, 1)  # odd too


def _loads(data: bytes) -> Any:
    """The test's own reading of a payload an earlier mutation may have made odd already."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


@dataclass(frozen=True, repr=False)
class Mutation:
    how: str
    file: int  # index into the sorted files, modulo their count
    where: float  # a position in the file (fraction of its size), or the record to pick
    value: int  # xor mask, a length, or the JSON node to replace
    raw: bytes = b""

    def __repr__(self) -> str:  # short: some raw values are 100 kB
        raw = repr(self.raw) if len(self.raw) < 60 else f"{self.raw[:40]!r}+...({len(self.raw)})"
        return f"Mutation({self.how!r}, {self.file}, {self.where!r}, {self.value}, {raw})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # Hypothesis prints it so too
        p.text(repr(self))

    def apply(self, files: dict[str, bytes]) -> str:
        """Mutate ``files`` in place; return the path changed."""
        names = sorted(files)
        name = names[self.file % len(names)]
        data = files[name]
        pos = int(self.where * len(data)) if data else 0
        if self.how == "flip" and data:
            pos = min(pos, len(data) - 1)
            data = data[:pos] + bytes([data[pos] ^ (self.value % 255 + 1)]) + data[pos + 1 :]
        elif self.how == "truncate":
            data = data[:pos]
        elif self.how == "insert":
            data = data[:pos] + self.raw + data[pos:]
        elif self.how == "zero":
            data = data[:pos] + b"\0" * min(self.value, len(data) - pos) + data[pos + self.value :]
        elif self.how == "delete":
            del files[name]
            return name
        elif self.how in ("odd", "forge"):
            data = self._odd(name, data)
        files[name] = data
        return name

    def _odd(self, name: str, data: bytes) -> bytes:
        base = os.path.basename(name)
        if not (base.startswith("seg-") or base.startswith("snap-")):  # meta.json, lock
            obj = _loads(data)
            return self.raw if obj is None else _with_odd(obj, self.value, self.raw)
        res = scan(data)
        if not res.records:
            return data + _frame(self.raw, 0)
        off, kind, payload = res.records[int(self.where * len(res.records)) % len(res.records)]
        end = off + HEADER.size + len(payload)
        if self.how == "forge":  # a header with valid checksums that lies
            forged = [
                _frame(payload, kind, length=0xFFFFFFFF)[: HEADER.size],
                _frame(payload, kind, version=2),
                _frame(payload, kind ^ 1),
                _frame(payload, 7),
                _frame(payload, kind, length=len(payload) + 1),
            ]
            return data[:off] + forged[self.value % len(forged)] + data[end:]
        obj = _loads(payload)
        new = self.raw if obj is None else _with_odd(obj, self.value, self.raw)
        return data[:off] + _frame(new, kind) + data[end:]


odd_raw = st.sampled_from(ODD_RAW) | st.binary(max_size=40)
mutations = st.one_of(
    st.builds(
        Mutation,
        how=st.sampled_from(["flip", "truncate", "zero", "delete"]),
        file=st.integers(0, 10**6),
        where=st.floats(0, 1),
        value=st.integers(1, 300),
    ),
    st.builds(
        Mutation,
        how=st.just("insert"),
        file=st.integers(0, 10**6),
        where=st.floats(0, 1),
        value=st.just(0),
        raw=st.binary(min_size=1, max_size=64) | st.sampled_from(ODD_RAW[:6]),
    ),
    st.builds(
        Mutation,
        how=st.sampled_from(["odd", "odd", "odd", "forge"]),
        file=st.integers(0, 10**6),
        where=st.floats(0, 1),
        value=st.integers(0, 10**6),
        raw=odd_raw,
    ),
)


# -- what must hold -----------------------------------------------------------------------


@contextlib.contextmanager
def _materialize(files: dict[str, bytes]) -> Iterator[str]:
    root = tempfile.mkdtemp(prefix="cp-fuzz-", dir=_SCRATCH)
    try:
        for rel, data in files.items():
            p = os.path.join(root, rel)
            os.makedirs(os.path.dirname(p), mode=0o700, exist_ok=True)
            with open(p, "wb") as f:
                f.write(data)
        yield root
    finally:
        shutil.rmtree(root)


def _cli(*argv: str) -> int:
    """``crashpoint`` in-process, printing to strict UTF-8 streams as a real process would."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
        out.flush()
        err.flush()
    text = err.buffer.getvalue().decode()  # type: ignore[attr-defined]
    assert code in CLI_CODES, (argv, code, text)
    assert "Traceback" not in text, text
    return code


def _agree(store: Store, rid: str) -> None:
    """verify and read see the same run: damage in one is damage in the other."""
    for reducer, read in ((None, lambda s: s.read(rid)), (run_reducer, lambda s: plan(s, rid))):
        if rid == "raw" and reducer is run_reducer:
            continue
        kw = {} if reducer is None else {"reducer": reducer}
        damage, _ = store.verify(rid, **kw)[rid]
        try:
            read(store)
            refused = None
        except CheckpointCorrupt as exc:
            refused = exc
        assert (refused is not None) == bool(damage), (rid, damage, refused)
        rolled = Store(store.root, on_corrupt="rollback")
        if reducer is None:
            assert bool(rolled.read(rid).damage) == bool(damage)
        else:
            plan(rolled, rid)  # the valid prefix: never raises


def _open(store: Store, rid: str) -> None:
    if rid == "raw":
        with store.open(rid, create=False) as j:
            j.append({"n": "after", "blob": ""})
        return
    try:
        with open_run(store, rid) as run:
            assert run.status
    except RunDeadLettered:
        pass  # a (re-encoded) record says the run is dead: the documented refusal


def exercise(files: dict[str, bytes], runs: set[str], *, cli: bool = True) -> None:
    with _materialize(files) as root:
        store = Store(root)
        present = [r for r in RUNS if os.path.isdir(os.path.join(root, r))]
        store.runs()
        store.verify()
        for rid in runs & set(present):
            _agree(store, rid)
        if cli:
            _cli("checkpoints", "--store", root, "list")
            _cli("checkpoints", "--store", root, "verify", "--json")
            _cli("checkpoints", "--store", root, "stale", "--older-than", "0s")
            _cli("checkpoints", "--store", root, "prune", "--keep", "0", "--dry-run")
            for rid in runs & set(present):
                _cli("checkpoints", "--store", root, "show", rid)
                _cli("checkpoints", "--store", root, "plan", rid, "--json")
        for rid in runs & set(present):
            try:
                _open(store, rid)
            except CheckpointCorrupt:
                pass  # on_corrupt="raise": the documented refusal
            rolled = Store(root, on_corrupt="rollback")
            _open(rolled, rid)
            # a repair leaves nothing a later open trips over
            kw: dict[str, Any] = {} if rid == "raw" else {"reducer": run_reducer}
            damage, _ = store.verify(rid, **kw)[rid]
            assert not damage, (rid, damage)
            _open(store, rid)


def _run_of(path: str) -> str:
    return path.split(os.sep, 1)[0]


def run_mutations(muts: list[Mutation], *, cli: bool = True) -> None:
    files = dict(template())
    runs = {_run_of(m.apply(files)) for m in muts}
    exercise(files, runs, cli=cli)


# -- the seeded corpus (default run) --------------------------------------------------------


def _corpus() -> list[tuple[str, list[Mutation]]]:
    t = sorted(template())
    idx = {name: i for i, name in enumerate(t)}

    def pick(run: str, prefix: str, last: bool = False) -> int:
        names = [n for n in t if n.startswith(f"{run}/{prefix}")]
        return idx[names[-1] if last else names[0]]

    cases: list[tuple[str, list[Mutation]]] = []
    odd = [
        b"[" * 5000 + b"]" * 5000,
        b"1e400",
        b"1" + b"0" * 5000,
        b"NaN",
        b'"\\ud800"',
        b'"x"',
        b"null",
        b"-1",
        b"4611686018427387904",
        b'"\xff\xfe"',
    ]
    for k, raw in enumerate(odd):  # the envelope, its fields, the data: a few odd values
        for node in (0, 1 + k % 3, 4 + k % 5):
            cases.append(
                (
                    f"odd-seg-{raw[:8]!r}-{node}",
                    [Mutation("odd", pick("done", "seg-", last=True), 0.0, node, raw)],
                )
            )
    for raw in (b"[" * 300 + b"]" * 300, b"1e400", b'"\\udc00"', b"[]", b'{"order":"ab"}'):
        for node in (0, 3, 9):
            cases.append(
                (
                    f"odd-snap-{raw[:8]!r}-{node}",
                    [Mutation("odd", pick("done", "snap-"), 0.0, node, raw)],
                )
            )
    for run, raw in (
        ("done", b'{"t":"finish","status":"weird"}'),
        ("busy", b'{"t":"open","steps":"abc"}'),
        ("busy", b'{"t":"intent","key":[],"kind":1}'),
        ("paused", b'{"t":7}'),
        ("paused", b"[" * 400 + b"]" * 400),
    ):
        cases.append(
            (
                f"odd-data-{run}-{raw[:12]!r}",
                [Mutation("odd", pick(run, "seg-", last=True), 0.5, 3, raw)],
            )
        )
    for f in ("meta.json", "lock"):
        for raw in (
            b"[" * 100000,
            b'{"generation":1e400}',
            b'{"generation":[1]}',
            b'{"generation":' + b"9" * 4300 + b"}",
            b'{"status":"\\ud800"}',
        ):
            cases.append(
                (f"odd-{f}-{raw[:14]!r}", [Mutation("odd", idx[f"done/{f}"], 0.0, 0, raw)])
            )
    for k in range(5):
        cases.append((f"forge-{k}", [Mutation("forge", pick("raw", "seg-"), 0.3, k)]))
    cases.append(("forge-snap", [Mutation("forge", pick("done", "snap-"), 0.0, 0)]))
    for how in ("truncate", "zero", "flip"):
        for where in (0.05, 0.5):
            cases.append((f"{how}-{where}", [Mutation(how, pick("done", "seg-"), where, 40)]))
    # the double fault: a damaged snapshot and a torn tail in the same run
    cases.append(
        (
            "snapshot-and-torn-tail",
            [
                Mutation("flip", pick("done", "snap-"), 0.5, 1),
                Mutation("truncate", pick("done", "seg-", last=True), 0.9, 0),
            ],
        )
    )
    rng = random.Random(13)
    cases.append(
        (
            "odd-twice-surrogate",  # an earlier odd value decoded by the next mutation
            [
                Mutation("odd", idx["done/meta.json"], 0.0, 1, b'"\\ud800"'),
                Mutation("odd", idx["done/meta.json"], 0.0, 2, b'"\\ud800"'),
            ],
        )
    )
    for i in range(8):  # and a seeded handful of everything at once
        muts = [
            Mutation(
                rng.choice(["flip", "truncate", "insert", "zero", "odd", "forge"]),
                rng.randrange(len(t)),
                rng.random(),
                rng.randrange(10**6),
                rng.choice(ODD_RAW),
            )
            for _ in range(rng.randint(1, 3))
        ]
        cases.append((f"seeded-{i}", muts))
    return cases


CORPUS = _corpus()


@pytest.mark.parametrize("muts", [c for _, c in CORPUS], ids=[n for n, _ in CORPUS])
def test_seeded_corpus(muts: list[Mutation]) -> None:
    run_mutations(muts)


def test_the_corpus_reaches_the_checks() -> None:
    """The odd payloads are read as damage (not silently accepted, not a crash)."""
    for raw, where in (
        (b"1e400", "done/seg-"),
        (b'"\\ud800"', "done/seg-"),
        (b"[" * 5000 + b"]" * 5000, "done/snap-"),
    ):
        files = dict(template())
        name = next(n for n in sorted(files) if n.startswith(where))
        i = sorted(files).index(name)
        Mutation("odd", i, 0.0, 3, raw).apply(files)
        with _materialize(files) as root:
            damage, _ = Store(root).verify("done")["done"]
            assert damage
            assert "does not decode" in damage[0].reason, damage
            with pytest.raises(CheckpointCorrupt):
                Store(root).read("done")


# -- Hypothesis ------------------------------------------------------------------------------

_SETTINGS = {
    "deadline": None,
    "phases": [Phase.explicit, Phase.generate],
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


@settings(max_examples=15, derandomize=True, **_SETTINGS)  # type: ignore[arg-type]
@given(st.lists(mutations, min_size=1, max_size=3))
def test_mutated_stores_sample(muts: list[Mutation]) -> None:
    run_mutations(muts)


SLOW_CHUNKS = 20
SLOW_PER_CHUNK = 500  # 20 x 500 = 10,000 mutated stores


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(SLOW_CHUNKS))
def test_mutated_stores_10k(chunk: int) -> None:
    seen: list[int] = []

    @settings(max_examples=SLOW_PER_CHUNK, database=None, **_SETTINGS)  # type: ignore[arg-type]
    @given(st.lists(mutations, min_size=1, max_size=3))
    def one(muts: list[Mutation]) -> None:
        seen.append(1)
        run_mutations(muts, cli=len(seen) % 4 == 0)  # the CLI on every fourth store

    one()
    assert len(seen) >= SLOW_PER_CHUNK
