"""Masking of personal data and secrets in every text the proxy toolset returns to a model.

:func:`mask` replaces e-mails, phone numbers, payment cards, IBANs, Russian INN, SNILS and
passports, Chinese resident IDs, API keys, JWTs, bearer tokens, PEM private keys and the value
of ``password=…`` pairs by their kind in brackets (``[EMAIL]``, ``password=[PASSWORD]``), and
counts them. A number is masked only when it passes its check (Luhn, ISO 13616, the INN, SNILS
and RIC check digits, the numbering plans of :mod:`phonenumbers`), and the ambiguous ones only
beside a key word (a passport beside "паспорт", a 10-digit INN beside "ИНН"), so that dates,
versions, prices and order numbers stay readable.

Speed comes from anchors: each detector first looks for something cheap and rare — ``@`` for
e-mails, seven digits close together for the numbers, ``-----BEGIN`` for keys, a key word for
passwords — with ``str.find`` or one compiled scan, and runs its patterns and checks there only.

Overlaps: the longer span wins; of two equal spans, the kind listed first in
:data:`MASK_KINDS` (the most specific). Masking is repeated until nothing more is found, so
masking masked text changes nothing.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import phonenumbers
from stdnum import iban, luhn
from stdnum.cn import ric
from stdnum.exceptions import ValidationError
from stdnum.ru import inn

from ldims.mask_kinds import MASK_KINDS

_RANK = {kind: rank for rank, kind in enumerate(MASK_KINDS)}
_ALL = frozenset(MASK_KINDS)
_MAX_PASSES = 4  # a second pass finds what a shorter label brought within a key word's reach
_LABEL = re.compile(r"\[[A-Z_]{3,16}\]")


@dataclass(frozen=True)
class Span:
    """``text[start:end]`` is a value of ``kind``."""

    start: int
    end: int
    kind: str


@dataclass(frozen=True)
class Masked:
    """The masked text and how many values of each kind it lost (kinds with none left out)."""

    text: str
    counts: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class MaskConfig:
    """Which kinds are masked (default: all of :data:`MASK_KINDS`)."""

    kinds: frozenset[str] = _ALL

    def __post_init__(self) -> None:
        _checked(self.kinds)

    def mask(self, text: str) -> Masked:
        return mask(text, self.kinds)


def mask(text: str, kinds: frozenset[str] | None = None) -> Masked:
    """``text`` with every value of ``kinds`` (None: all) replaced by ``[KIND]``.

    Never raises on a str; an unknown kind name is a ValueError.
    """
    active = _checked(kinds)
    counts: dict[str, int] = {}
    for _ in range(_MAX_PASSES):
        spans = _find(text, active)
        if not spans:
            break
        text = _replaced(text, spans)
        for span in spans:
            counts[span.kind] = counts.get(span.kind, 0) + 1
    return Masked(text, counts)


def find_spans(text: str, kinds: frozenset[str] | None = None) -> list[Span]:
    """What one pass of :func:`mask` replaces: non-overlapping spans in text order."""
    return _find(text, _checked(kinds))


def _checked(kinds: Iterable[str] | None) -> frozenset[str]:
    if kinds is None:
        return _ALL
    active = frozenset(kinds)
    unknown = active - _ALL
    if unknown:
        raise ValueError(f"Unknown mask kinds {sorted(unknown)}; known: {', '.join(MASK_KINDS)}.")
    return active


def _find(text: str, active: frozenset[str]) -> list[Span]:
    if not text or not active:
        return []
    scan = _Scan(text)
    found: set[Span] = set()
    for kinds, detector in _DETECTORS:
        if kinds & active:
            found.update(span for span in detector(scan) if span.kind in active)
    return _resolved(found, len(text))


def _resolved(spans: Iterable[Span], size: int) -> list[Span]:
    """Longest first, then the most specific kind; a span overlapping a kept one is dropped."""
    taken = bytearray(size)
    kept = []
    for span in sorted(spans, key=lambda s: (s.start - s.end, _RANK[s.kind], s.start)):
        if taken.find(1, span.start, span.end) == -1:
            taken[span.start : span.end] = b"\x01" * (span.end - span.start)
            kept.append(span)
    return sorted(kept, key=lambda s: s.start)


def _replaced(text: str, spans: list[Span]) -> str:
    parts, at = [], 0
    for span in spans:
        parts += [text[at : span.start], f"[{span.kind.upper()}]"]
        at = span.end
    parts.append(text[at:])
    return "".join(parts)


class _Scan:
    """The text and its lower-case copy, for finding anchors with ``str.find``."""

    def __init__(self, text: str) -> None:
        self.text = text
        lower = text.lower()
        # lower() lengthens a few letters (İ); positions in such a copy would be wrong.
        self.lower = lower if len(lower) == len(text) else None

    def find_all(self, needle: str, *, case: bool = False) -> Iterator[int]:
        """Positions of ``needle`` (lower-case unless ``case``), ignoring case unless ``case``."""
        if case or self.lower is not None:
            haystack = self.text if case else self.lower
            assert haystack is not None
            at = haystack.find(needle)
            while at >= 0:
                yield at
                at = haystack.find(needle, at + 1)
        else:
            for match in re.finditer(re.escape(needle), self.text, re.IGNORECASE):
                yield match.start()


def _context(text: str, start: int, words: re.Pattern[str], reach: int = 48) -> bool:
    """Whether one of ``words`` stands in the ``reach`` characters before ``start``."""
    return words.search(text, max(0, start - reach), start) is not None


# --- private keys, JWTs, API keys, bearer tokens --------------------------------------------------

_PEM_BEGIN = re.compile(r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY( BLOCK)?-----")
_PEM_END = re.compile(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
# A key cut off before its END line: its header and base64 lines.
_PEM_BODY = re.compile(
    r"(?:\r?\n(?:[A-Za-z0-9+/=]{4,}(?=\r?\n|\Z)|[A-Za-z-]+: [^\r\n]*"
    r"|(?=\r?\n[A-Za-z0-9+/=]{4,})))*+"  # a blank line only before more base64
)
# The same with its lines run together by one space (a search snippet's whitespace).
_PEM_BODY_FLAT = re.compile(r"(?: [A-Za-z0-9+/=]{4,})*+")
_PEM_REACH = 65536  # the longest PEM key (RSA 16384, with headers) is far shorter
_BASE64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")


def _private_keys(scan: _Scan) -> Iterator[Span]:
    text = scan.text
    for at in scan.find_all("-----BEGIN", case=True):
        begin = _PEM_BEGIN.match(text, at)
        if begin is None:
            continue
        end_line = f"-----END {begin.group(1)}PRIVATE KEY{begin.group(2) or ''}-----"
        end = text.find(end_line, begin.end(), begin.end() + _PEM_REACH)
        if end >= 0:
            yield Span(at, end + len(end_line), "private_key")
        else:
            ends = [body.end() for body in (_PEM_BODY.match(text, begin.end()),) if body]
            ends += [body.end() for body in (_PEM_BODY_FLAT.match(text, begin.end()),) if body]
            yield Span(at, max(ends, default=begin.end()), "private_key")
    # A key's tail without its BEGIN line (a passage that starts inside the key): the base64
    # lines before its END line. With its BEGIN, the longer span above wins.
    for at in scan.find_all("-----END", case=True):
        end = _PEM_END.match(text, at)
        if end is not None:
            yield Span(_base64_before(text, at), end.end(), "private_key")


def _base64_before(text: str, at: int) -> int:
    """Where the run of base64 lines (or words) that ends at ``at`` begins: the last line
    may be short, the others are full (64 characters; 16 or more taken, not prose)."""
    start, shortest = at, 4
    while True:
        cursor = start
        while cursor > 0 and start - cursor < 2 and text[cursor - 1] in " \r\n":
            cursor -= 1
        word = cursor
        while word > 0 and cursor - word <= 128 and text[word - 1] in _BASE64:
            word -= 1
        size = cursor - word
        if size < shortest or size > 128 or (word > 0 and not text[word - 1].isspace()):
            return start
        start, shortest = word, 16


_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_JWT = re.compile(
    r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]*(?![A-Za-z0-9_-])"
)


def _jwts(scan: _Scan) -> Iterator[Span]:
    for at in scan.find_all("eyJ", case=True):
        if at and scan.text[at - 1] in _TOKEN_CHARS:  # inside a word: cheaper than the pattern
            continue
        match = _JWT.match(scan.text, at)
        if match and _json_object(match.group().split(".", 1)[0]):
            yield Span(match.start(), match.end(), "jwt")


def _json_object(segment: str) -> bool:
    try:
        decoded = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
        return isinstance(json.loads(decoded), dict)
    except (ValueError, binascii.Error):  # JSONDecodeError and UnicodeDecodeError included
        return False


# Well-known prefixes; the digit check below keeps words such as "sk-management-overview" out.
_API_KEY = re.compile(
    r"(?<![A-Za-z0-9_-])(?:"
    r"sk-(?:proj-|ant-(?:api|admin)[0-9]{2}-|svcacct-)?[A-Za-z0-9_-]{20,}"  # OpenAI, Anthropic
    r"|gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255}"  # GitHub
    r"|xox[abeprs]-[A-Za-z0-9-]{10,250}"  # Slack
    r"|(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}"  # AWS access key id
    r"|AIza[0-9A-Za-z_-]{35}"  # Google
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"  # Stripe
    r"|npm_[A-Za-z0-9]{36}|pypi-[A-Za-z0-9_-]{50,}|hf_[A-Za-z0-9]{30,}"  # npm, PyPI, HF
    r"|SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}"  # SendGrid
    r"|dop_v1_[a-f0-9]{64}|shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"  # DigitalOcean, Shopify
    r"|[0-9]{8,10}:AA[A-Za-z0-9_-]{33}"  # Telegram bot
    r")(?![A-Za-z0-9_-])"
)
_API_KEY_ANCHORS = (
    *("sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xox", "AKIA", "ASIA"),
    *("ABIA", "ACCA", "AIza", "glpat-", "sk_", "rk_", "pk_", "npm_", "pypi-", "hf_", "SG."),
    *("dop_v1_", "shpat_", "shpca_", "shppa_", "shpss_"),
)
_TELEGRAM_BOT = re.compile(r"[0-9]{8,10}(?=:AA)")


def _api_keys(scan: _Scan) -> Iterator[Span]:
    text = scan.text
    starts = [at for anchor in _API_KEY_ANCHORS for at in scan.find_all(anchor, case=True)]
    for colon in scan.find_all(":AA", case=True):
        bot = _TELEGRAM_BOT.search(text, max(0, colon - 10), colon)
        if bot:
            starts.append(bot.start())
    for at in starts:
        if at and text[at - 1] in _TOKEN_CHARS:
            continue
        match = _API_KEY.match(text, at)
        if match and _random_enough(match.group()):
            yield Span(match.start(), match.end(), "api_key")


def _random_enough(key: str) -> bool:
    """Other prefixes are distinctive; "sk-" starts words too ("sk-management-overview")."""
    if not key.startswith("sk-"):
        return True
    body = key[3:]
    return any(c.isdigit() for c in body) or (body.lower() != body and body.upper() != body)


_BEARER = re.compile(r"(?i:bearer)[ \t]+([A-Za-z0-9._~+/-]{16,}=*)(?![A-Za-z0-9._~+/=-])")
_BASIC = re.compile(r"(?i:basic)[ \t]+([A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])")


def _bearer_tokens(scan: _Scan) -> Iterator[Span]:
    text = scan.text
    for at in scan.find_all("bearer"):
        match = _BEARER.match(text, at)
        value = match.group(1) if match else ""
        if match and any(c.isdigit() for c in value) and any(c.isalpha() for c in value):
            yield Span(match.start(1), match.end(1), "token")
    for at in scan.find_all("basic"):
        match = _BASIC.match(text, at)
        if match and _basic_credentials(match.group(1)):
            yield Span(match.start(1), match.end(1), "token")


def _basic_credentials(value: str) -> bool:
    """Whether ``value`` is base64 of ``user:password`` (not a word after "basic")."""
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode()
    except (ValueError, binascii.Error):
        return False
    return ":" in decoded and decoded.isprintable()


# --- passwords: the value of a secret-named key ---------------------------------------------------

_SECRET_ANCHORS = ("pass", "pw", "secret", "token", "key", "пароль")
_CJK_SECRETS = ("密码", "口令", "密钥")
_KEY_TAIL = re.compile(r"[A-Za-z0-9_.\-а-яёА-ЯЁ]{0,64}")  # bounded: "pass" * 10**5 is linear
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_SECRET_WORDS = frozenset(
    {"password", "passwd", "passphrase", "pwd", "pass", "pw", "secret", "token", "apikey"}
    | {"пароль", "пароля"}
)
_KEY_QUALIFIERS = frozenset({"api", "access", "secret", "private", "auth", "client", "signing"})
_ASSIGN = re.compile(
    r"""["'\]]{0,2}(?:[ \t]*(?:=>|:=|[:=：]|是|为)| [—–-](?= ))[ \t]*"""  # also "Пароль — x"
    r"""(?:"(?P<dq>[^"\r\n]{1,256})"|'(?P<sq>[^'\r\n]{1,256})'|(?P<bare>[^\s"'<>,;]{1,256}))"""
)
_CJK = re.compile(r"[\u3000-\u9fff\uff00-\uffef]")  # CJK prose, full-width punctuation
_PROSE_AFTER = re.compile(r" [^\W\d_]")  # one word, then another: a sentence goes on
_NEXT_PAIR = re.compile(r"&[A-Za-z_][A-Za-z0-9_]*=")
_NOT_SECRETS = frozenset({"null", "none", "nil", "true", "false", "undefined", "required"})
_URL_CREDENTIALS = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,15}://[^\s:/@]{1,64}:([^\s/@]{1,128})@")


