"""The faults: what the harness does to an agent besides killing it, and how it learns where.

Layer 4: imports the base (errors, units, failpoints, the recordable file I/O of ``_fsio``)
and process control (:mod:`crashpoint._proc`), never the library, the harness or pytest. The
harness plans and judges; this room only acts on real files, real processes and real mounts,
and says whether the fault took effect:

- **corruption** of the trial's files (truncate, bit flips, zeroes, deletion, a stale copy),
  seeded and confined to the trial's own folders (``_files``);
- **a full disk**: a small tmpfs in a private mount namespace, ``RLIMIT_FSIZE``, or a failpoint
  in the reference library (``_disk``), and the *write points* where a full disk can hit an
  agent, learned from its golden run's syscalls (``_writes``);
- **file-operation kills**: the golden run's file operations recorded (strace, or an audit
  hook injected into a Python agent: ``_inject/sitecustomize.py``), then a SIGKILL armed
  before each one (``_fileops``);
- **power loss**: the crash states a power cut may leave, computed from a recorded syscall
  trace under a persistence model (``_powercut``), and an in-process recorder of the durable
  state for code that writes through :class:`crashpoint._fsio.FsOps` (:mod:`.powerloss`);
- **failpoints**: the named places in the reference library where a fault can be armed
  (:data:`FAILPOINTS`, armed through ``CRASHPOINT_FAILPOINTS`` in an attempt's environment);
- **syscall traces** with strace: the capability probe, the argv wrapper, the parser
  (``_strace``);
- **a network partition** between a client and a server: a TCP proxy that resets or
  blackholes (``_partition``);
- **a second writer on an agent's SQLite database**: a connection of the harness that holds
  its write lock for a while, and the agent's refused lock requests read from a trace
  (``_sqlitelock``).

Names that would be ambiguous outside their module carry a qualifier here
(``strace_available`` is ``_strace.available``, ``WRITE_POINT_MECHANISMS`` is
``_writes.MECHANISMS``).
"""

from crashpoint._failpoints import FAILPOINTS
from crashpoint.faults._disk import (
    DiskCapability,
    TmpfsNamespace,
    TmpfsUsage,
    UsageSample,
    UsageSampler,
    tmpfs_bytes_for,
)
from crashpoint.faults._disk import capabilities as disk_capabilities
from crashpoint.faults._fileops import GOLDEN_SYSCALLS as FILEOP_SYSCALLS
from crashpoint.faults._fileops import (
    INJECT_DIR,
    Armed,
    FileOp,
    Landing,
    Watch,
)
from crashpoint.faults._fileops import arm as arm_fileop_kill
from crashpoint.faults._fileops import explain_empty as explain_no_fileops
from crashpoint.faults._fileops import golden_record as fileop_record
from crashpoint.faults._fileops import golden_seqs as fileop_seqs
from crashpoint.faults._fileops import golden_times as fileop_times
from crashpoint.faults._fileops import landed as fileop_landing
from crashpoint.faults._fileops import read_golden as read_fileop_trace
from crashpoint.faults._fileops import record_golden as record_fileops
from crashpoint.faults._fileops import recorder as fileop_recorder
from crashpoint.faults._files import CORRUPTIONS, Corruption, corrupt, pick_target
from crashpoint.faults._killreplay import SYSCALLS as KILL_REPLAY_SYSCALLS
from crashpoint.faults._killreplay import calls_after as kill_calls_after
from crashpoint.faults._killreplay import kill_points
from crashpoint.faults._partition import PartitionMode, TcpProxy
from crashpoint.faults._powercut import MODELS as POWER_MODELS
from crashpoint.faults._powercut import (
    MUTATIONS,
    CrashState,
    LogOp,
    Mutation,
    OpLog,
    crash_plan,
    crash_states,
    event_points,
    kill_state,
    materialize,
    recent_writes,
    write_ranges,
)
from crashpoint.faults._powercut import STRSIZE as POWER_STRSIZE
from crashpoint.faults._powercut import SYSCALLS as POWER_SYSCALLS
from crashpoint.faults._powercut import oplog as build_oplog
from crashpoint.faults._powercut import rebuild as rebuild_crash_state
from crashpoint.faults._powercut import snapshot as snapshot_roots
from crashpoint.faults._sqlitelock import LOCK_MODES as SQLITE_LOCK_MODES
from crashpoint.faults._sqlitelock import LOCK_SYSCALLS as SQLITE_LOCK_SYSCALLS
from crashpoint.faults._sqlitelock import SqliteLock
from crashpoint.faults._sqlitelock import find_database as find_sqlite_database
from crashpoint.faults._sqlitelock import lock_refusals as sqlite_lock_refusals
from crashpoint.faults._strace import Detacher, Syscall, Trace
from crashpoint.faults._strace import available as strace_available
from crashpoint.faults._strace import output_of as strace_output_of
from crashpoint.faults._strace import parse as parse_trace
from crashpoint.faults._strace import read as read_trace
from crashpoint.faults._strace import wrap as strace_wrap
from crashpoint.faults._writes import (
    DISK_ERRNOS,
    DiskError,
    WritePoint,
    WriteUsage,
    disk_errors,
    rlimit_argv,
    write_points,
    write_usage,
)
from crashpoint.faults._writes import MECHANISMS as WRITE_POINT_MECHANISMS
from crashpoint.faults._writes import TRACE_SYSCALLS as WRITE_SYSCALLS
from crashpoint.faults._writes import Fired as DiskFaultFired
from crashpoint.faults._writes import confirm as confirm_disk_fault

__all__ = [
    "CORRUPTIONS",
    "DISK_ERRNOS",
    "FAILPOINTS",
    "FILEOP_SYSCALLS",
    "INJECT_DIR",
    "KILL_REPLAY_SYSCALLS",
    "MUTATIONS",
    "POWER_MODELS",
    "POWER_STRSIZE",
    "POWER_SYSCALLS",
    "SQLITE_LOCK_MODES",
    "SQLITE_LOCK_SYSCALLS",
    "WRITE_POINT_MECHANISMS",
    "WRITE_SYSCALLS",
    "Armed",
    "Corruption",
    "CrashState",
    "Detacher",
    "DiskCapability",
    "DiskError",
    "DiskFaultFired",
    "FileOp",
    "Landing",
    "LogOp",
    "Mutation",
    "OpLog",
    "PartitionMode",
    "SqliteLock",
    "Syscall",
    "TcpProxy",
    "TmpfsNamespace",
    "TmpfsUsage",
    "Trace",
    "UsageSample",
    "UsageSampler",
    "Watch",
    "WritePoint",
    "WriteUsage",
    "arm_fileop_kill",
    "build_oplog",
    "confirm_disk_fault",
    "corrupt",
    "crash_plan",
    "crash_states",
    "disk_capabilities",
    "disk_errors",
    "event_points",
    "explain_no_fileops",
    "fileop_landing",
    "fileop_record",
    "fileop_recorder",
    "fileop_seqs",
    "fileop_times",
    "find_sqlite_database",
    "kill_calls_after",
    "kill_points",
    "kill_state",
    "materialize",
    "parse_trace",
    "pick_target",
    "read_fileop_trace",
    "read_trace",
    "rebuild_crash_state",
    "recent_writes",
    "record_fileops",
    "rlimit_argv",
    "snapshot_roots",
    "sqlite_lock_refusals",
    "strace_available",
    "strace_output_of",
    "strace_wrap",
    "tmpfs_bytes_for",
    "write_points",
    "write_ranges",
    "write_usage",
]
