"""``crashpoint checkpoints start|step|effect|status|complete``: the lifecycle CLI.

A shell (or any) agent checkpoints with these the way a Python agent does with
:class:`crashpoint.checkpoint.Run`; see docs/how-to/checkpoint-from-any-language.md. The logic
is the library's (:func:`crashpoint.checkpoint.start_run`, ``record_step``, ``record_effect``,
``run_status``, ``complete_run``); this module only parses, prints and tells the probe (after
the record is durable and the run closed). Registered with the frame
(:mod:`crashpoint.cli._framework`) when :mod:`crashpoint.cli._main` imports this module.

Exit codes: 0 done (``effect``: send it now), 3 ``effect``: already done, skip it, 2 bad usage
or input (bad JSON, no store, no such run), 1 the run's state does not allow it (finished, steps
left), and the run's documented codes: 65 corrupt, 69 dead-lettered, 70 not the next step, a
different step list, or an ``effect`` without ``--key`` whose payload differs from the one
announced under its default key, 73 another live agent owns the run, 74 disk full or I/O error.

Imports: the frame, and the public faces :mod:`crashpoint.checkpoint`, :mod:`crashpoint.errors`
and :mod:`crashpoint.probe`. A shell agent runs one of these per step: nothing here may pull in
the harness, pytest or psutil.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from functools import wraps

from crashpoint import probe
from crashpoint.checkpoint import (
    EXIT_SKIP,
    Store,
    complete_run,
    decode_json,
    exists_or_raise,
    exit_code,
    is_store_url,
    makedirs_durable,
    record_effect,
    record_step,
    run_status,
    start_run,
    validate_run_id,
)
from crashpoint.cli._framework import EXIT_OK, EXIT_USAGE, STORE_ENV, Context, arg, command
from crashpoint.errors import (
    CrashpointError,
    InvalidRunId,
    RunNotFound,
    RunStateError,
    UsageError,
)
from crashpoint.probe import ProbeError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)
if TYPE_CHECKING:
    from typing import Any, Literal

__all__: list[str] = []

_RUN = arg("run", metavar="RUN", help="the run id")


def _json_arg(text: str, what: str) -> Any:
    try:  # bounded as every stored value is (depth, numbers): what is written must read back
        return decode_json(text.encode("utf-8", "surrogateescape"))
    except ValueError as exc:
        raise UsageError(
            f"{what} is not valid JSON ({exc}): {text[:80]!r}; quote it for the "
            f"shell, e.g. {what} '{{\"n\": 1}}' or {what} '\"text\"'"
        ) from None


def _store(ctx: Context, *, create: bool = False) -> Any:
    """The store of ``--store`` / ``$CRASHPOINT_STORE``; ``create``: make the folder (``start``
    on a first run) instead of asking :meth:`Context.store_root`, which wants it to exist."""
    rollback = getattr(ctx.args, "on_corrupt", "") == "rollback"
    on_corrupt: Literal["raise", "rollback"] = "rollback" if rollback else "raise"
    root = getattr(ctx.args, "store", None) or os.environ.get(STORE_ENV, "")
    if root and is_store_url(root):  # postgresql://...: a PostgresStore (issue 14)
        # imported here, not above, for the cost: a folder's commands never load it
        from crashpoint.checkpoint import open_store

        return open_store(root, on_corrupt=on_corrupt)
    if not create or not root:
        return Store(ctx.store_root(), on_corrupt=on_corrupt)
    if not os.path.isdir(root):
        if os.path.lexists(root):
            raise UsageError(f"{root} (the store) is not a folder")
        try:  # durable: each new folder fsynced into its parent (a power cut keeps the store)
            makedirs_durable(root)
        except OSError as exc:
            raise UsageError(f"cannot create the store {root}: {exc.strerror}") from None
    return Store(root, on_corrupt=on_corrupt)


def _guarded(func: Callable[[Context], int]) -> Callable[[Context], int]:
    """Turn the run's errors into one line on stderr and the run's documented exit code."""

    @wraps(func)
    def run(ctx: Context) -> int:
        try:
            return func(ctx)
        except (RunNotFound, InvalidRunId) as exc:
            ctx.note(f"crashpoint: error: {exc}")
            return EXIT_USAGE
        except RunStateError as exc:
            ctx.note(f"crashpoint: error: {exc}")
            return 1
        except ProbeError as exc:
            ctx.note(f"crashpoint: error: the harness's probe failed: {exc}")
            return 1
        except CrashpointError as exc:
            code = exit_code(exc)
            ctx.note(f"crashpoint: error: {exc}")
            return code if code != 1 else EXIT_USAGE

    return run


def _print_next(ctx: Context, name: str | None) -> None:
    if name is not None:
        ctx.print(name)


def _announce_next(name: str | None) -> None:
    if name is not None:
        probe.step_started(name)


@command(
    "checkpoints",
    "start",
    help="start a run, or resume it: print the step to run next",
    description="Creates run RUN with its steps (--steps a,b,c) or resumes it, and prints the "
    "step to run next (nothing when every step is done). The calling agent (its "
    "process group) owns the run until it exits; another live agent's start is "
    "refused (exit 73). The store folder is created if missing.",
    args=[
        _RUN,
        arg(
            "--steps",
            metavar="A,B,...",
            default="",
            help="the run's steps in order (needed to create it; checked on resume)",
        ),
        arg(
            "--on-corrupt",
            dest="on_corrupt",
            choices=("raise", "rollback"),
            default="raise",
            help="damaged checkpoint: refuse (exit 65, default) or roll "
            "back to the last valid record and re-run from there",
        ),
        arg("--json", action="store_true", help="print the status as JSON"),
    ],
)
@_guarded
def _start(ctx: Context) -> int:
    run_id = validate_run_id(ctx.args.run)
    steps = [s.strip() for s in ctx.args.steps.split(",") if s.strip()] or None
    if ctx.args.steps and steps and len(set(steps)) != len(steps):
        raise UsageError(f"--steps names a step twice: {ctx.args.steps!r}")
    st = start_run(_store(ctx, create=True), run_id, steps)
    if ctx.args.json:
        ctx.json(st.as_json())
    else:
        _print_next(ctx, st.next)
    ctx.out.flush()
    _announce_next(st.next)
    return EXIT_OK


@command(
    "checkpoints",
    "step",
    help="record a step as completed (durable before it returns); print the next step",
    description="Records step NAME of RUN as completed with its result, fdatasync'ed before the "
    "command returns, then prints the step to run next (nothing when every step "
    "is done). NAME must be the run's next step (exit 70 otherwise).",
    args=[
        _RUN,
        arg("name", metavar="NAME", help="the step that completed"),
        arg(
            "--result",
            metavar="JSON",
            default="null",
            help="the step's result, as JSON (default: null)",
        ),
    ],
)
@_guarded
def _step(ctx: Context) -> int:
    run_id = validate_run_id(ctx.args.run)
    result = _json_arg(ctx.args.result, "--result")
    st = record_step(_store(ctx), run_id, ctx.args.name, result)
    probe.step_completed(ctx.args.name)
    _print_next(ctx, st.next)
    ctx.out.flush()
    _announce_next(st.next)
    return EXIT_OK


@command(
    "checkpoints",
    "effect",
    help="announce a side effect once: exit 0 send it now, exit 3 already done (skip)",
    description="Before the agent performs a side effect (an email, a payment, an API call), "
    "`effect` records its intent durably and reports it to the harness with its "
    "key; exit 0 means 'send it now, with this key', exit 3 'already done in an "
    "earlier attempt: skip it'. An effect announced by an attempt that then crashed "
    "says 'send' again with the same key: the receiver must deduplicate by key. "
    "Completing the step settles the step's effects; `--done` settles one now. "
    "Without --key the key is derived from the run, the step and the kind, and a payload "
    "that differs from the one announced under that key (not yet settled) is another "
    "effect: refused with exit 70, never sent; give each effect its own --key.",
    args=[
        _RUN,
        arg("kind", metavar="KIND", help="what the effect is, e.g. send_email"),
        arg(
            "--key",
            default=None,
            help="the idempotency key (default: RUN:POS.STEP:KIND:N, stable across attempts)",
        ),
        arg("--payload", metavar="JSON", default="null", help="what is sent, as JSON"),
        arg(
            "--done",
            action="store_true",
            help="the effect was performed: record it as done (with --result)",
        ),
        arg(
            "--result",
            metavar="JSON",
            default="null",
            help="with --done: the effect's result, as JSON",
        ),
        arg(
            "--json",
            action="store_true",
            help="print {action, key, applied, in_doubt, result} as JSON",
        ),
    ],
)
@_guarded
def _effect(ctx: Context) -> int:
    a = ctx.args
    run_id = validate_run_id(a.run)
    payload = _json_arg(a.payload, "--payload")
    result = _json_arg(a.result, "--result")
    ans = record_effect(
        _store(ctx), run_id, a.kind, key=a.key, payload=payload, done=a.done, result=result
    )
    applied = None
    if ans.action == "send":
        applied = probe.effect(a.kind, payload, key=ans.key)
    if a.json:
        ctx.json(
            {
                "action": ans.action,
                "key": ans.key,
                "kind": ans.kind,
                "applied": applied,
                "in_doubt": ans.in_doubt,
                "result": ans.result,
            }
        )
    elif ans.action == "skip":
        ctx.note(f"crashpoint: effect {a.kind} ({ans.key}) was already done: skip it")
    return EXIT_SKIP if ans.action == "skip" else EXIT_OK


@command(
    "checkpoints",
    "status",
    help="where a run stands: next step, completed steps, results (--json, --next)",
    description="Reads RUN (no lock, no change). Text: one `key: value` per line. --next: only "
    "the step to run next (empty when none). --result STEP: that step's recorded "
    "result as JSON. --json: everything, machine-readable.",
    args=[
        _RUN,
        arg("--next", action="store_true", help="print only the next step (or nothing)"),
        arg(
            "--result",
            metavar="STEP",
            default=None,
            help="print the recorded result of STEP as JSON",
        ),
        arg("--json", action="store_true", help="print the status as JSON"),
    ],
)
@_guarded
def _status(ctx: Context) -> int:
    run_id = validate_run_id(ctx.args.run)
    store = _store(ctx)
    exists_or_raise(store, run_id)
    st = run_status(store, run_id)
    if ctx.args.result is not None:
        name = ctx.args.result
        if name not in st.completed:
            raise RunStateError(
                f"step {name!r} of run {run_id!r} has not completed "
                f"(completed: {', '.join(st.completed) or 'none'})"
            )
        value = st.results[len(st.completed) - 1 - st.completed[::-1].index(name)]
        ctx.print(json.dumps(value, sort_keys=True, ensure_ascii=False))
    elif ctx.args.json:
        ctx.json(st.as_json())
    elif ctx.args.next:
        _print_next(ctx, st.next)
    else:
        ctx.print(f"run: {st.run_id}")
        ctx.print(f"status: {st.status}")
        ctx.print(f"next: {st.next or '-'}")
        ctx.print(f"completed: {', '.join(st.completed) or '-'}")
        ctx.print(f"steps: {', '.join(st.steps)}")
        ctx.print(f"attempts: {st.attempts}")
        ctx.print(f"effects: {len(st.effects)}")
    return EXIT_OK


@command(
    "checkpoints",
    "complete",
    help="record that the run completed, with its output (durable)",
    description="Ends RUN as completed with --output (JSON). Every step must be recorded "
    "(exit 1 otherwise). On a completed run nothing changes; --print prints the "
    "recorded output either way.",
    args=[
        _RUN,
        arg(
            "--output",
            metavar="JSON",
            default="null",
            help="the run's output, as JSON (default: null)",
        ),
        arg(
            "--print",
            dest="print_output",
            action="store_true",
            help="print the recorded output (the first completion's) as JSON",
        ),
    ],
)
@_guarded
def _complete(ctx: Context) -> int:
    run_id = validate_run_id(ctx.args.run)
    output = _json_arg(ctx.args.output, "--output")
    st = complete_run(_store(ctx), run_id, output)
    if ctx.args.print_output:
        ctx.print(json.dumps(st.output, sort_keys=True, ensure_ascii=False))
    return EXIT_OK