def _passwords(scan: _Scan) -> Iterator[Span]:
    text = scan.text
    seen: set[int] = set()  # "secret_key" holds two anchors: one key, read once
    for anchor in (*_SECRET_ANCHORS, *_CJK_SECRETS):
        for at in scan.find_all(anchor):
            cjk = anchor in _CJK_SECRETS
            end = at + len(anchor) if cjk else _KEY_TAIL.match(text, at).end()
            # "password reset", "passed": no value follows; cheaper to see first than the key
            if end in seen or not _ASSIGN.match(text, end):
                continue
            seen.add(end)
            if _secret_key(text[_key_start(text, at) : end]):
                value = _assigned_value(text, end)
                if value:
                    yield Span(value[0], value[1], "password")
    for at in scan.find_all("://", case=True):
        match = _URL_CREDENTIALS.search(text, max(0, at - 16), at + 200)
        if match and not _LABEL.fullmatch(match.group(1)):
            yield Span(match.start(1), match.end(1), "password")


def _trimmed(value: str) -> str:
    """A bare value without what may run on after it: CJK prose (no spaces there), the next
    pair of a query string, the full stop of a sentence, a closing bracket it did not open."""
    cuts = [match.start() for match in (_CJK.search(value), _NEXT_PAIR.search(value)) if match]
    value = value[: min(cuts)] if cuts else value
    value = value.rstrip(".:")
    for opener, closer in ("()", "[]", "{}"):
        if value.endswith(closer) and opener not in value:
            value = value[:-1]
    return value


