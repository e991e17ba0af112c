#!/usr/bin/env bash
# The crash-recovery gate, for any CI: install crashpoint if needed, run the scenarios, write the
# reports, and exit with the gate's code (0 every trial passed, 1 a trial failed, 2 bad usage or
# a malformed scenario file, 3 the gate could not judge: no scenario found, a fault family whose
# faults never fired; 130/143 stopped by SIGINT/SIGTERM).
#
#   bash ci/crash-gate.sh [PATH-or-OPTION ...]      (default: scenarios/)
#
# Environment (all optional):
#   CRASHPOINT_REPORT    report folder (default: crashpoint-report); gate.json, junit.xml,
#                        report.html, gate.log and one folder per failing trial go there
#   CRASHPOINT_SHARD     I/N: run shard I of N of every campaign (one per CI matrix job)
#   CRASHPOINT_SEED      overrides every scenario's seed
#   CRASHPOINT_WORKERS   pytest-xdist workers (a number or auto; needs pytest-xdist)
#   CRASHPOINT_BASELINE  a previous gate.json or report folder: the gate says what changed since
#                        (new failures, fixed, flaky); skipped, with a note, if it does not exist
#   CRASHPOINT_INSTALL   auto (default) | editable | pip | none
#                        auto: nothing if crashpoint imports already; else `pip install -e .`
#                        in a checkout of crashpoint itself, else `pip install $CRASHPOINT_PIP_SPEC`
#   CRASHPOINT_PIP_SPEC  what `pip` installs (default: crashpoint; e.g. "crashpoint==0.1.0")
#   PYTHON               the interpreter (default: python3)
set -euo pipefail

PY="${PYTHON:-python3}"
REPORT="${CRASHPOINT_REPORT:-crashpoint-report}"
INSTALL="${CRASHPOINT_INSTALL:-auto}"
SPEC="${CRASHPOINT_PIP_SPEC:-crashpoint}"

say() { printf 'crash-gate: %s\n' "$*" >&2; }

is_crashpoint_checkout() {
    [ -f pyproject.toml ] && grep -Eq '^name[[:space:]]*=[[:space:]]*"crashpoint"' pyproject.toml
}

case "$INSTALL" in
    auto)
        if "$PY" -c 'import crashpoint' >/dev/null 2>&1; then
            :
        elif is_crashpoint_checkout; then
            say "installing this checkout: $PY -m pip install -q -e ."
            "$PY" -m pip install -q -e .
        else
            say "installing $SPEC"
            "$PY" -m pip install -q "$SPEC"
        fi
        ;;
    editable) "$PY" -m pip install -q -e . ;;
    pip) "$PY" -m pip install -q "$SPEC" ;;
    none) ;;
    *) say "CRASHPOINT_INSTALL must be auto, editable, pip or none, not '$INSTALL'"; exit 2 ;;
esac

args=("$@")
if [ "${#args[@]}" -eq 0 ]; then
    args=(scenarios/)
fi
args+=(--report "$REPORT")
if [ -n "${CRASHPOINT_SHARD:-}" ]; then
    args+=(--shard "$CRASHPOINT_SHARD")
fi
if [ -n "${CRASHPOINT_SEED:-}" ]; then
    args+=(--seed "$CRASHPOINT_SEED")
fi
if [ -n "${CRASHPOINT_WORKERS:-}" ]; then
    args+=(-n "$CRASHPOINT_WORKERS")
fi
if [ -n "${CRASHPOINT_BASELINE:-}" ]; then
    if [ -e "$CRASHPOINT_BASELINE" ]; then
        args+=(--baseline "$CRASHPOINT_BASELINE")
    else
        say "no baseline at $CRASHPOINT_BASELINE yet (a first run?): not comparing"
    fi
    unset CRASHPOINT_BASELINE  # the plugin reads it too: only what was checked here counts
fi

mkdir -p "$REPORT"
say "$PY -m crashpoint run ${args[*]}"
code=0
"$PY" -m crashpoint run "${args[@]}" 2>&1 | tee "$REPORT/gate.log" || code=$?

# On GitHub Actions the gate itself appends its summary to $GITHUB_STEP_SUMMARY (verdict, table,
# failing trials with their replay commands, what changed) and prints annotations.
say "reports in $REPORT/ (open report.html); exit $code"
exit "$code"
