"""``speccond data list``: every dataset and where it comes from, here and now.

    for line in listing(DATASETS): print(line)

A dataset read from files names each source in the order it is tried, with the folder or address it
resolves to on this machine ("not available here" for a variable that is unset or a shared data folder
that is absent), and its online path when it has one; a dataset made here (generated, or bundled with a
library) says so.
"""
from __future__ import annotations

from typing import Iterable

from speccond.data.shared import shared_data_dir
from speccond.data.store import DatasetSpec


def listing(specs: Iterable[DatasetSpec]) -> list[str]:
    """One block per dataset: its name, then an indented line per place its data can come from."""
    lines = []
    for spec in sorted(specs, key=lambda s: s.name):
        lines.append(spec.name)
        if not spec.files:
            lines.append("    nothing to obtain: made here (generated from a fixed seed, or bundled with a library)")
            continue
        names = ", ".join(name for name, _ in spec.files.values())
        lines.append(f"    files ({len(spec.files)}, each checked against its SHA-256): {names}")
        for number, source in enumerate(spec.sources, start=1):
            found = source.resolve()
            lines.append(f"    {number}. {source.description}: {found if found is not None else 'not available here'}")
        if spec.online is not None:
            used = "used here: there is no shared data folder" if shared_data_dir() is None else "used only without the shared data folder"
            lines.append(f"    online: {spec.online_description} ({used})")
    return lines