def _key_start(text: str, at: int) -> int:
    start = at
    while start > 0 and at - start < 64 and (text[start - 1].isalnum() or text[start - 1] in "_.-"):
        start -= 1
    return start


def _secret_key(key: str) -> bool:
    """``DB_PASSWORD``, ``apiKey``, ``x-api-key``, ``Пароль``, ``数据库密码`` — not ``max_tokens``,
    ``token_type`` or ``tokenizer``."""
    if key.endswith(_CJK_SECRETS):
        return True
    parts = [part for part in re.split(r"[_.\-]+", _CAMEL.sub(r"\1_\2", key).lower()) if part]
    if not parts:
        return False
    if parts[-1] in _SECRET_WORDS:
        return True
    return parts[-1] == "key" and len(parts) > 1 and parts[-2] in _KEY_QUALIFIERS


def _assigned_value(text: str, key_end: int) -> tuple[int, int] | None:
    """The span of the value after ``key_end`` (``: v``, ``= "v"``, ``是v``), if it is a secret."""
    match = _ASSIGN.match(text, key_end)
    if match is None:
        return None
    group = next(name for name in ("dq", "sq", "bare") if match.group(name) is not None)
    start, end = match.span(group)
    if _LABEL.match(text, start):  # masked already
        return None
    if group == "bare":
        end = start + len(_trimmed(text[start:end]))
        # "To change your password: open Settings" is a sentence, not a password.
        if text[start:end].isalpha() and _PROSE_AFTER.match(text, end):
            return None
    value = text[start:end]
    if (
        not any(c.isalnum() for c in value)  # "****", "..."
        or value.lower() in _NOT_SECRETS
        or value.startswith(("$", "{{", "%(", "<"))  # a reference, not the secret
    ):
        return None
    return start, end


