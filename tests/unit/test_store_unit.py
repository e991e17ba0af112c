"""The checkpoint store, in process: framing, settings, run ids, secrets, modes, O(N), errors."""

from __future__ import annotations

import errno
import os
import pickle
import stat
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from crashpoint.checkpoint import (
    REDACTED,
    Durability,
    Redactor,
    Secret,
    SnapshotPolicy,
    Store,
    _record,
    open_run,
    validate_run_id,
)
from crashpoint.checkpoint._record import (
    HEADER,
    KIND_RECORD,
    KIND_SNAPSHOT,
    MAGIC,
    VERSION,
    encode,
    encode_json,
    scan,
)
from crashpoint.errors import (
    CheckpointCorrupt,
    CheckpointWriteError,
    CrashpointError,
    DiskBudgetExceeded,
    EffectInDoubt,
    EffectMismatch,
    InvalidArgument,
    InvalidRunId,
    ResumeMismatch,
    RunDeadLettered,
    RunLocked,
    RunNotFound,
    RunPaused,
    WrongArgumentType,
)

# -- framing ----------------------------------------------------------------------------------


def _frame(i: int) -> bytes:
    return encode(encode_json({"i": i, "text": "ünïcode ✓" * (i + 1)}))


def _with_header(magic: bytes, version: int, payload: bytes) -> bytes:
    """A record whose header checksum is valid but whose magic or version is not ours."""
    head = struct.pack("<2sBBII", magic, version, KIND_RECORD, len(payload), zlib.crc32(payload))
    return head + struct.pack("<I", zlib.crc32(head)) + payload


def test_encode_layout() -> None:
    payload = encode_json({"b": 1, "a": "é"})
    assert payload == '{"a":"é","b":1}'.encode()  # canonical: sorted, compact, UTF-8
    frame = encode(payload, KIND_SNAPSHOT)
    magic, version, kind, length, pcrc, hcrc = HEADER.unpack_from(frame)
    assert (magic, version, kind, length) == (MAGIC, VERSION, KIND_SNAPSHOT, len(payload))
    assert pcrc == zlib.crc32(payload)
    assert hcrc == zlib.crc32(frame[:12])
    assert frame[16:] == payload
    assert len(frame) == HEADER.size + len(payload) == 16 + len(payload)


def test_encode_json_refuses_nan() -> None:
    with pytest.raises(ValueError, match="Out of range float"):
        encode_json({"x": float("nan")})


def test_encode_refuses_an_oversized_payload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_record, "MAX_PAYLOAD", 10)
    assert len(encode(b"x" * 10)) == 26
    with pytest.raises(ValueError, match="11 bytes exceeds 10"):
        encode(b"x" * 11)


def test_scan_clean() -> None:
    frames = [_frame(i) for i in range(3)]
    buf = b"".join(frames)
    res = scan(buf)
    assert res.stop == "end"
    assert res.end == len(buf)
    assert [off for off, _, _ in res.records] == [0, len(frames[0]), len(frames[0] + frames[1])]
    assert [p for _, _, p in res.records] == [f[16:] for f in frames]
    assert scan(b"") == _record.ScanResult([], 0, "end")
    limited = scan(buf, limit=2)
    assert len(limited.records) == 2
    assert limited.end == len(frames[0] + frames[1])


GOOD = _frame(0) + _frame(1)


@pytest.mark.parametrize(
    ("tail", "stop", "reason"),
    [
        (_frame(2)[:10], "torn", "incomplete header (10 bytes)"),
        (_frame(2)[:16], "torn", "runs past the end of the file"),
        (_frame(2)[:-1], "torn", "runs past the end of the file"),
        (bytes(40), "torn", "zero-filled tail"),
        (
            _frame(2)[:16] + bytes(len(_frame(2)) - 16),
            "torn",
            "zero-filled tail",
        ),  # header, no data
        (b"\xff" + _frame(2)[1:], "damage", "header checksum mismatch"),
        (_frame(2)[:20] + b"#" + _frame(2)[21:], "damage", "payload checksum mismatch"),
        (_with_header(b"XY", VERSION, b"{}"), "damage", "bad magic b'XY'"),
        (_with_header(MAGIC, 2, b"{}"), "damage", "format version 2 is not supported"),
    ],
)
def test_scan_classifies_the_last_record(tail: bytes, stop: str, reason: str) -> None:
    """At the end of a file, only a short or zero-filled record is a torn tail (a crash
    artefact); a complete record with a wrong checksum is damage."""
    res = scan(GOOD + tail)
    assert res.stop == stop
    assert reason in res.reason
    assert res.end == len(GOOD)
    assert len(res.records) == 2


