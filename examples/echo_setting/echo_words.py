"""The words of the echo setting's tasks (a helper module beside the setting, imported by it)."""

WORDS = ("apple", "river", "stone")