# --- e-mail ---------------------------------------------------------------------------------------

_EMAIL_CHAR = r"A-Za-z0-9а-яёА-ЯЁ"
_EMAIL = re.compile(
    rf"(?<![{_EMAIL_CHAR}._%+-])[{_EMAIL_CHAR}._%+-]{{1,64}}@"
    rf"(?:[{_EMAIL_CHAR}](?:[{_EMAIL_CHAR}-]{{0,61}}[{_EMAIL_CHAR}])?\.)+"
    rf"[A-Za-zа-яёА-ЯЁ]{{2,24}}(?![{_EMAIL_CHAR}_-])"
)
_USER_INFO = re.compile(r"://[^\s/@]{0,128}$")
# "icon@2x.png" is a retina image, not an address.
_FILE_SUFFIXES = frozenset({"png", "jpg", "jpeg", "gif", "svg", "webp", "bmp", "ico", "pdf"})


def _emails(scan: _Scan) -> Iterator[Span]:
    text = scan.text
    if "@" not in text:
        return
    if text.count("@") > 64:  # many: one scan beats a window per "@"
        windows: Iterable[tuple[int, int]] = [(0, len(text))]
    else:
        windows = [(max(0, at - 65), at + 256) for at in scan.find_all("@", case=True)]
    for low, high in windows:
        for match in _EMAIL.finditer(text, low, min(len(text), high)):
            if _USER_INFO.search(text, max(0, match.start() - 80), match.start()):
                continue  # the user (and password) of a URL, not an address
            local, _, domain = match.group().rpartition("@")
            if local.startswith(".") or local.endswith(".") or ".." in local:
                continue
            if domain.rsplit(".", 1)[-1].lower() not in _FILE_SUFFIXES:
                yield Span(match.start(), match.end(), "email")


