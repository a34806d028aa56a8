"""The one learning pipeline both drivers call (the embedded trainer, ``trainers/``; Slime's hooks, ``hooks/``).

A judged turn is read as an ``Example`` (``example.py``), ``select``ed (``select.py``), taught by the hinted
teacher and checked (``teacher.py``, ``teachability.py``), grouped with fresh samples (``groups.py``) and
replayed under its user's preferences (``replay.py``) by ``Pipeline.prepare`` (``pipeline.py``), over the
``Scorer`` each driver has (``scorers.py``); ``objective.py`` turns the samples into advantages and a loss.
The settings are declared in ``settings.py``. Nothing here imports a driver (``tests/test_layout.py``).
"""
