from calc.parser import Parser, evaluate, tokenize

__all__ = ["Parser", "evaluate", "tokenize"]
