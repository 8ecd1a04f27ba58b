"""The wire format between the grader and a sandboxed child: length-prefixed JSON headers, each with
an optional safetensors payload.

Tensors cross as plain bytes that only ever become plain `torch.Tensor`s on arrival; nothing is
pickled, so a child cannot smuggle an object (a lying Tensor subclass, a callable) into the parent.
"""
from __future__ import annotations

import json
import os
import select
import struct
import time

_HEAD = struct.Struct(">II")  # header length, payload length
MAX_HEADER = 1 << 20
MAX_PAYLOAD = 1 << 30
# Answers are gradients of tiny tensors: a child's message larger than this is refused, never held.
MAX_ANSWER_BYTES = 64 * 2**20


class ProtocolError(Exception):
    """The other side broke the format, closed the pipe, or ran out of time."""


def encode(header: dict, tensors: dict | None = None) -> bytes:
    body = json.dumps(header).encode()
    payload = b""
    if tensors:
        import torch
        from safetensors.torch import save

        payload = save({k: v.detach().clone(memory_format=torch.contiguous_format) for k, v in tensors.items()})
    return _HEAD.pack(len(body), len(payload)) + body + payload


def write(fd: int, header: dict, tensors: dict | None = None) -> None:
    send(fd, encode(header, tensors))


def send(fd: int, message: bytes) -> None:
    """An encoded message, whole."""
    view = memoryview(message)
    while view:
        view = view[os.write(fd, view):]


class Reader:
    """Reads whole messages from a file descriptor, each within a deadline set by the caller."""

    def __init__(self, fd: int, max_payload: int = MAX_PAYLOAD):
        self.fd = fd
        self.max_payload = max_payload
        self.buffer = bytearray()

    def _fill(self, size: int, deadline: float | None) -> None:
        while len(self.buffer) < size:
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not select.select([self.fd], [], [], remaining)[0]:
                    raise TimeoutError("no answer before the time limit")
            chunk = os.read(self.fd, max(65536, size - len(self.buffer)))
            if not chunk:
                raise ProtocolError("the other side closed the connection")
            self.buffer += chunk

    def _take(self, size: int) -> bytes:
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def read(self, deadline: float | None = None) -> tuple[dict, dict]:
        self._fill(_HEAD.size, deadline)
        body_len, payload_len = _HEAD.unpack(self._take(_HEAD.size))
        if body_len > MAX_HEADER or payload_len > self.max_payload:
            raise ProtocolError(f"message too large ({body_len} + {payload_len} bytes)")
        self._fill(body_len + payload_len, deadline)
        try:
            header = json.loads(self._take(body_len))
            tensors = {}
            if payload_len:
                from safetensors.torch import load

                tensors = load(self._take(payload_len))
        except Exception as exc:  # a forged message is a broken message, whatever it raised
            raise ProtocolError(f"unreadable message: {exc}") from None
        if not isinstance(header, dict):
            raise ProtocolError("unreadable message: header is not an object")
        return header, tensors


def as_answer(value, scalar: bool):
    """An answer as the comparison takes it: a gradient of no dimensions (a loss's parts, `dreg_loss = 1.0`)
    written as a plain number, as a teacher writes it, is that number as a tensor; anything else as it is
    (a number where the gradient has a shape is told as not a tensor)."""
    if scalar and type(value) in (int, float):
        import torch

        with torch.inference_mode():  # as every answer the cell computes is made
            return torch.tensor(float(value), dtype=torch.float64)
    return value


def changed_in_place(copy, original) -> bool:
    """Whether a cell's copy of an input no longer holds the input's values: the cell changed it in place
    (through another name bound to it, say). Both the sandbox's child and the self-check ask it."""
    import torch

    if type(copy) is not torch.Tensor or type(original) is not torch.Tensor:
        return False
    return copy.shape != original.shape or not torch.equal(copy, original)
