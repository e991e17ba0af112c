"""naive_json.py made durable: each save writes a temp file in the same folder, fsyncs it,
renames it over ``state.json`` and fsyncs the folder, and only then reports the step done.
Passes every power-loss crash state of both models.

    python durable_json.py STATE_DIR
"""

import json
import os
import sys

from naive_json import main


def save(path, state):
    folder = os.path.dirname(path)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


if __name__ == "__main__":
    main(sys.argv[1], save=save)
