"""The proxy toolset's limits (seed §8.2), kept in Redis so every API replica shares them.

A *generation* is one answer a model is writing: the envelope's ``trace_id``, or over MCP the
request's ``_meta`` ``traceId`` / the ``X-Trace-Id`` header, else the MCP session. Per
principal (the API key, or the tenant without keys):

- calls a minute (``MCP_PROXY_CALLS_PER_MINUTE``);
- calls on one document in one generation (``MCP_RATE_LIMIT_CALLS``, the seed's 10);
- text returned in one generation: tokens (``MCP_RATE_LIMIT_TOKEN_OUTPUT``) and bytes
  (``MCP_PROXY_MAX_OUTPUT_BYTES``, the seed's 20 KB);
- distinct generations an hour (``MCP_PROXY_GENERATIONS_PER_HOUR``) and text of one document
  an hour across generations (``MCP_PROXY_DOC_BYTES_PER_HOUR``): new trace ids do not reset
  what a key may pull out of a document.

``admit`` checks and counts a call atomically (one Lua script); ``grant`` reserves output
from what is left (the caller trims its text to the grant), ``refund`` returns what the
trimmed text did not use. Redis unreachable: the call is refused (``STORE_UNAVAILABLE``) —
limits that cannot be checked are not skipped.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

import redis

from ldims.proxy.errors import RateLimitExceeded, StoreUnavailable

GENERATION_TTL_SECONDS = 3600

# KEYS: minute calls, doc calls in generation, generations of the hour (set)
# ARGV: per-minute limit, per-doc limit, generations limit, generation id, minute ttl, gen ttl,
#       hour ttl
_ADMIT = """
local minute = tonumber(redis.call('GET', KEYS[1]) or '0')
if minute >= tonumber(ARGV[1]) then return {1, redis.call('PTTL', KEYS[1])} end
local is_member = redis.call('SISMEMBER', KEYS[3], ARGV[4])
if is_member == 0 and redis.call('SCARD', KEYS[3]) >= tonumber(ARGV[3]) then
  return {3, redis.call('PTTL', KEYS[3])}
end
local doc = tonumber(redis.call('GET', KEYS[2]) or '0')
if doc >= tonumber(ARGV[2]) then return {2, redis.call('PTTL', KEYS[2])} end
redis.call('INCR', KEYS[1]); redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('INCR', KEYS[2]); redis.call('PEXPIRE', KEYS[2], ARGV[6])
if is_member == 0 then
  redis.call('SADD', KEYS[3], ARGV[4]); redis.call('PEXPIRE', KEYS[3], ARGV[7])
end
return {0, minute + 1, doc + 1}
"""

# KEYS: generation tokens, generation bytes, document bytes of the hour
# ARGV: wanted tokens, wanted bytes, token limit, byte limit, doc-hour byte limit, gen ttl, hour
_GRANT = """
local tokens = tonumber(redis.call('GET', KEYS[1]) or '0')
local bytes = tonumber(redis.call('GET', KEYS[2]) or '0')
local doc = tonumber(redis.call('GET', KEYS[3]) or '0')
local t = math.min(tonumber(ARGV[1]), tonumber(ARGV[3]) - tokens)
local b = math.min(tonumber(ARGV[2]), tonumber(ARGV[4]) - bytes, tonumber(ARGV[5]) - doc)
if t <= 0 or b <= 0 then
  local which = 4
  if tonumber(ARGV[5]) - doc <= 0 then which = 5 end
  local ttl = redis.call('PTTL', which == 5 and KEYS[3] or KEYS[1])
  return {0, 0, which, ttl, tokens, bytes}
end
redis.call('INCRBY', KEYS[1], t); redis.call('PEXPIRE', KEYS[1], ARGV[6])
redis.call('INCRBY', KEYS[2], b); redis.call('PEXPIRE', KEYS[2], ARGV[6])
redis.call('INCRBY', KEYS[3], b); redis.call('PEXPIRE', KEYS[3], ARGV[7])
return {t, b, 0, 0, tokens + t, bytes + b}
"""

_LIMIT_NAMES = {
    1: ("calls_per_minute", "MCP_PROXY_CALLS_PER_MINUTE"),
    2: ("calls_per_document", "MCP_RATE_LIMIT_CALLS"),
    3: ("generations_per_hour", "MCP_PROXY_GENERATIONS_PER_HOUR"),
    4: ("output_per_generation", "MCP_RATE_LIMIT_TOKEN_OUTPUT / MCP_PROXY_MAX_OUTPUT_BYTES"),
    5: ("document_bytes_per_hour", "MCP_PROXY_DOC_BYTES_PER_HOUR"),
}


@dataclass(frozen=True)
class LimitSettings:
    calls_per_minute: int = 120
    calls_per_document: int = 10
    token_output: int = 6000
    output_bytes: int = 20 * 1024
    generations_per_hour: int = 120
    document_bytes_per_hour: int = 100 * 1024


@dataclass(frozen=True)
class Usage:
    """What a generation has used, for the result's metadata and the audit record."""

    calls_on_document: int = 0
    tokens: int = 0
    bytes: int = 0

    def state(self, limits: LimitSettings) -> dict[str, Any]:
        return {
            "documentCalls": f"{self.calls_on_document}/{limits.calls_per_document}",
            "tokens": f"{self.tokens}/{limits.token_output}",
            "bytes": f"{self.bytes}/{limits.output_bytes}",
        }


