"""One reader (issue 25 item 3): ``checkpoints verify`` and the lifecycle commands agree.

A run's folder is crafted record by record (the framing, envelopes and records the store and
the lifecycle commands write), then damaged the ways a crash, a disk or a hand can: torn tails,
payloads that are invalid alone but valid when joined with a comma, flipped bits, deep nesting,
wrong types, missing fields, sequence gaps, stale generations, odd snapshots. Each folder is then
read by the real commands, in this process: ``crashpoint checkpoints verify RUN`` (exit 1 and a
list of damage, or 0), ``status RUN`` and ``start RUN`` (exit 65 when they refuse the run as
corrupt). They must agree: verify finds damage exactly when the commands refuse the run as
corrupt, and no command ends in anything but a documented exit code and one line.

The default run crafts 150 folders (seconds); ``-m slow`` sweeps 3,000.
Reproduce a case from its message: ``_craft(random.Random(SEED * 100_003 + index), path)``.
"""

from __future__ import annotations

import contextlib
import copy
import io
import itertools
import json
import os
import random
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from crashpoint.checkpoint import decode_json, run_reducer
from crashpoint.cli import main
from crashpoint.errors import PayloadError

SEED = 2025
MAGIC_VERSION = b"CP\x01"
#: what each command may exit with (the lifecycle's documented codes)
STATUS_CODES = {0, 1, 2, 65}
START_CODES = {0, 1, 2, 65, 69, 70, 73}
DEAD_OWNER = "999999999:1"  # a process group that cannot exist: the run is free to take over
WRONG = [5, -1, 2**63, "x", "", None, True, False, [], {}, ["a", 1], 1.5, {"a": []}, [[["deep"]]]]


def _wrong(rng: random.Random) -> Any:
    """A value of a wrong type, a fresh copy (a shared list could end up holding itself)."""
    return copy.deepcopy(rng.choice(WRONG))


# -- framing (what the store writes, by hand, so that anything can be written) ---------------------


