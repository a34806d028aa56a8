"""OpenAI-style errors: every failure a client sees is one of these, never a traceback."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A request that cannot be served, with the HTTP status and the OpenAI error fields."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        type: str = "invalid_request_error",
        close: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.code = code
        self.type = type
        self.close = close  # send the error, then close the connection: the rest of the request is not read

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
