"""``Content-Encoding`` gzip and deflate, decoded with a bound on what one read may become.

Shared by the model provider's HTTP client (:mod:`actors.model.http`) and ``web_fetch``'s
(:mod:`actors.tools.client`). Codings applied twice multiply their ratios: a few kilobytes on the wire
could otherwise become gigabytes in one call, on the event loop.
"""

from __future__ import annotations

import zlib

CODINGS = ("gzip", "deflate")  # the codings decoded; others are the caller's to refuse or pass through
MAX_DECODED = 128 * 2**20  # bytes one read may decompress to: deflate alone stays under 70 MiB a 64 KiB read


class DecodingFailed(ValueError):
    """A body that does not decode, or one read of it that would decompress past the bound. The HTTP clients
    say it in their own terms (httpx's ``DecodingError`` for the model client's callers)."""


class Decoder:
    """``Content-Encoding`` gzip / deflate, innermost last, as httpx decodes them.

    Each step of a read gives at most a bound of bytes: :meth:`decode` refuses a read that would decompress to
    more than :data:`MAX_DECODED` (:class:`DecodingFailed`); :meth:`decode_upto` stops at the bound it is
    given and sets :attr:`over` (the decoder is then spent: what was left undecoded is dropped)."""

    def __init__(self, codings: list[str]) -> None:
        self._steps = [zlib.decompressobj(zlib.MAX_WBITS | 16) if c == "gzip" else _Deflate()
                       for c in reversed(codings)]
        self.over = False  # a step had more to give than the bound

    def decode(self, data: bytes, end: bool) -> bytes:
        return self._run(data, end, MAX_DECODED, strict=True)

    def decode_upto(self, data: bytes, end: bool, limit: int) -> bytes:
        """What ``data`` decodes to, each step giving at most ``limit`` bytes (at least 1: zlib takes 0 as no
        bound); ``end``: the body ends with it. A step cut short sets :attr:`over`; the steps after it still
        decode what it gave, so the bytes returned are always the body's own."""
        if limit < 1:
            raise ValueError(f"the bound must be at least 1 byte, got {limit}")
        return self._run(data, end, limit, strict=False)

    def _run(self, data: bytes, end: bool, limit: int, *, strict: bool) -> bytes:
        try:
            for step in self._steps:
                data = step.decompress(data, limit)
                if step.unconsumed_tail:
                    if strict:
                        raise DecodingFailed(f"one read of the body decompresses to more than {limit:,} bytes")
                    self.over = True
                elif end and not self.over:
                    data += step.flush()
        except zlib.error as exc:
            raise DecodingFailed(str(exc)) from exc
        return data


class _Deflate:
    """zlib-wrapped deflate, or raw deflate when the first bytes say so (as httpx's DeflateDecoder)."""

    def __init__(self) -> None:
        self._first = True
        self._inner = zlib.decompressobj()

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        first, self._first = self._first, False
        try:
            return self._inner.decompress(data, max_length)
        except zlib.error:
            if not first:
                raise
            self._inner = zlib.decompressobj(-zlib.MAX_WBITS)
            return self._inner.decompress(data, max_length)

    @property
    def unconsumed_tail(self) -> bytes:
        return self._inner.unconsumed_tail

    def flush(self) -> bytes:
        return self._inner.flush()


__all__ = ["CODINGS", "MAX_DECODED", "Decoder", "DecodingFailed"]
