"""Errors the gateway answers with, in the OpenAI shape: ``{"error": {"message", "type", "param", "code"}}``.

Every refusal is one :class:`GatewayError` carrying its HTTP status, so a client (the ``openai`` package raises
``BadRequestError``, ``NotFoundError``, ``AuthenticationError`` ... from the status) reads what was wrong and
which field.
"""
from __future__ import annotations


class GatewayError(Exception):
    """A request the gateway refuses or could not serve.

    Args:
        status: HTTP status (400 bad request, 401 no key, 404 unknown model or episode, 413 body too large,
            499 client gone, 500 the generator failed, 503 shutting down, 504 timed out).
        message: one line saying what is wrong and, where it helps, what to do.
        type: OpenAI's error type (``invalid_request_error``, ``authentication_error``, ``server_error``...).
        param: the request field at fault, if any.
        code: a short machine-readable code (``model_not_found``, ``context_length_exceeded``...).
    """

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> GatewayError:
    return GatewayError(400, message, "invalid_request_error", param, code)


__all__ = ["GatewayError", "bad_request"]
