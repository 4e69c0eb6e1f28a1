"""How a config value is written as text, in run labels, folder names and report cells: one owner, so a
value reads the same everywhere."""
from __future__ import annotations


def show_value(value) -> str:
    """A config value as a label or report shows it: floats by ``:g`` (1e-3 -> "0.001", 10.0 -> "10"), others by str."""
    return f"{value:g}" if isinstance(value, float) else str(value)
