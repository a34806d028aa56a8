"""Integer arithmetic: + - * and // (written /), unary minus and parentheses."""

DIGITS = "0123456789"
SYMBOLS = "+-*/()"


def tokenize(text):
    """Integers and one-character symbols; spaces are skipped."""
    tokens = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in DIGITS:
            j = i
            while j < len(text) and text[j] in DIGITS:
                j += 1
            tokens.append(int(text[i:j]))
            i = j
        elif ch in SYMBOLS:
            tokens.append(ch)
            i += 1
        else:
            raise ValueError(f"unexpected character {ch!r} at {i}")
    return tokens


class Parser:
    def __init__(self, tokens):
        self.tokens = tokens
        self.pos = 0

    def peek(self):
        if self.pos < len(self.tokens):
            return self.tokens[self.pos]
        return None

    def take(self):
        token = self.peek()
        self.pos += 1
        return token

    def expression(self):
        value = self.term()
        while self.peek() in ("+", "-"):
            if self.take() == "+":
                value = value + self.term()
            else:
                value = value - self.term()
        return value

    def term(self):
        value = self.factor()
        while self.peek() in ("*", "/"):
            if self.take() == "*":
                value = value * self.factor()
            else:
                value = value // self.factor()
        return value

    def factor(self):
        token = self.take()
        if token == "(":
            value = self.expression()
            if self.take() != ")":
                raise ValueError("missing closing parenthesis")
            return value
        if token == "-":
            return -self.factor()
        if isinstance(token, int):
            return token
        raise ValueError(f"unexpected token {token!r}")


def evaluate(text):
    parser = Parser(tokenize(text))
    value = parser.expression()
    if parser.peek() is not None:
        raise ValueError("unexpected input after the expression")
    return value