@dataclass(frozen=True)
class Grant:
    tokens: int
    bytes: int
    usage: Usage


class Limiter:
    def __init__(self, client: redis.Redis, limits: LimitSettings, prefix: str = "") -> None:
        self.client = client
        self.limits = limits
        self.prefix = f"{prefix}proxy:"
        self._admit = client.register_script(_ADMIT)
        self._grant = client.register_script(_GRANT)

    @classmethod
    def from_url(cls, url: str, limits: LimitSettings, prefix: str = "") -> Limiter:
        client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        return cls(client, limits, prefix)

    def admit(self, principal: str, generation: str, doc_id: str | None) -> Usage:
        """Count one call of ``principal`` in ``generation`` (on ``doc_id``), or refuse it."""
        now = time.time()
        minute, hour = int(now // 60), int(now // 3600)
        keys = [
            self._key("m", principal, str(minute)),
            self._key("d", principal, generation, doc_id or "-"),
            self._key("g", principal, str(hour)),
        ]
        argv = [
            self.limits.calls_per_minute,
            self.limits.calls_per_document if doc_id else 1 << 30,
            self.limits.generations_per_hour,
            generation,
            120_000,
            GENERATION_TTL_SECONDS * 1000,
            7_200_000,
        ]
        answer = self._run(self._admit, keys, argv)
        if int(answer[0]) != 0:
            self._refuse(int(answer[0]), int(answer[1]))
        return Usage(calls_on_document=int(answer[2]) if doc_id else 0)

    def grant(self, principal: str, generation: str, doc_id: str, tokens: int, size: int) -> Grant:
        """Reserve up to ``tokens`` / ``size`` bytes of output; refuse when nothing is left."""
        hour = int(time.time() // 3600)
        keys = [
            self._key("t", principal, generation),
            self._key("b", principal, generation),
            self._key("h", principal, doc_id, str(hour)),
        ]
        argv = [
            tokens,
            size,
            self.limits.token_output,
            self.limits.output_bytes,
            self.limits.document_bytes_per_hour,
            GENERATION_TTL_SECONDS * 1000,
            7_200_000,
        ]
        answer = [int(value) for value in self._run(self._grant, keys, argv)]
        if answer[2]:
            self._refuse(answer[2], answer[3])
        return Grant(answer[0], answer[1], Usage(tokens=answer[4], bytes=answer[5]))

    def refund(self, principal: str, generation: str, doc_id: str, tokens: int, size: int) -> None:
        """Give back output reserved by ``grant`` that the trimmed text did not use."""
        if tokens <= 0 and size <= 0:
            return
        hour = int(time.time() // 3600)
        try:
            with self.client.pipeline(transaction=False) as pipe:
                pipe.decrby(self._key("t", principal, generation), max(tokens, 0))
                pipe.decrby(self._key("b", principal, generation), max(size, 0))
                pipe.decrby(self._key("h", principal, doc_id, str(hour)), max(size, 0))
                pipe.execute()
        except (redis.RedisError, OSError):
            pass  # a refund lost errs on the strict side

    def retry_after(self, principal: str, generation: str, doc_id: str) -> int:
        """Seconds until this generation's and this document's output budgets renew."""
        hour = int(time.time() // 3600)
        keys = (
            self._key("t", principal, generation),
            self._key("h", principal, doc_id, str(hour)),
        )
        try:
            ttls = [int(self.client.pttl(key)) for key in keys]
        except (redis.RedisError, OSError):
            return GENERATION_TTL_SECONDS
        return _seconds(max(ttls))

    def _key(self, kind: str, *parts: str) -> str:
        # Hashed: ids and trace ids are caller-chosen text; keys stay short and safe.
        digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=12).hexdigest()
        return f"{self.prefix}{kind}:{digest}"

    def _run(self, script: Any, keys: list[str], argv: list[Any]) -> list[Any]:
        try:
            return list(script(keys=keys, args=argv))
        except (redis.RedisError, OSError) as exc:
            raise StoreUnavailable(
                "The rate-limit store (Redis) is unavailable; the call was refused.",
                component="redis",
            ) from exc

    def _refuse(self, which: int, ttl_ms: int) -> None:
        name, setting = _LIMIT_NAMES[which]
        retry = _seconds(ttl_ms)
        raise RateLimitExceeded(
            f"Limit '{name}' reached ({setting}); retry in {retry} s.",
            limit=name,
            retryAfterSeconds=retry,
        )


def _seconds(ttl_ms: int) -> int:
    """A key's remaining time (PTTL; negative: none) as whole seconds to wait, at least 1."""
    return max(1, -(-max(ttl_ms, 0) // 1000))