# --- numbers: cards, IBANs, INN, SNILS, RIC, phones -----------------------------------------------

# Seven or more digits close together, where every number below has to be, or the check
# digits of an IBAN whose account number holds letters ("KZ20 901F FLZM 764J WTEK").
_CLUSTER = re.compile(
    r"[+(0-9](?:(?:[ \u00a0()./-]{0,3}[0-9]){6,}|(?<=[A-Z]{2}[0-9])[0-9](?= ?[A-Z0-9]{4}))"
)
_NOT_AFTER = r"(?<![0-9A-Za-z_.-])"  # not the tail of a word, a version or a longer number
_NOT_BEFORE = r"(?![0-9A-Za-z_])(?![.-][0-9A-Za-z])"
_CARD = re.compile(
    rf"{_NOT_AFTER}(?<![0-9][ -])[0-9](?:[ \u00a0-]?[0-9]){{12,18}}{_NOT_BEFORE}(?![ -][0-9])"
)
_CARD_SEPARATOR = re.compile("[ \u00a0-]")
_CARD_PREFIX = re.compile(r"4|5|6|3[0456789]|2(?:20[0-4]|22[1-9]|2[3-9]|[3-6]|7[01]|720)")
_IBAN = re.compile(
    r"(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}(?:[ \u00a0]?[A-Z0-9]{4}){2,7}(?:[ \u00a0]?[A-Z0-9]{1,3})?"
    r"(?![A-Za-z0-9])"
)
_INN = re.compile(rf"{_NOT_AFTER}(?:[0-9]{{12}}|[0-9]{{10}}){_NOT_BEFORE}")
_INN_WORDS = re.compile(r"(?i)\bинн\b|\binn\b|\btin\b|taxpayer|налогоплательщ|纳税|税号")
_SNILS = re.compile(
    rf"{_NOT_AFTER}(?<![0-9] )[0-9]{{3}}([ -]?)[0-9]{{3}}\1[0-9]{{3}}[ -]?[0-9]{{2}}"
    rf"{_NOT_BEFORE}(?! [0-9])"
)
_SNILS_WORDS = re.compile(r"(?i)снилс|snils|страхов")
_RIC = re.compile(
    rf"{_NOT_AFTER}[1-9][0-9]{{5}} ?(?:19|20)[0-9]{{2}}(?:0[1-9]|1[0-2])(?:0[1-9]|[12][0-9]|3[01])"
    r" ?[0-9]{3}[0-9Xx](?![0-9A-Za-z_])"
)