@pytest.mark.parametrize("pos", [2, 4, 5, 8, 12, 16, 30])
def test_scan_damage_in_the_middle(pos: int) -> None:
    """A flipped byte anywhere in a record that has records after it is damage, never torn,
    including a flipped length (the header checksum is checked before the length is used)."""
    mid = bytearray(_frame(1))
    mid[pos] ^= 0x40
    res = scan(_frame(0) + bytes(mid) + _frame(2))
    assert res.stop == "damage"
    assert res.end == len(_frame(0))
    assert len(res.records) == 1


# -- durability settings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "mode", "every", "text"),
    [
        ("always", "always", 1, "always"),
        ("  ALWAYS ", "always", 1, "always"),
        ("none", "none", 0, "none"),
        ("batch(8)", "batch", 8, "batch(8)"),
        ("batch:3", "batch", 3, "batch(3)"),
        (Durability.batch(5), "batch", 5, "batch(5)"),
    ],
)
def test_durability_parse(spec: str | Durability, mode: str, every: int, text: str) -> None:
    d = Durability.parse(spec)
    assert (d.mode, d.every, str(d)) == (mode, every, text)
    assert Store("/nonexistent/x", durability=spec).durability == d


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("sometimes", "unknown durability 'sometimes': use 'always', 'batch(N)' or 'none'"),
        ("batch", "unknown durability 'batch'"),
        ("batch()", "unknown durability 'batch()'"),
        ("batch(-1)", "unknown durability 'batch(-1)'"),
        ("batch(0)", "batch size must be >= 1, got 0"),
        ("", "unknown durability ''"),
    ],
)
def test_durability_parse_rejects(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message.replace('(', '[(]').replace(')', '[)]')}"):
        Durability.parse(spec)
    with pytest.raises(ValueError, match=r"durability|batch size"):
        Store("/nonexistent/x", durability=spec)


# -- run ids ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run_id", "why"),
    [
        ("a/b", "path separator"),
        ("../etc", "path separator"),
        ("a\\b", "path separator"),
        ("..", "starts with '.'"),
        (".", "starts with '.'"),
        (".hidden", "starts with '.'"),
        ("a\x00b", "character 2 is U+0000, a control character"),
        ("a\nb", "character 2 is U+000A, a control character"),
        ("tab\there", "character 4 is U+0009, a control character"),
        ("del\x7f", "character 4 is U+007F, a control character"),
        ("c1\x85", "character 3 is U+0085, a C1 control character"),
        ("c1\x9b[2J", "character 3 is U+009B, a C1 control character"),
        ("evil\u202etxt.exe", "character 5 is U+202E, a bidirectional formatting"),
        ("iso\u2066x\u2069", "character 4 is U+2066, a bidirectional formatting"),
        ("mark\u200f", "U+200F, a bidirectional formatting"),
        ("line\u2028sep", "U+2028, a line or paragraph separator"),
        ("raw\udcffbyte", "character 4 is the byte 0xff, which is not UTF-8"),
        ("lone\ud800", "U+D800, a lone surrogate"),
        ("x" * 201, "201 characters (max 200)"),
        ("", "it is empty"),
    ],
)
def test_invalid_run_ids(run_id: str, why: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidRunId) as info:
        validate_run_id(run_id)
    assert why in info.value.why
    assert isinstance(info.value, ValueError)
    assert "invalid run id" in str(info.value)
    store = Store(tmp_path / "store", reserve_bytes=0)
    with pytest.raises(InvalidRunId):
        store.open(run_id)
    assert sorted(os.listdir(tmp_path)) == []  # nothing created, inside or outside the store


@pytest.mark.parametrize(
    "run_id",
    [
        "run-1",
        "a.b",
        "2024-01-01T00:00:00",
        "ünï-ラン",
        "x" * 200,
        "a..b",
        "UPPER_lower-123",
        "مرحبا-1",  # right-to-left letters are text; only formatting characters are refused
        "dev-\U0001f469\u200d\U0001f4bb",  # an emoji joined by a zero-width joiner
        "nbsp\u00a0and space",
    ],
)
def test_valid_run_ids(run_id: str, tmp_path: Path) -> None:
    assert validate_run_id(run_id) == run_id
    store = Store(tmp_path / "store", reserve_bytes=0)
    with store.open(run_id) as j:
        j.append({"ok": True})
    assert store.run_ids() == [run_id]
    assert os.path.dirname(store.path(run_id)) == str(tmp_path / "store")


