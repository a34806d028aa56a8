"""Simulated users for learning experiments: procedural tasks, scripted personas (CPU only) and
personas played by any OpenAI-compatible endpoint."""

from slime_ext.simulate.client import ChatClient
from slime_ext.simulate.llm_persona import LLMPersona, parse_rating
from slime_ext.simulate.personas import PERSONAS, Check, Persona, get_persona
from slime_ext.simulate.tasks import KINDS, SPLITS, Task, grading_tasks, math_tasks

__all__ = ["KINDS", "PERSONAS", "SPLITS", "ChatClient", "Check", "LLMPersona", "Persona", "Task", "get_persona",
           "grading_tasks", "math_tasks", "parse_rating"]