def _numbers(scan: _Scan) -> Iterator[Span]:
    text, size = scan.text, len(scan.text)
    for cluster in _CLUSTER.finditer(text):
        start, end = cluster.span()
        # two characters more: a RIC's X, and what follows the number for the lookaheads
        low, high = start, min(size, end + 2)
        yield from _cards(text, low, high)
        yield from _inns(text, low, high)
        yield from _snilses(text, low, high)
        yield from _resident_ids(text, low, high)
        yield from _phones(text, low, high)
        yield from _ibans(text, max(0, start - 12), min(size, end + 48), start)


def _cards(text: str, low: int, high: int) -> Iterator[Span]:
    for match in _CARD.finditer(text, low, high):
        raw = match.group()
        digits = _CARD_SEPARATOR.sub("", raw)
        if _card_grouping(raw) and _CARD_PREFIX.match(digits) and luhn.is_valid(digits):
            yield Span(match.start(), match.end(), "card")


def _card_grouping(raw: str) -> bool:
    """One separator used throughout, in groups of four (the last shorter), or Amex's 4-6-5."""
    if len(set(_CARD_SEPARATOR.findall(raw))) > 1:
        return False
    sizes = [len(group) for group in _CARD_SEPARATOR.split(raw)]
    return (
        len(sizes) == 1
        or sizes in ([4, 6, 5], [4, 6, 4])
        or (all(size == 4 for size in sizes[:-1]) and 1 <= sizes[-1] <= 4)
    )


