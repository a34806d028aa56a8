"""The script of a process-limit test: fork sleeping children until a fork is refused, print the count.

Shared by ``test_sandbox.py`` and ``test_sandbox_totals.py``.
"""
from __future__ import annotations

import textwrap


def fork_until_refused(start: int = 0, hold_s: float = 0.0) -> str:
    """Python source that forks children (each sleeps 30 s) until ``fork`` fails, printing ``start`` plus the
    children made so far after each one (the run may be stopped as soon as a fork is refused, so the count is out
    before that: its last line), then sleeps ``hold_s`` seconds still holding them (0: exits at once)."""
    return textwrap.dedent(f"""
        import os, time
        n = {start}
        while True:
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            n += 1
            print(n, flush=True)
        if {hold_s!r}:
            time.sleep({hold_s!r})
    """)
