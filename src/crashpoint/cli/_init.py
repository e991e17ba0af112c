"""``crashpoint init``: a starter scenario file for an agent command.

The starter is the recipe the how-to pages recommend: kills at every boundary, kills before each
file operation and power cuts. Boundary kills alone pass an agent that rewrites its state file
in place (a kill -9 keeps what it wrote); the other two catch it. The file is created, never
overwritten, then read back as the gate reads it, so what it writes is a scenario the gate
accepts (or the command says what to change). Registered with the frame
(:mod:`crashpoint.cli._framework`) when :mod:`crashpoint.cli._main` imports this module.

Imports: the frame and the public faces :mod:`crashpoint.errors` and :mod:`crashpoint.harness`
(lazy); :mod:`crashpoint.faults` inside the command (whether strace can run here), so that
loading this room, as every command does, stays cheap.
"""

from __future__ import annotations

import json
import os
import shlex
import zlib

from crashpoint import __version__, harness
from crashpoint.cli._framework import EXIT_FOUND, EXIT_OK, PROG, Context, arg, command, duration
from crashpoint.errors import ScenarioError, UsageError

__all__: list[str] = []

#: The file ``crashpoint init`` writes when given no PATH (or a folder).
DEFAULT_NAME = "agent.scenario.yaml"
SUFFIX = ".scenario.yaml"
#: Crash states drawn per power-loss family: states multiply with operations, so a sample.
POWER_STATES = 20
#: Programs that run a script named next (the scenario's name names the script).
_INTERPRETERS = frozenset(
    {"{python}", "python", "python3", "node", "deno", "bun", "sh", "bash", "ruby", "perl"}
)

TEMPLATE = """\
# A starter crash-recovery scenario, written by `crashpoint init` ({prog} {version}).
# Run it:  crashpoint run {path}
# The format: scenarios/README.md in crashpoint's repository (every key, every fault family).
name: {name}
agent:
  command: {command}
  timeout: {timeout}
faults:
  # SIGKILL at every boundary of the crash-free (golden) run: before each probe event and each
  # request to a stand-in service (the model under OPENAI_BASE_URL, HTTP under {{http}}, SMTP),
  # and after the service applied a request but before the agent heard back (in doubt).
  - kill: {{at: every-boundary}}
  # SIGKILL just before each file operation the golden run made under {{state_dir}} and
  # {{workdir}} (an open that truncates, a write, an fsync, a rename ...), one trial each. A
  # kill -9 keeps what was written, so boundary kills pass a state file rewritten in place;
  # these catch it (killed between the truncate and the write). Recorded with strace for any
  # language; without strace, only a Python agent's opens and renames (an audit hook). For a
  # long run, draw a sample instead: {{at: fileop, count: 30}}.
  - kill: {{at: fileop}}
  # A power cut: what was not fsynced may be lost, torn or zero-filled, and a rename may reach
  # the disk before its data. NEEDS STRACE: the golden run is recorded under strace; where it
  # cannot run, these trials are skipped and `crashpoint run` says why under its table (never
  # a pass). {states} of the crash states, drawn by the seed; without `count`: every state.
  - power_loss: {{model: posix, count: {states}}}
restarts: 3
seed: {seed}
"""


def _target(path: str) -> str:
    """The file to write: PATH, or ``agent.scenario.yaml`` in PATH when it is a folder."""
    if os.path.isdir(path):
        path = os.path.join(path, DEFAULT_NAME)
    if not os.path.basename(path).endswith(SUFFIX) or os.path.basename(path) == SUFFIX:
        raise UsageError(
            f"{path}: a scenario file's name ends in {SUFFIX} (only those are collected "
            f"by `crashpoint run`), e.g. {os.path.join(os.path.dirname(path), DEFAULT_NAME)}"
        )
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        raise UsageError(f"{path}: the folder {parent} does not exist")
    return path


