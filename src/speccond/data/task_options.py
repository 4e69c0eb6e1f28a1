"""The options of a task named with a query, ``imagefolder:DIR?size=64`` or ``text:DIR?text=s&label=l``: each
option given once and with a value, or a one-line ValueError. A blank value (``vocab_from=``) or a repeated
option (``text=a&text=b``) would otherwise be dropped or overridden without a word (urllib's ``parse_qs``
drops blanks and keeps every repeat), and the run would use something the user did not ask for.
"""
from __future__ import annotations

from urllib.parse import parse_qs


def task_options(name: str, query: str, example: str) -> dict[str, str]:
    """``query`` ("a=1&b=x") -> {"a": "1", "b": "x"}; ValueError naming ``name`` and ``example`` when a field has
    no "=", a blank value or appears twice."""
    if not query:
        return {}
    try:
        fields = parse_qs(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise ValueError(f"a task's options look like {example}, got {name!r}") from None
    blank = sorted(key for key, values in fields.items() if any(not value for value in values))
    if blank:
        raise ValueError(f"{name!r}: option(s) {blank} have no value; give {blank[0]}=VALUE or leave it out")
    repeated = sorted(key for key, values in fields.items() if len(values) > 1)
    if repeated:
        raise ValueError(f"{name!r}: option(s) {repeated} given more than once; give each once")
    return {key: values[0] for key, values in fields.items()}