# -- secrets ----------------------------------------------------------------------------------


def test_redactor_replaces_secrets_anywhere() -> None:
    r = Redactor()
    value = {
        "plain": "visible",
        "nested": [{"deep": Secret("s1")}, (Secret(2), "ok")],
        "api_key": "k",
        "apiKey": "k",
        "Authorization": "Bearer x",
        "password": "p",
        "X-Api-Key": "k",
        "session_token": "t",
        "cookies": ["a"],
        "privateKey": {"pem": "x"},
        "tokens_used": 1234,
        "max_tokens": 4096,
        "keyboard": "qwerty",
        "monkey": "m",
        "token_count": None,
        "password_hint": None,
    }
    out = r.redact(value)
    assert out == {
        "plain": "visible",
        "nested": [{"deep": REDACTED}, [REDACTED, "ok"]],
        "api_key": REDACTED,
        "apiKey": REDACTED,
        "Authorization": REDACTED,
        "password": REDACTED,
        "X-Api-Key": REDACTED,
        "session_token": REDACTED,
        "cookies": REDACTED,
        "privateKey": REDACTED,
        "tokens_used": 1234,
        "max_tokens": 4096,
        "keyboard": "qwerty",
        "monkey": "m",
        "token_count": None,
        "password_hint": None,  # None is no secret
    }
    assert r.redact(Secret("top")) == REDACTED
    assert value["nested"][0]["deep"].reveal() == "s1"  # the input is not modified


def test_redactor_names_are_configurable() -> None:
    r = Redactor({"ssn"})
    assert r.redact({"ssn": "123", "api_key": "k"}) == {"ssn": REDACTED, "api_key": "k"}
    with pytest.raises(TypeError, match="keys must be strings"):
        Redactor().redact({1: "x"})


def test_secret_does_not_show_or_pickle() -> None:
    s = Secret("sk-canary")
    assert "canary" not in repr(s)
    assert "canary" not in str(s)
    assert "canary" not in f"{[s]}"
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(s)