def _argv(text: str, scenario_dir: str) -> list[str]:
    """The agent's command as a list; an argument naming an existing file by a relative path
    becomes ``{scenario_dir}/...`` (the agent starts in the trial's empty working folder)."""
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"--command: {exc}: {text!r}") from None
    if not argv:
        raise UsageError("--command: give the agent's command, e.g. 'node agent.js {state_dir}'")
    out = []
    for a in argv:
        if not a.startswith(("-", "/", "{")) and "{" not in a and os.path.isfile(a):
            rel = os.path.relpath(os.path.abspath(a), scenario_dir)
            a = "{scenario_dir}/" + rel if rel != "." else "{scenario_dir}"
        out.append(a)
    return out


@command(
    "init",
    help="write a starter *.scenario.yaml for an agent command (never overwrites)",
    description="Writes PATH (default: ./agent.scenario.yaml; a folder: agent.scenario.yaml "
    "in it), a starter scenario for the agent COMMAND: kills at every boundary, kills before "
    "each file operation, and power cuts (these need strace: without it they are skipped "
    "and the run says why). An existing file is never overwritten (exit 2). The file is then "
    "read back as `crashpoint run` reads it; exit 1 if the gate would refuse it (the file is "
    "kept, and the message says what to change).",
    args=[
        arg("path", nargs="?", default=DEFAULT_NAME, metavar="PATH", help="the file to write"),
        arg(
            "--command",
            dest="agent_command",
            metavar="COMMAND",
            required=True,
            help="the agent's command line, one string: e.g. 'node agent.js --state "
            "{state_dir}' ({state_dir}: the trial's fresh state folder)",
        ),
        arg("--name", help="the scenario's name (default: from the command)"),
        arg(
            "--timeout",
            type=duration,
            default=60.0,
            metavar="DURATION",
            help="per attempt and for the golden run (default: 60s)",
        ),
    ],
)
def _init(ctx: Context) -> int:
    a = ctx.args
    path = _target(a.path)
    scenario_dir = os.path.dirname(os.path.abspath(path))
    argv = _argv(a.agent_command, scenario_dir)
    program = os.path.basename(argv[0])
    if program in _INTERPRETERS and len(argv) > 1 and not argv[1].startswith("-"):
        program = os.path.basename(argv[1])  # node agent.js: "agent.js"
    name = a.name or f"{program} survives kills, torn writes and power loss"
    text = TEMPLATE.format(
        prog=PROG,
        version=__version__,
        path=path,
        name=json.dumps(name),
        command=json.dumps(argv),  # a JSON list is a YAML flow sequence
        timeout=harness.format_duration(a.timeout),
        states=POWER_STATES,
        seed=zlib.crc32(" ".join(argv).encode()) % 10_000,  # the same command, the same seed
    )
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        raise UsageError(
            f"{path} exists: crashpoint init never overwrites a file; give another PATH "
            "or remove it"
        ) from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    ctx.print(f"wrote {path}: kill at every boundary, kill before each file operation, power loss")
    ctx.print(f"run it: {PROG} run {shlex.quote(path)}")
    if not any("{state_dir}" in x for x in argv):
        ctx.note(
            f"{PROG} init: note: the command names no {{state_dir}}: the harness gives each "
            "trial a fresh state folder; pass it to the agent (file-operation kills and power "
            "cuts look at {state_dir} and {workdir} only)"
        )
    from crashpoint import faults  # here, not at the top: a look for strace, for this note

    ok, why = faults.strace_available()
    if not ok:
        ctx.note(
            f"{PROG} init: note: strace cannot run here ({why}): the power_loss trials will be "
            "skipped with that reason, and kill at fileop sees only a Python agent's opens "
            "and renames"
        )
    try:
        harness.load_scenario(path)
    except ScenarioError as exc:
        ctx.note(f"{PROG} init: {path} was written, but the gate would refuse it: {exc}")
        return EXIT_FOUND
    return EXIT_OK
