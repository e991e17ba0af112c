"""Saves its state the way many libraries do: a temp file named after the process
(``.state.json.<pid>.tmp``), fsynced, renamed over the real file. Correct; its temp file has
another name in every run, which a file-operation kill must still find."""

import json
import os
import sys

from crashpoint import probe

folder = sys.argv[sys.argv.index("--state") + 1]
path = os.path.join(folder, "state.json")
done = json.load(open(path)) if os.path.exists(path) else []  # noqa: SIM115
for step in ("fetch", "notify"):
    if step in done:
        continue
    probe.step_started(step)
    done.append(step)
    tmp = os.path.join(folder, f".state.json.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(done, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    probe.step_completed(step)
print(",".join(done))
