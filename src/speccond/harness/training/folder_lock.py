"""One writer per folder: ``with writing(folder): ...`` holds an advisory lock on ``folder/.lock``.

A run directory (train.py) and a comparison or tuning folder (compare.py, ``speccond tune``) are each
written by one process at a time. The lock is ``fcntl.flock`` on a file that records the holder's pid:
the kernel releases it when the process ends, however it ends (a kill included), so a dead process never
holds it and nothing needs cleaning up. A second process is refused at once with a ValueError naming the
folder and the holder's pid. Advisory: only speccond's writers take it; readers (``speccond report``)
do not need it.
"""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

LOCK_FILE = ".lock"


@contextmanager
def writing(folder: str | Path) -> Iterator[Path]:
    """Create ``folder`` if needed and hold its lock for the ``with`` block; yield the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    handle = open(path, "a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise ValueError(f"{folder} is being written by another process (pid {holder}, lock {path}); wait for it "
                             "to finish or stop it, then run the command again") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        try:
            yield folder
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        handle.close()