def _ibans(text: str, low: int, high: int, cluster_start: int) -> Iterator[Span]:
    for match in _IBAN.finditer(text, low, high):
        if match.start() > cluster_start:
            break
        # The pattern may have taken a word after the number: drop groups until it checks.
        groups = match.group().split()
        while sum(len(group) for group in groups) >= 15:  # Norway's, the shortest IBAN
            candidate = " ".join(groups)
            if iban.is_valid(candidate):
                yield Span(match.start(), match.start() + len(candidate), "iban")
                break
            groups.pop()


def _inns(text: str, low: int, high: int) -> Iterator[Span]:
    for match in _INN.finditer(text, low, high):
        digits = match.group()
        # A 10-digit INN is a company's (public, and one random number in ten passes the check).
        if digits.startswith("00") or not inn.is_valid(digits):
            continue
        if len(digits) == 12 or _context(text, match.start(), _INN_WORDS):
            yield Span(match.start(), match.end(), "ru_inn")


def _snilses(text: str, low: int, high: int) -> Iterator[Span]:
    for match in _SNILS.finditer(text, low, high):
        digits = re.sub("[ -]", "", match.group())
        if not _snils_valid(digits):
            continue
        if digits != match.group() or _context(text, match.start(), _SNILS_WORDS):
            yield Span(match.start(), match.end(), "ru_snils")


def _snils_valid(digits: str) -> bool:
    """The SNILS check number (python-stdnum has none): numbers up to 001-001-998 have none."""
    if int(digits[:9]) <= 1001998:
        return False
    total = sum(
        int(digit) * weight for digit, weight in zip(digits[:9], range(9, 0, -1), strict=True)
    )
    return total % 101 % 100 == int(digits[9:])


def _resident_ids(text: str, low: int, high: int) -> Iterator[Span]:
    for match in _RIC.finditer(text, low, high):
        number = match.group().replace(" ", "").upper()
        try:
            ric.get_birth_date(number)  # the date must exist (no 30 February)
        except ValidationError:
            continue
        if ric.calc_check_digit(number) == number[-1]:
            yield Span(match.start(), match.end(), "cn_resident_id")


_PHONE = re.compile(
    r"(?<![0-9A-Za-z+_])(?<![0-9][ \u00a0.,/-])(?:"
    r"(?P<intl>(?:\+|00)[1-9][0-9]{0,2}(?:[ \u00a0.-]?(?:\([0-9]{1,5}\)|[0-9]{1,5})){1,6}+)"
    r"|(?P<ru>8[ \u00a0-]?(?:\([0-9]{3,5}\)|[0-9]{3,5})[ \u00a0-]?[0-9]{1,3}"
    r"(?:[ \u00a0-]?[0-9]{2}){2})"
    r"|(?P<cn>1[3-9][0-9](?:[ \u00a0-]?[0-9]{4}){2})"
    r"|(?P<cn400>[48]00-[0-9]{3}-[0-9]{4})"  # China's 400-810-8888 (and 800: also the US's)
    r"|(?P<us>(?:1[ .-])?(?:\([2-9][0-9]{2}\)[ \u00a0]?|[2-9][0-9]{2}[ .-])[0-9]{3}[ .-][0-9]{4})"
    r"|(?P<zero>(?:\(0[1-9][0-9]{0,4}\)[ \u00a0]?|0[1-9][0-9]{0,4}[ \u00a0/-])"
    r"[0-9]{3,8}(?:[ \u00a0-][0-9]{3,4})?)"
    r"|(?P<paren>\([0-9]{3,5}\)[ \u00a0]?[0-9]{1,3}(?:-[0-9]{2}){2})"
    r"|(?P<local>[0-9]{3}-[0-9]{2}-[0-9]{2})"
    r"|(?P<bare>[0-9]{7,15})"
    r")(?![0-9A-Za-z])(?![ \u00a0.,/-][0-9])"
)
_PHONE_REGIONS: dict[str, tuple[str | None, ...]] = {
    "intl": (None,),
    "ru": ("RU",),
    "cn": ("CN",),
    "cn400": ("CN", "US"),
    "us": ("US",),
    "zero": ("CN", "GB", "DE"),
    "paren": ("RU", "US", "CN", "GB", "DE"),
    "bare": ("RU", "CN", "US", "GB", "DE"),
}
_PHONE_WORDS = re.compile(
    r"(?i)\bтел|phone|\btel\b|mobile|\bcell|\bcall|fax|факс|\bмоб|звон|whats ?app|viber|telegram"
    r"|contact|контакт|电话|手机|联系|致电|拨打|热线|传真|微信"
)
# A number right after these is an order, an invoice or a book, however it is grouped.
_NOT_PHONE = re.compile(
    r"(?i)(?:№|#|isbn|issn|order|invoice|заказ\w*|сч[её]т\w*|артикул\w*|sku|订单号?|发票号?|编号|单号)"
    r"[ \t]*[:：]?[ \t]*$"
)
_DATE_LIKE = re.compile(r"(?:[0-9]{1,2}|[0-9]{4})([./-])[0-9]{1,2}\1(?:[0-9]{2}|[0-9]{4})")


