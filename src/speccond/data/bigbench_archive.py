"""The withdrawn bigbench 1.0.0 source archive: the old source of the byte-level LRA text tasks and of the old
language data, kept only until those read the shared GLUE files (the registry no longer serves this archive)."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

from speccond.data.store import Source

ARCHIVE = "bigbench-1.0.0.tar.gz"
SHA256 = "1bb398a5512c6d798cdebe0dfa0ac03f67f6033fa6b39c6ef71df978c7cbc5c2"
URL_PREFIX = "https://files.pythonhosted.org/packages/95/f8/c019b3579df548a04cac12342cfcb878e50ddf6cfcd7fddba8cfc721c157"
MEMBER = "bigbench-1.0.0/bigbench/benchmark_tasks/cifar10_classification/base64/task.json"


def read_member(archive: Path, member: str) -> dict:
    """The JSON file ``member`` of the bigbench archive, streamed out of it (it need not be unpacked)."""
    return read_members(archive, (member,))[member]


def read_members(archive: Path, members: tuple[str, ...]) -> dict[str, dict]:
    """The JSON files ``members`` of the bigbench archive, by name, in one pass over the stream."""
    found: dict[str, dict] = {}
    with tarfile.open(archive, "r|gz") as tar:
        for entry in tar:
            if entry.name in members and entry.name not in found:
                handle = tar.extractfile(entry)
                assert handle is not None, entry
                found[entry.name] = json.loads(handle.read())
                if len(found) == len(set(members)):
                    return found
    missing = sorted(set(members) - set(found))
    raise ValueError(f"{archive} has no member {', '.join(missing)}; expected the bigbench 1.0.0 source archive")




class _Legacy:
    sources = (Source("folder named by $SPECCOND_BIGBENCH", "$SPECCOND_BIGBENCH"), Source("PyPI file host", URL_PREFIX))
    hint = f"put {ARCHIVE} in a folder and set SPECCOND_BIGBENCH to it"


SPEC = _Legacy()