def _all_bytes(root: Path) -> list[tuple[Path, bytes]]:
    return [(p, p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()]


def test_canary_secret_is_in_no_byte_on_disk(tmp_path: Path) -> None:
    canary = "sk-CANARY-7f3a9c1e"
    store = Store(tmp_path / "store", reserve_bytes=0, snapshots=SnapshotPolicy(min_bytes=200))
    with store.open("run") as j:
        j.set_meta(status="running", api_key=canary, auth=Secret(canary))
        for i in range(20):
            j.append(
                {
                    "i": i,
                    "api_key": canary,
                    "key": Secret(canary),
                    "call": {
                        "headers": {"Authorization": f"Bearer {canary}"},
                        "args": [Secret(canary), Secret({"nested": canary})],
                    },
                }
            )
        j.snapshot()
        assert j.state["records"][0]["api_key"] == REDACTED
    files = _all_bytes(tmp_path / "store")
    assert any(p.name.startswith("snap-") for p, _ in files)
    assert len(files) >= 4
    for needle in (canary.encode(), canary.encode("utf-16-le"), b"CANARY"):
        assert [p for p, data in files if needle in data] == []

    # control: the same grep finds the canary when redaction is skipped
    leak = Store(tmp_path / "leak", reserve_bytes=0)
    with leak.open("run") as j:
        j.append({"api_key": canary}, redact=False)
    assert [p.name for p, data in _all_bytes(tmp_path / "leak") if canary.encode() in data] == [
        "seg-000000000001.log"
    ]


# -- files and folders ------------------------------------------------------------------------


def test_file_and_folder_modes(tmp_path: Path) -> None:
    old = os.umask(0)  # the modes must come from the store, not from the umask
    try:
        store = Store(
            tmp_path / "a" / "store", reserve_bytes=0, snapshots=SnapshotPolicy(min_bytes=100)
        )
        with store.open("run") as j:
            j.set_meta(status="running")
            for i in range(10):
                j.append({"i": i})
    finally:
        os.umask(old)
    root = tmp_path / "a"
    seen = {"file": 0, "dir": 0}
    for p in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(p.lstat().st_mode)
        if p.is_dir():
            assert mode == 0o700, f"{p}: {oct(mode)}"
            seen["dir"] += 1
        else:
            assert mode == 0o600, f"{p}: {oct(mode)}"
            seen["file"] += 1
    assert seen["dir"] == 3  # a, store, run
    assert seen["file"] >= 4  # lock, meta.json, a snapshot, a segment


def test_snapshots_delete_covered_segments_for_real(tmp_path: Path) -> None:
    store = Store(
        tmp_path / "store",
        reserve_bytes=0,
        snapshots=SnapshotPolicy(min_bytes=500),
        segment_bytes=300,
    )
    folder = tmp_path / "store" / "run"
    ever: set[str] = set()
    with store.open("run") as j:
        for i in range(60):
            j.append({"i": i, "pad": "p" * 40})
            ever |= set(os.listdir(folder))
        j.snapshot()
        final = sorted(os.listdir(folder))
    assert final == ["lock", "seg-000000000061.log", "snap-000000000060.cps"]
    gone = ever - set(final)
    assert sum(n.startswith("seg-") for n in gone) >= 5
    assert sum(n.startswith("snap-") for n in gone) >= 2
    assert (folder / "seg-000000000061.log").stat().st_size == 0
    # the bytes are gone too: only the snapshot (the state) and the lock remain
    snap = (folder / "snap-000000000060.cps").stat().st_size
    assert store.usage(refresh=True) == snap + (folder / "lock").stat().st_size
    assert [r["i"] for r in store.read("run").state["records"]] == list(range(60))


def test_torn_tail_is_repaired_and_reported(tmp_path: Path) -> None:
    store = Store(tmp_path / "store", reserve_bytes=0)
    with store.open("run") as j:
        for i in range(3):
            j.append({"i": i})
    seg = tmp_path / "store" / "run" / "seg-000000000001.log"
    good = seg.read_bytes()
    seg.write_bytes(good + _frame(9)[:-3])  # a crash in the middle of the 4th append
    with store.open("run") as j:
        assert j.recovery.torn_tail is not None
        assert j.recovery.torn_tail.offset == len(good)
        assert "repaired a torn tail" in j.recovery.describe()
        assert seg.read_bytes() == good
        j.append({"i": 3})
    with store.open("run") as j:
        assert not j.recovery
        assert [r["i"] for r in j.state["records"]] == [0, 1, 2, 3]


def test_an_emptied_middle_segment_is_damage_not_a_clean_end(tmp_path: Path) -> None:
    """Regression: a segment cut back at a record boundary (or to nothing) while the segments
    after it are empty used to load as a clean, shorter run: acknowledged records vanished
    without an error. A segment's name says which records come before it."""
    store = Store(tmp_path / "store", reserve_bytes=0, segment_bytes=100)
    with store.open("run") as j:
        for i in range(3):
            j.append({"i": i, "pad": "x" * 100})  # each record fills a segment: 3 rolls
    folder = tmp_path / "store" / "run"
    assert (
        sorted(n for n in os.listdir(folder) if n.startswith("seg-"))[-1] == "seg-000000000004.log"
    )
    assert (folder / "seg-000000000004.log").stat().st_size == 0
    (folder / "seg-000000000003.log").write_bytes(b"")  # record 3 gone
    with pytest.raises(CheckpointCorrupt) as info:
        store.read("run")
    assert info.value.path == str(folder / "seg-000000000004.log")
    assert "records 3..3 are missing" in info.value.reason
    damage, _ = store.verify("run")["run"]
    assert len(damage) == 1
    rb = Store(tmp_path / "store", reserve_bytes=0, on_corrupt="rollback")
    with rb.open("run") as j:
        assert [r["i"] for r in j.state["records"]] == [0, 1]
        assert j.recovery.damage
        assert j.recovery.lost_from_seq == 3


# -- O(N) -------------------------------------------------------------------------------------


def _wchar() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    raise LookupError("no wchar in /proc/self/io")


def _dir_bytes(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file())


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs /proc/self/io (Linux)")
def test_bytes_written_are_linear_in_the_content(tmp_path: Path) -> None:
    """10,000 appends of ~200 B with snapshots (a 64 KiB threshold, so several are taken and
    the segments they cover deleted). Counted two ways: the store's own counter and the
    kernel's count of bytes this process passed to write(2). Durability ``none`` keeps it fast;
    syncs write no bytes of their own, so the counts are the same."""
    store = Store(
        tmp_path / "store",
        durability="none",
        reserve_bytes=0,
        snapshots=SnapshotPolicy(min_bytes=64 * 1024, ratio=2.0),
    )
    content = 0
    per_append: dict[int, tuple[float, float]] = {}
    with store.open("run") as j:
        w0 = _wchar()
        for i in range(1, 10_001):
            data = {"step": i, "text": "x" * 170}
            content += len(encode_json(data))
            j.append(data)
            if i in (2_500, 5_000, 10_000):
                per_append[i] = (store.bytes_written / i, (_wchar() - w0) / i)
        wchar = _wchar() - w0
    disk = _dir_bytes(tmp_path / "store")
    assert 190 <= content / 10_000 <= 210
    assert content <= store.bytes_written <= 4 * content
    assert store.bytes_written <= wchar <= 4 * content  # the kernel saw every counted byte
    assert disk <= 4 * content
    # not quadratic: the cost of an append does not grow with the run (a store that rewrote
    # its state per append would cost 4x more per append at 10k than at 2.5k)
    for i in (2_500, 5_000):
        assert per_append[10_000][0] <= 1.5 * per_append[i][0]
        assert per_append[10_000][1] <= 1.5 * per_append[i][1]
    names = os.listdir(tmp_path / "store" / "run")
    assert len([n for n in names if n.startswith("seg-")]) == 1
    snaps = [n for n in names if n.startswith("snap-")]
    assert len(snaps) == 1
    assert int(snaps[0][5:17]) > 5_000  # snapshots happened, late ones too


# -- errors -----------------------------------------------------------------------------------


ERRORS: list[CrashpointError] = [
    CheckpointCorrupt("/s/run/seg-000000000001.log", 123, "payload checksum mismatch"),
    CheckpointWriteError(errno.ENOSPC, "/s/run/seg-000000000001.log", "writing a snapshot"),
    CheckpointWriteError(errno.EFBIG, "/s/run/x"),
    DiskBudgetExceeded("/s/run", 4096, "the store's budget of 10 bytes (in use: 9)"),
    RunLocked("run", "/s/run/lock", "pid 42", 1.5),
    InvalidRunId("../x", "it contains a path separator"),
    RunNotFound("no run 'x' in /s"),
    ResumeMismatch("run", 3, "fetch", "parse"),
    EffectInDoubt("run", "run:send:0", "send_email"),
    EffectMismatch("run", "run:0.a:send_email:0", "send_email", 0),
    RunPaused("run", "approve", "needs a human"),
    RunDeadLettered("run", 5, "boom"),
]

FIELDS = (
    "path",
    "offset",
    "reason",
    "errno",
    "strerror",
    "filename",
    "detail",
    "needed",
    "limit",
    "run_id",
    "holder",
    "waited",
    "why",
    "position",
    "recorded",
    "requested",
    "key",
    "kind",
    "step",
    "attempts",
    "args",
)


def _fields(e: BaseException) -> dict[str, Any]:
    return {f: getattr(e, f) for f in FIELDS if hasattr(e, f)}


@pytest.mark.parametrize("err", ERRORS, ids=lambda e: type(e).__name__)
def test_errors_pickle_round_trip(err: CrashpointError) -> None:
    back = pickle.loads(pickle.dumps(err))  # noqa: S301 - our own bytes
    assert type(back) is type(err)
    assert _fields(back) == _fields(err)
    assert str(back) == str(err)
    assert back.args == err.args


def test_error_categories_and_messages() -> None:
    w = CheckpointWriteError(errno.ENOSPC, "/s/seg", "writing a snapshot")
    assert isinstance(w, OSError)
    assert w.errno == errno.ENOSPC
    assert "ENOSPC" in str(w)
    assert "writing a snapshot" in str(w)
    c = CheckpointCorrupt("/s/seg", 7, "payload checksum mismatch")
    assert isinstance(c, ValueError)
    assert "/s/seg at byte 7: payload checksum mismatch" in str(c)
    assert isinstance(RunLocked("r", "/l"), TimeoutError)
    assert isinstance(DiskBudgetExceeded("/s", 1, "x"), OSError)
    assert DiskBudgetExceeded("/s", 1, "x").errno == errno.ENOSPC


# -- free-space reserve -----------------------------------------------------------------------


class _FakeStatvfs:
    """os.statvfs with a free-space figure the test controls (4 KiB blocks)."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.calls = 0

    def __call__(self, path: object) -> os.statvfs_result:
        self.calls += 1
        blocks = self.free // 4096
        return os.statvfs_result((4096, 4096, 1 << 30, blocks, blocks, 0, 0, 0, 0, 255))


def test_the_reserve_refuses_a_write_before_it_happens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _FakeStatvfs(free=1 << 20)  # 1 MiB free, reserve 1 MiB - 8 KiB: room for ~8 KiB
    monkeypatch.setattr(os, "statvfs", fake)
    store = Store(tmp_path / "store", reserve_bytes=(1 << 20) - 8192)
    with store.open("run") as j:
        acked: list[int] = []

        def fill() -> None:
            for i in range(1000):
                j.append({"i": i, "text": "x" * 200})
                acked.append(i)
                fake.free -= 300  # what the append took

        with pytest.raises(DiskBudgetExceeded, match="free-space reserve"):
            fill()
        written = len(acked)
        seg = next((tmp_path / "store" / "run").glob("seg-*"))
        size = seg.stat().st_size
        assert 10 <= written < 40  # refused near the reserve, not at once and not never
        with pytest.raises(DiskBudgetExceeded):
            j.append({"again": True})
        assert seg.stat().st_size == size  # nothing of a refused record was written
    assert len(store.read("run").state["records"]) == written


def test_a_sudden_drop_in_free_space_is_seen_within_a_mebibyte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _FakeStatvfs(free=10 << 30)  # plenty: appends skip the reading
    monkeypatch.setattr(os, "statvfs", fake)
    # no fdatasync per append: the free-space reading does not depend on it (thousands of syncs)
    store = Store(tmp_path / "store", reserve_bytes=64 << 20, durability="none")
    with store.open("run") as j:
        for i in range(100):
            j.append({"i": i, "text": "x" * 200})
        assert fake.calls <= 3  # the fast path: no statvfs per append
        fake.free = 1 << 20  # someone else filled the disk

        def keep_writing() -> None:
            for i in range(10_000):
                j.append({"i": i, "text": "x" * 200})

        with pytest.raises(DiskBudgetExceeded):
            keep_writing()
        assert store.bytes_written < 3 << 20  # noticed within about a MiB of our own writes


# -- data JSON cannot hold: the library's own errors, never a bare one ------------------------


def _nested(depth: int) -> list[Any]:
    top: list[Any] = []
    inner = top
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return top


def _holds_itself() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


@pytest.mark.parametrize(
    ("data", "error", "words"),
    [
        (_nested(300), InvalidArgument, "nests deeper than 191 levels"),
        (_nested(5_000), InvalidArgument, "nests deeper than 191 levels"),  # RecursionError
        (_nested(200_000), InvalidArgument, "nests deeper than 191 levels"),
        (_holds_itself(), InvalidArgument, "holds itself"),
        ({"x": float("nan")}, InvalidArgument, "NaN and infinity are not JSON numbers"),
        ({"x": "raw \udcff byte"}, InvalidArgument, "lone surrogate"),
        ({"x": {1, 2}}, WrongArgumentType, "Object of type set is not JSON serializable"),
        (b"bytes", WrongArgumentType, "store lists, objects with string keys"),
    ],
)
def test_data_json_cannot_hold_is_refused_with_the_library_s_error(
    tmp_path: Path, data: Any, error: type[Exception], words: str
) -> None:
    """Before, deep data raised RecursionError, NaN a bare ValueError, a set a bare TypeError;
    nothing is written either way, and the run goes on."""
    store = Store(tmp_path / "s", reserve_bytes=0)
    with store.open("r") as j:
        j.append({"before": 1})
        with pytest.raises(error) as info:
            j.append(data)
        assert isinstance(info.value, CrashpointError)
        assert words in str(info.value)
        j.append({"after": 2})
    assert store.read("r").state["records"] == [{"before": 1}, {"after": 2}]
    with open_run(store, "run") as run, pytest.raises(error):
        run.step("a", lambda: data)
