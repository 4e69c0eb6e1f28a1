"""The generated Pathfinder datasets (speccond.data.pathfinder) as 32 x 32 images, without presets (``--set``
sizes them). As pixel tokens they are LRA's Pathfinder task, lra-pathfinder (long_range_arena.py)."""
from __future__ import annotations

from speccond.harness.tasks.registry import Task

TASKS = (Task("pathfinder", "pathfinder", "image"), Task("pathfinder-small", "pathfinder-small", "image"))
