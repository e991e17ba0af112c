"""Almost durable: temp file + fsync + rename, but no fsync of the folder. The data is safe;
the rename is not: after a power cut the folder may still name the old ``state.json`` (or none),
although the step was reported done. Fails under ``power_loss: {model: posix}`` with
"acknowledged but not durable"; the explanation names the missing folder fsync.

    python nodirsync_json.py STATE_DIR
"""

import json
import os
import sys

from naive_json import main


def save(path, state):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # BUG: the folder is never fsynced, so the rename may not survive


if __name__ == "__main__":
    main(sys.argv[1], save=save)