def _phones(text: str, low: int, high: int) -> Iterator[Span]:
    for match in _PHONE.finditer(text, low, high):
        shape, number = match.lastgroup or "", match.group()
        unseparated = number.isdigit()
        if _DATE_LIKE.fullmatch(number) or _context(text, match.start(), _NOT_PHONE, 24):
            continue
        # Bare digits are anything (an id, a count): only beside a word that says phone.
        if (shape in ("local", "bare") or (unseparated and shape == "ru")) and not _context(
            text, match.start(), _PHONE_WORDS, 40
        ):
            continue
        if number.startswith("00"):  # 0049 30 …: the international prefix from Europe
            number = "+" + number[2:]
        if shape == "local" or _valid_phone(number, _PHONE_REGIONS.get(shape, ())):
            yield Span(match.start(), match.end(), "phone")


def _valid_phone(number: str, regions: tuple[str | None, ...]) -> bool:
    for region in regions:
        try:
            if phonenumbers.is_valid_number(phonenumbers.parse(number, region)):
                return True
        except phonenumbers.NumberParseException:
            continue
    return False


# --- passports: only beside a word that says so ---------------------------------------------------

_PASSPORT_WORDS = ("паспорт", "passport", "серия", "серии", "护照")
_PASSPORT = re.compile(
    r"(?<![0-9])[0-9]{2} ?[0-9]{2}[ \u00a0]*,?[ \u00a0]*(?:(?:№|N|No\.?|номер)[ \u00a0:]*)?"
    r"[0-9]{6}(?![0-9])",
    re.IGNORECASE,
)
_PASSPORT_REACH = 48


def _passports(scan: _Scan) -> Iterator[Span]:
    text, size = scan.text, len(scan.text)
    for word in _PASSPORT_WORDS:
        for at in scan.find_all(word):
            start = at + len(word)
            window_end = min(size, start + _PASSPORT_REACH + 24)
            match = _PASSPORT.search(text, start, window_end)
            if (
                match
                and match.start() <= start + _PASSPORT_REACH
                # the window's end would hide a seventh digit from the lookahead
                and (match.end() < window_end or window_end == size)
            ):
                yield Span(match.start(), match.end(), "ru_passport")


_DETECTORS: tuple[tuple[frozenset[str], Callable[[_Scan], Iterator[Span]]], ...] = (
    (frozenset({"private_key"}), _private_keys),
    (frozenset({"jwt"}), _jwts),
    (frozenset({"api_key"}), _api_keys),
    (frozenset({"token"}), _bearer_tokens),
    (frozenset({"password"}), _passwords),
    (frozenset({"email"}), _emails),
    (frozenset({"ru_passport"}), _passports),
    (frozenset({"card", "iban", "ru_inn", "ru_snils", "cn_resident_id", "phone"}), _numbers),
)
