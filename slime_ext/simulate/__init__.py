"""Simulated users for learning experiments: procedural tasks and scripted personas (CPU only)."""

from slime_ext.simulate.personas import PERSONAS, Check, Persona, get_persona
from slime_ext.simulate.tasks import KINDS, SPLITS, Task, grading_tasks, math_tasks

__all__ = ["KINDS", "PERSONAS", "SPLITS", "Check", "Persona", "Task", "get_persona", "grading_tasks", "math_tasks"]
