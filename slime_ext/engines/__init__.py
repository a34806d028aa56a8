"""Engines: token-in / token-out generation behind one small contract (see ``base.Engine``)."""

from slime_ext.engines.base import Engine, EngineError, SamplingParams, TokenOut

__all__ = ["Engine", "EngineError", "SamplingParams", "TokenOut"]