def _canon(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _frame(payload: bytes, kind: int = 0) -> bytes:
    head = MAGIC_VERSION + bytes([kind]) + len(payload).to_bytes(4, "little")
    head += zlib.crc32(payload).to_bytes(4, "little")
    return head + zlib.crc32(head).to_bytes(4, "little") + payload


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for i in range(depth):
        value = [value] if i % 2 else {"n": value}
    return value


# -- a run's records ---------------------------------------------------------------------------


def _records(rng: random.Random) -> list[dict[str, Any]]:
    """A lifecycle run as the commands write it: open, steps, effects (intent, then settled),
    maybe a second attempt and a finish."""
    steps = [f"s{i}" for i in range(rng.randint(1, 4))]
    out: list[dict[str, Any]] = [{"t": "open", "attempt": 1, "steps": steps, "owner": DEAD_OWNER}]
    done = rng.randint(0, len(steps))
    for pos in range(done):
        if rng.random() < 0.4:
            key = f"r:{pos}.{steps[pos]}:mail:0"
            payload = {"to": "ops@example.com", "n": pos, "tags": ["a", "b"]}
            out.append(
                {
                    "t": "intent",
                    "key": key,
                    "kind": "mail",
                    "policy": "retry",
                    "step": steps[pos],
                    "payload": payload,
                }
            )
            if rng.random() < 0.5:
                out.append({"t": "effect", "key": key, "kind": "mail", "via": "call", "result": 1})
        if rng.random() < 0.2:
            out.append({"t": "open", "attempt": 2, "steps": steps, "owner": DEAD_OWNER})
        result = rng.choice([None, 1, "text", {"rows": [1, 2, 3], "ok": True}, [1.5, "é"]])
        out.append({"t": "step", "pos": pos, "name": steps[pos], "kind": "step", "result": result})
    if done == len(steps) and rng.random() < 0.5:
        out.append({"t": "finish", "status": "completed", "output": {"done": True}})
    return out


def _state_after(records: list[dict[str, Any]]) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for rec in records:
        run_reducer(state, rec)
    return state


# -- the mutations -------------------------------------------------------------------------------

Payloads = list[bytes]


def _envelopes(records: list[Any], rng: random.Random) -> Payloads:
    return [_canon({"d": d, "g": 1 + i // 3, "s": i + 1}) for i, d in enumerate(records)]


def _a_record(records: list[Any], rng: random.Random) -> dict[str, Any]:
    """One of the records that is an object (the first, an ``open``, if none is left)."""
    dicts = [r for r in records if isinstance(r, dict) and r]
    if not dicts:
        records[0] = {"t": "open", "attempt": 1, "steps": ["s0"]}
        return dict(records[0])
    return rng.choice(dicts)


def _wrong_type(records: list[Any], rng: random.Random) -> str:
    rec = _a_record(records, rng)
    key = rng.choice([*rec, "t", "owner", "steps", "attempt", "key", "name", "pos", "status"])
    rec[key] = _wrong(rng)
    return f"{rec.get('t')!r}.{key} = {rec[key]!r}"


def _drop_field(records: list[Any], rng: random.Random) -> str:
    rec = _a_record(records, rng)
    key = rng.choice(list(rec))
    del rec[key]
    return f"dropped {key}"


def _deep(records: list[Any], rng: random.Random) -> str:
    rec = _a_record(records, rng)
    depth = rng.choice([60, 180, 189, 190, 191, 250, 252, 253, 254, 255, 256, 300])
    rec[rng.choice(["result", "payload", "output", "extra"])] = _nested(depth)
    return f"nested {depth}"


def _not_a_record(records: list[Any], rng: random.Random) -> str:
    i = rng.randrange(len(records))
    records[i] = _wrong(rng)
    return f"record {i + 1} is {records[i]!r}"


def _plain(records: list[Any], rng: random.Random) -> str:
    records[:] = [{"step": f"s{i}", "result": i} for i in range(len(records))]
    if rng.random() < 0.5:
        records[0] = {"t": rng.choice([5, "custom", None])}
    return "a journal of other records"


RECORD_MUTATIONS: list[Callable[[list[Any], random.Random], str]] = [
    _wrong_type,
    _wrong_type,
    _drop_field,
    _deep,
    _not_a_record,
    _plain,
]


def _comma_batch(payloads: Payloads, rng: random.Random) -> str:
    """Two payloads invalid alone that join into valid records: the first ends where a comma of
    the next record was, the second starts after it."""
    if len(payloads) < 2:
        return "no batch (one record)"
    i = rng.randrange(len(payloads) - 1)
    nxt = payloads[i + 1]
    commas = [j for j, b in enumerate(nxt) if b == ord(",")]
    if not commas:
        return "no batch (no comma)"
    c = rng.choice(commas)
    payloads[i] = payloads[i] + b"," + nxt[:c]
    payloads[i + 1] = nxt[c + 1 :]
    return f"comma batch at records {i + 1}-{i + 2}"


def _raw_payload(payloads: Payloads, rng: random.Random) -> str:
    i = rng.randrange(len(payloads))
    s = i + 1
    payloads[i] = rng.choice(
        [
            b"NaN",
            b'{"d":NaN,"g":1,"s":%d}' % s,
            b'{"d":1e999,"g":1,"s":%d}' % s,
            b'{"d":"\\ud800","g":1,"s":%d}' % s,
            b'{"d":"\xff","g":1,"s":%d}' % s,
            b'{"d":%b,"g":1,"s":%d}' % (b"9" * 5000, s),
            b'{"d":%b%b,"g":1,"s":%d}' % (b"[" * 5000, b"]" * 5000, s),
            b' {"d":{"t":"open"},"g":1,"s":%d} ' % s,
            b'{"d":{"t":"open"},"g":1,"s":%d}x' % s,
            b'{"d":{"t":"open"},"d":{"t":"step"},"g":1,"s":%d}' % s,
            b'{"d":{"t":"open"},"g":1,"s":"%d"}' % s,
            b'{"d":{"t":"open"},"g":-1,"s":%d}' % s,
            b'{"d":{"t":"open"},"g":1,"s":%d,"x":0}' % s,
            b'[{"d":{"t":"open"},"g":1,"s":%d}]' % s,
            b"",
        ]
    )
    return f"record {s} is {payloads[i][:40]!r}"


def _sequence(payloads: Payloads, rng: random.Random) -> str:
    i = rng.randrange(len(payloads))
    try:
        env = decode_json(payloads[i])
        env["s"] + env["g"]
    except (PayloadError, TypeError, KeyError):
        return f"record {i + 1} left as it is (not an envelope)"
    if rng.random() < 0.5:
        env["s"] = rng.choice([0, env["s"] + 1, env["s"] - 1, env["s"] + 5])
        what = f"seq {env['s']}"
    else:
        env["g"] = rng.choice([0, 2**62, env["g"] - 1])
        what = f"generation {env['g']}"
    payloads[i] = _canon(env)
    return f"record {i + 1} has {what}"


PAYLOAD_MUTATIONS: list[Callable[[Payloads, random.Random], str]] = [
    _comma_batch,
    _comma_batch,
    _raw_payload,
    _sequence,
]


def _write_folder(
    folder: Path, records: list[Any], payloads: Payloads, rng: random.Random
) -> list[str]:
    """Write the payloads as framed records into one or more segments (maybe after a snapshot
    of the state so far), then damage the bytes; return what was done."""
    folder.mkdir(parents=True)
    notes: list[str] = []
    kinds = [0] * len(payloads)
    if rng.random() < 0.05:
        k = rng.randrange(len(kinds))
        kinds[k] = 1
        notes.append(f"record {k + 1} framed as a snapshot")
    first = 1
    if rng.random() < 0.25 and len(payloads) > 1:  # a snapshot covers the first k records
        k = rng.randint(1, len(payloads) - 1)
        try:
            state = _state_after([r for r in records[:k] if isinstance(r, dict)])
        except (PayloadError, KeyError, TypeError, AttributeError, ValueError):
            state = {"records": records[:k]}
        seq, gen = k, 1
        if rng.random() < 0.3:
            key = rng.choice(["order", "results", "effects", "status", "attempts", "steps"])
            state[key] = _wrong(rng)
            notes.append(f"snapshot state {key} = {state[key]!r}")
        if rng.random() < 0.1:
            seq += rng.choice([-1, 1])
            notes.append("snapshot named after another record")
        snap = _frame(_canon({"gen": gen, "seq": k, "state": state}), 1)
        (folder / f"snap-{seq:012d}.cps").write_bytes(snap)
        notes.append(f"snapshot at {k}")
        if rng.random() < 0.7:
            payloads, kinds, first = payloads[k:], kinds[k:], k + 1
    cuts = sorted(rng.sample(range(1, len(payloads)), min(rng.randint(0, 2), len(payloads) - 1)))
    bounds = [0, *cuts, len(payloads)]
    segments = []
    for a, b in itertools.pairwise(bounds):
        data = b"".join(_frame(p, kd) for p, kd in zip(payloads[a:b], kinds[a:b], strict=True))
        segments.append([first + a, data])
    if len(segments) > 2 and rng.random() < 0.2:
        del segments[1]
        notes.append("a middle segment is gone")
    if segments and rng.random() < 0.3:  # bytes damaged: a flipped bit, a torn or zeroed tail
        seg = rng.choice(segments)
        data = bytearray(seg[1])
        how = rng.choice(["flip", "torn", "zeros", "garbage"])
        if how == "flip" and data:
            at = rng.randrange(len(data))
            data[at] ^= 1 << rng.randrange(8)
        elif how == "torn" and data:
            del data[rng.randrange(len(data)) :]
        elif how == "zeros":
            data += bytes(rng.randint(1, 40))
        else:
            data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 40)))
        seg[1] = bytes(data)
        notes.append(f"{how} in segment {seg[0]}")
    for start, data in segments:
        (folder / f"seg-{start:012d}.log").write_bytes(data)
    return notes


def _craft(rng: random.Random, folder: Path) -> str:
    """Write one crafted run into ``folder``; return what was done to it."""
    records: list[Any] = _records(rng)
    notes = []
    for _ in range(rng.choice([0, 1, 1, 1, 2])):
        notes.append(rng.choice(RECORD_MUTATIONS)(records, rng))
    payloads = _envelopes(records, rng)
    for _ in range(rng.choice([0, 0, 1, 1, 2])):
        notes.append(rng.choice(PAYLOAD_MUTATIONS)(payloads, rng))
    notes += _write_folder(folder, records, payloads, rng)
    return "; ".join(notes) or "intact"


# -- the readers -----------------------------------------------------------------------------


def _command(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(list(argv))
    except Exception as exc:  # a raw exception is a finding (a traceback for the user)
        return -1, out.getvalue(), f"raised {type(exc).__name__}: {exc}"
    return rc, out.getvalue(), err.getvalue()


def _readers_disagree(store: Path, run_id: str) -> str | None:
    """None if verify and the commands agree on the run; else what they said."""
    root = str(store)
    vrc, vout, verr = _command("checkpoints", "--store", root, "verify", run_id, "--json")
    if vrc not in (0, 1):
        return f"verify exited {vrc}: {verr.strip()}"
    damage = json.loads(vout)["damage"]
    if (vrc == 1) != bool(damage):
        return f"verify exited {vrc} with {len(damage)} damage"
    said = [f"verify {vrc} {[d['reason'] for d in damage][:2]}"]
    refused = []
    for argv, codes in (
        (("status", run_id, "--json"), STATUS_CODES),
        (("start", run_id), START_CODES),
    ):
        rc, _out, err = _command("checkpoints", "--store", root, *argv)
        said.append(f"{argv[0]} {rc} {err.strip()[:160]!r}")
        if rc not in codes:
            return f"{argv[0]} exited {rc}, not a documented code; " + " | ".join(said)
        if rc != 0 and len(err.strip().splitlines()) != 1:
            return f"{argv[0]} did not say one line; " + " | ".join(said)
        refused.append(rc == 65)
    if any(r != bool(damage) for r in refused):
        return " | ".join(said)
    return None


def _sweep(tmp_path: Path, n: int, seed: int) -> list[str]:
    disagreements = []
    for i in range(n):
        store = tmp_path / f"c{i}"
        rng = random.Random(seed * 100_003 + i)
        what = _craft(rng, store / "r")
        why = _readers_disagree(store, "r")
        if why is not None:
            disagreements.append(f"case {i} ({what}): {why}")
    return disagreements


def test_verify_and_the_commands_agree_on_crafted_runs(tmp_path: Path) -> None:
    found = _sweep(tmp_path, 150, SEED)
    assert found == [], f"{len(found)} of 150 disagree:\n" + "\n".join(found[:15])


@pytest.mark.slow
def test_verify_and_the_commands_agree_on_thousands_of_crafted_runs(tmp_path: Path) -> None:
    found = _sweep(tmp_path, 3000, SEED + 1)
    assert found == [], f"{len(found)} of 3000 disagree:\n" + "\n".join(found[:15])


def test_the_crafted_runs_are_not_all_damaged_or_all_whole(tmp_path: Path) -> None:
    """The sweep is no stub: it crafts intact runs, damaged ones and other journals."""
    codes: dict[int, int] = {}
    for i in range(120):
        store = tmp_path / f"c{i}"
        _craft(random.Random(SEED * 100_003 + i), store / "r")
        rc = _command("checkpoints", "--store", str(store), "status", "r")[0]
        codes[rc] = codes.get(rc, 0) + 1
    assert codes.get(0, 0) >= 20, codes
    assert codes.get(65, 0) >= 20, codes
    assert codes.get(1, 0) >= 3, codes  # other journals, steps left, ...


# -- the batch decoder --------------------------------------------------------------------------


def test_payloads_invalid_alone_never_read_as_records_when_batched() -> None:
    """Three records, the first two cut at a comma of the second: the batch decoder refuses them
    (the records are then decoded one by one, and the first one is damage)."""
    from crashpoint.checkpoint._record import decode_many  # the private helper under test

    a, b, c = (_canon({"d": {"t": "step", "n": [i, i]}, "g": 1, "s": i}) for i in (1, 2, 3))
    cut = b.index(b",")
    batch = [a + b"," + b[:cut], b[cut + 1 :], c]
    assert decode_many([a, b, c]) == [decode_json(p) for p in (a, b, c)]
    assert decode_many(batch) is None
    for p in batch[:2]:
        with pytest.raises(PayloadError):
            decode_json(p)


def test_the_batch_decoder_says_what_the_single_one_says() -> None:
    """Over fragments of records cut and glued at random: ``decode_many`` returns exactly what
    ``decode_json`` returns for each, or None (never a value decode_json refuses)."""
    from crashpoint.checkpoint._record import decode_many  # the private helper under test

    rng = random.Random(SEED)
    base = [_canon({"d": d, "g": 1, "s": i}) for i, d in enumerate(_records(rng) * 2, 1)]
    checked = 0
    for _ in range(3000):
        ps = list(base[: rng.randint(1, len(base))])
        for _ in range(rng.randint(0, 3)):
            i = rng.randrange(len(ps))
            at = rng.randrange(len(ps[i]) + 1)
            if i + 1 < len(ps) and rng.random() < 0.5:
                ps[i], ps[i + 1] = ps[i][:at], ps[i][at:] + b"," + ps[i + 1]
            else:
                ps[i] = ps[i][:at] + rng.choice([b",", b" ", b"]", b"}", b'"', b"\\"]) + ps[i][at:]
        got = decode_many(ps)
        single: list[Any] = []
        for p in ps:
            try:
                single.append(decode_json(p))
            except PayloadError:
                single.append(PayloadError)
        if got is not None:
            assert got == single, ps
            checked += 1
        assert got is not None or PayloadError in single or any(p != p.strip() for p in ps)
    assert checked > 100


def test_a_folder_is_written_where_the_craft_says(tmp_path: Path) -> None:
    _craft(random.Random(1), tmp_path / "r")
    names = os.listdir(tmp_path / "r")
    assert any(n.startswith(("seg-", "snap-")) for n in names), names
