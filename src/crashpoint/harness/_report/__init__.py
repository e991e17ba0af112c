"""Reports: what a person, a CI system or ``crashpoint replay`` reads after a campaign.

Layer 5, a room of the harness: it may import the specification (:mod:`.._spec`), the library
(its redaction rule) and the base. ``_safe`` writes reports and evidence safely (folders
nobody else controls, no symlink followed, files 0600 written whole) and redacts secrets;
``_evidence`` is a failing trial's folder (with its one-line replay command); ``_results`` a
campaign's result and its JSON and JUnit reports; ``_html`` the gate's self-contained HTML page;
``_markdown`` the gate's Markdown summary (a CI's own page); ``_baseline`` a gate.json read back
and compared with a new gate (what changed); ``_verdict`` the gate's verdict as the exit code a
CI reads (0 pass, 1 fail, 2 bad input, 3 not judged, 130/143 interrupted); ``_running`` the
"running" markers that replace the previous run's outputs while a gate runs.
"""

from crashpoint.harness._report._baseline import (
    changes_html,
    changes_lines,
    compare_gates,
    load_gate,
    one_line,
)
from crashpoint.harness._report._evidence import (
    ESSENTIAL,
    bound_folder,
    redact_history,
    replay_command,
    write_trial_folder,
)
from crashpoint.harness._report._html import (
    render_html,
    timeline_svg,
)
from crashpoint.harness._report._markdown import (
    SUMMARY_COLUMNS,
    redact_env_secrets,
    render_markdown,
    replay_here,
    summary_row,
)
from crashpoint.harness._report._results import (
    CampaignResult,
)
from crashpoint.harness._report._running import (
    clear_report_running,
    mark_report_running,
)
from crashpoint.harness._report._safe import (
    DIR_MODE,
    FILE_MODE,
    MIN_SCRUB_LEN,
    EvidenceBudget,
    Scrubber,
    UnsafeReportFolder,
    atomic_writer,
    check_report_folder,
    copy_tree_bounded,
    human_size,
    is_plain_path,
    marker,
    redact_bytes,
    redact_env,
    redact_json,
    redact_text,
    scrub_file,
    scrub_tree,
    secure_dir,
    tree_size,
    unredact_json,
    write_file,
)
from crashpoint.harness._report._verdict import (
    GateVerdict,
    gate_verdict,
)

__all__ = [
    "DIR_MODE",
    "ESSENTIAL",
    "FILE_MODE",
    "MIN_SCRUB_LEN",
    "SUMMARY_COLUMNS",
    "CampaignResult",
    "EvidenceBudget",
    "GateVerdict",
    "Scrubber",
    "UnsafeReportFolder",
    "atomic_writer",
    "bound_folder",
    "changes_html",
    "changes_lines",
    "check_report_folder",
    "clear_report_running",
    "compare_gates",
    "copy_tree_bounded",
    "gate_verdict",
    "human_size",
    "is_plain_path",
    "load_gate",
    "mark_report_running",
    "marker",
    "one_line",
    "redact_bytes",
    "redact_env",
    "redact_env_secrets",
    "redact_history",
    "redact_json",
    "redact_text",
    "render_html",
    "render_markdown",
    "replay_command",
    "replay_here",
    "scrub_file",
    "scrub_tree",
    "secure_dir",
    "summary_row",
    "timeline_svg",
    "tree_size",
    "unredact_json",
    "write_file",
    "write_trial_folder",
]
