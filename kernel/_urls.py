"""URLs read one way: the normaliser the capability check, the policy and the HTTP adapter share.

``read_url`` reads an ``http`` or ``https`` URL as RFC 3986 does and returns it normalised
(``Url``), or refuses it (``UrlRefused``, code ``cap.url_invalid``, with a ``reason`` token).
The capability check and the policy match the normalised form, and the HTTP adapter sends
exactly ``Url.text``, so what was checked is what goes on the wire: there is no second reading
for a hostile URL to play against the first.

Normalisation (RFC 3986 §6.2.2, plus what a client does before it connects):

- scheme and host lower-cased; a Unicode host IDNA-encoded (the stdlib's ``idna`` codec), so a
  Cyrillic look-alike is an ``xn--`` name and never equals an ASCII one;
- one trailing dot of the host dropped (``example.com.`` is ``example.com``: the same name to
  DNS, and the form sent, so the ``Host`` header carries no dot);
- the default port dropped (http 80, https 443); another port kept;
- IPv6 literals in their compressed form (``[::1]``) through ``ipaddress``;
- in the path and query, a percent-escape of an unreserved character (``ALPHA DIGIT - . _ ~``)
  decoded, every other escape upper-cased (``%2f`` is ``%2F``), and a character that may not
  appear there (``<``, ``"``, non-ASCII, ...) percent-encoded as UTF-8, as httpx would;
- dot segments removed from the path (§5.2.4) after that decoding, so ``/api/%2e%2e/admin``
  is ``/admin``; an empty path is ``/``;
- the fragment dropped: it is never sent.

Refused (``UrlRefused.reason``), because it cannot be read unambiguously or is not a request
this kernel makes: a URL that is not text (``not_text``) or longer than ``URL_CHARS_MAX``
(``too_long``); a control, format or space character, or a backslash, anywhere
(``character``); a scheme other than http/https (``scheme``); no ``//`` authority (``authority``); userinfo, even empty
(``userinfo``); an empty host, a character outside ``a-z 0-9 - . _`` after IDNA, an empty
label, a label over ``LABEL_CHARS_MAX`` or a name over ``HOST_CHARS_MAX``, or a Unicode host
that IDNA's nameprep would change (``ß``, full-width letters: IDNA 2003 and 2008 read them
differently) (``host``); a numeric host that is not a canonical dotted quad (``2130706433``,
``0177.0.0.1``, ``0x7f.0.0.1``, ``127.1``: any host whose last label is a number, as a browser
reads it, must be four decimal octets without leading zeros), an IPv6 literal that does not
parse, an IPvFuture literal, or a zone id (``ip_form``); a port that is empty, not ASCII
digits, or outside 1..65535 (``port``); a malformed percent-escape, or escapes nested more
than ``DECODE_ROUNDS_MAX`` deep (``percent``); an encoded ``/`` or ``\\`` in the path, whose
segment boundaries servers disagree on, or a segment that a lenient reading (below) turns into
one (``encoded_separator``); a path segment that some server reads as ``.`` or ``..`` though
this reader does not, or a ``..`` after an empty segment (``dot_segment``).

The lenient readings. Dot segments are removed here and the result is sent, so the danger is a
segment this reader takes for a name and a server for a dot segment (``/api/..;/admin`` is
sent whole, and Tomcat serves ``/admin``). Each segment of the path is read, before dot
segments are removed (so ``/api/.;/../admin``, which one reading makes ``/api/admin`` and
another ``/admin``, is refused too, though only the first would be sent), as the most lenient
server would: percent-decoded
again and again (double encoding, ``%252e``: a proxy decodes, then the application),
overlong UTF-8 forms folded (``%C0%AE`` is ``.``), undecodable bytes dropped, NFKC applied
(``%EF%BC%8E`` FULLWIDTH FULL STOP is ``.``, ``%E2%80%A5`` TWO DOT LEADER is ``..``), then cut at
the first ``;`` (a matrix parameter: Tomcat, Jetty and Spring read ``..;x`` as ``..``) and at a
NUL (C strings), and rid of white space (Spring's trimmed tokens; Windows drops trailing
spaces and dots, so ``.. .`` is ``..`` there). If what is left is one or more dots, the URL is refused; if the decoded segment holds
a ``/`` or ``\\`` (``%252f``, ``%C0%AF``, ``%EF%BC%8F`` FULLWIDTH SOLIDUS), likewise. A segment of
only dots as written (``...``) is refused too (Windows reads it as a dot segment). A ``..``
whose segment to remove is empty (``/api//../admin``) is refused because a server that merges
slashes first removes ``api`` instead. Rejected alternative: stripping matrix parameters or
merging slashes before matching. That changes what is sent (``;v=1`` is part of the path to
an application that uses it, ``//`` to one that does not merge), and the rule that what is
checked is what is sent would then hold only for the servers that read a URL our way.
Parameters on other segments (``/api;v=1/x``, ``/api/x;/../y``) are kept and sent as written:
every reading agrees on which segments they are.

Matching, for the capability check and the policy (``kernel._effects``):

- A grant's host entry is read as an authority: ``host`` matches the URL's normalised host on
  any port; ``host:port`` matches that host on that effective port only (``example.com:443``
  admits ``https://example.com/``). Entries are normalised like a URL's host; an entry that
  cannot be read matches nothing. A bare IPv6 address (``::1``) is read as ``[::1]``.
- A path prefix matches whole segments (``path_has_prefix``): ``/api`` matches ``/api`` and
  ``/api/x`` but not ``/apix``; ``/api/`` matches ``/api/`` and ``/api/x`` but not ``/api``;
  ``/`` matches every path. Prefixes are normalised like a path; one that does not start with
  ``/`` or cannot be read matches nothing. The query is not part of the path.
- A policy's host glob (``host_matches_glob``) is an ``fnmatch`` pattern over the whole
  normalised host (lower-cased, one trailing dot dropped, IDNA-encoded like a host). ``*``
  matches any run of characters, dots included, so ``*.example.com`` matches
  ``a.example.com`` and ``a.b.example.com``, but never ``example.com`` itself, nor
  ``evil-example.com``, nor ``example.com.evil.net``: the dot before ``example.com`` is
  literal and the pattern is anchored at both ends. A look-alike of a name is an ``xn--``
  name, so a pattern written for the ASCII name (``*.apple.com``) never matches it. The port
  is not part of what a glob sees. Rejected alternative: ``*`` as one label (TLS's wildcard
  rule); policies write ``127.*`` for an address block. That ``127.*`` also matches a name
  like ``127.evil.net`` is the price: the grant's exact host list, not the policy, bounds
  where a request may go.

Not here: DNS (a name that resolves to a loopback or private address is the grant's to
allow or not), redirects (the adapter does not follow them), and anything not http/https.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
import unicodedata
from dataclasses import dataclass
from typing import Final

__all__ = [
    "DECODE_ROUNDS_MAX",
    "HOST_CHARS_MAX",
    "LABEL_CHARS_MAX",
    "URL_CHARS_MAX",
    "Url",
    "UrlRefused",
    "host_matches_glob",
    "path_has_prefix",
    "read_authority",
    "read_host_entry",
    "read_path",
    "read_url",
]

URL_CHARS_MAX: Final = 65_536
"""The longest URL read, in characters: httpx's own limit, so no URL it sends is refused."""

HOST_CHARS_MAX: Final = 253
"""The longest host name, after IDNA, without its trailing dot (RFC 1035 §2.3.4)."""

LABEL_CHARS_MAX: Final = 63
"""The longest label of a host name (RFC 1035 §2.3.4)."""

DECODE_ROUNDS_MAX: Final = 4
"""How many times a path segment is percent-decoded to see what a server that decodes again
(a proxy and then an application, say) would read; escapes nested deeper are refused."""

URL_INVALID: Final = "cap.url_invalid"

DEFAULT_PORTS: Final = {"http": 80, "https": 443}

_UNRESERVED: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_SUB_DELIMS: Final = frozenset("!$&'()*+,;=")
_PATH_SAFE: Final = _UNRESERVED | _SUB_DELIMS | frozenset(":@/")
_QUERY_SAFE: Final = _PATH_SAFE | frozenset("?")
_HEX: Final = frozenset("0123456789abcdefABCDEF")
_DIGITS: Final = frozenset("0123456789")
_HOST_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-._")
_HIDDEN_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp", "Zs"})
_ENCODED_SEPARATORS: Final = frozenset({0x2F, 0x5C})  # "/" and "\"


class UrlRefused(ValueError):
    """A URL, or a part of one, that cannot be read unambiguously: ``code`` (the ``cap.*``
    code the capability check journals), ``reason`` (a token naming the rule, listed in the
    module docstring) and ``detail``."""

    def __init__(self, reason: str, detail: str, code: str = URL_INVALID) -> None:
        self.code = code
        self.reason = reason
        self.detail = detail
        super().__init__(f"{detail} [{code}: {reason}]")


@dataclass(frozen=True, slots=True)
class Url:
    """A normalised http(s) URL. ``host`` is lower-case ASCII, an IPv4 dotted quad, or an
    IPv6 address in compressed form without brackets; ``port`` is None for the scheme's
    default; ``path`` starts with ``/``; ``query`` is None when there is no ``?``."""

    scheme: str
    host: str
    port: int | None
    path: str
    query: str | None

    @property
    def effective_port(self) -> int:
        return DEFAULT_PORTS[self.scheme] if self.port is None else self.port

    @property
    def authority(self) -> str:
        """``host[:port]`` as written in the URL and the ``Host`` header."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"

    @property
    def text(self) -> str:
        """The URL to send: exactly what was checked."""
        query = "" if self.query is None else f"?{self.query}"
        return f"{self.scheme}://{self.authority}{self.path}{query}"


# --- reading -----------------------------------------------------------------------------------


def read_url(text: object) -> Url:
    """``text`` read and normalised, or ``UrlRefused``."""
    if not isinstance(text, str):
        raise UrlRefused("not_text", f"a URL is text, not {type(text).__name__}")
    if len(text) > URL_CHARS_MAX:
        raise UrlRefused("too_long", f"the URL has {len(text)} characters (max {URL_CHARS_MAX})")
    _refuse_hidden(text)
    scheme, colon, rest = text.partition(":")
    scheme = scheme.lower() if scheme.isascii() else scheme
    if not colon or scheme not in DEFAULT_PORTS:
        raise UrlRefused("scheme", f"scheme {scheme!r} is not http or https")
    if not rest.startswith("//"):
        raise UrlRefused("authority", "an http(s) URL has an authority after '//'")
    rest = rest[2:]
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    host, port = read_authority(rest[:end], scheme)
    target = rest[end:].partition("#")[0]
    path, question, query = target.partition("?")
    return Url(
        scheme,
        host,
        port,
        read_path(path or "/"),
        _normalise_escapes(query, _QUERY_SAFE, path=False) if question else None,
    )


def read_authority(text: str, scheme: str) -> tuple[str, int | None]:
    """``(host, port)`` of ``host[:port]``; the port None when absent or ``scheme``'s
    default. ``UrlRefused`` if it cannot be read."""
    if "@" in text:
        raise UrlRefused("userinfo", "a URL with userinfo ('user@') is refused")
    host, port_text = _split_authority(text)
    port = _port(port_text)
    return host, None if port == DEFAULT_PORTS.get(scheme) else port


def read_host_entry(text: str) -> tuple[str, int | None] | None:
    """A grant's ``hosts`` entry: ``(host, port)``, the port None when not pinned; None if
    the entry cannot be read (it then matches nothing)."""
    if text.count(":") >= 2 and not text.startswith("["):
        text = f"[{text}]"  # a bare IPv6 address
    try:
        _refuse_hidden(text)
        if "@" in text:
            return None
        host, port_text = _split_authority(text)
        return host, _port(port_text)
    except UrlRefused:
        return None


def read_path(text: str) -> str:
    """An absolute path normalised: escapes as in the module docstring, dot segments removed.
    ``UrlRefused`` for a hidden character, a malformed escape, an encoded separator, or a
    segment another server reads as a dot segment (``_refuse_lenient_readings``)."""
    _refuse_hidden(text)
    path = _normalise_escapes(text, _PATH_SAFE, path=True)
    for segment in path.split("/"):
        if segment not in (".", ".."):
            _refuse_lenient_readings(segment)
    return _without_dot_segments(path)


def _refuse_hidden(text: str) -> None:
    for ch in text:
        if ch == "\\" or ch.isspace() or unicodedata.category(ch) in _HIDDEN_CATEGORIES:
            raise UrlRefused("character", f"character U+{ord(ch):04X} is not allowed in a URL")


def _split_authority(text: str) -> tuple[str, str | None]:
    """``(normalised host, port text or None)``."""
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise UrlRefused("ip_form", "an IPv6 literal without its ']'")
        after = text[close + 1 :]
        if after and not after.startswith(":"):
            raise UrlRefused("port", f"{after!r} follows an IPv6 literal")
        return _ipv6(text[1:close]), after[1:] if after else None
    name, colon, port_text = text.partition(":")
    return _name(name), port_text if colon else None


def _port(text: str | None) -> int | None:
    if text is None:
        return None
    if not text or len(text) > 5 or not set(text) <= _DIGITS:
        raise UrlRefused("port", f"port {text!r} is not 1 to 5 ASCII digits")
    port = int(text)
    if not 1 <= port <= 65535:
        raise UrlRefused("port", f"port {port} is outside 1..65535")
    return port


def _ipv6(text: str) -> str:
    if text[:1] in ("v", "V"):
        raise UrlRefused("ip_form", "IPvFuture literals are refused")
    if "%" in text:
        raise UrlRefused("ip_form", "an IPv6 zone id is refused")
    try:
        if not text.isascii():
            raise ValueError(text)
        return ipaddress.IPv6Address(text).compressed
    except ValueError as exc:
        raise UrlRefused("ip_form", f"{text!r} is not an IPv6 address") from exc


def _name(text: str) -> str:
    """A reg-name or IPv4 host, normalised."""
    name = text[:-1] if text.endswith(".") else text
    if not name:
        raise UrlRefused("host", "the host is empty")
    name = name.lower() if name.isascii() else _idna(name)
    if not set(name) <= _HOST_CHARS:
        raise UrlRefused("host", f"host {name!r} has a character outside a-z 0-9 - . _")
    labels = name.split(".")
    if "" in labels:
        raise UrlRefused("host", f"host {name!r} has an empty label")
    if _is_number(labels[-1]):
        return _ipv4(name, labels)
    if len(name) > HOST_CHARS_MAX or max(len(label) for label in labels) > LABEL_CHARS_MAX:
        detail = f"host of {len(name)} characters (max {HOST_CHARS_MAX}, {LABEL_CHARS_MAX} a label)"
        raise UrlRefused("host", detail)
    return name


def _idna(name: str) -> str:
    """A Unicode host as IDNA ASCII, only if nameprep leaves it as written (lower-cased)."""
    try:
        encoded = name.encode("idna").decode("ascii").lower()
        back = encoded.encode("ascii").decode("idna")
    except UnicodeError as exc:
        raise UrlRefused("host", f"host {name!r} is not a valid IDNA name") from exc
    if back != name.lower():
        raise UrlRefused("host", f"IDNA reads host {name!r} as {back!r}: ambiguous")
    return encoded


def _is_number(label: str) -> bool:
    """The WHATWG URL test for a host that is an IPv4 address: its last label is a number."""
    if label.startswith("0x"):
        return set(label[2:]) <= _HEX
    return set(label) <= _DIGITS


def _ipv4(name: str, labels: list[str]) -> str:
    canonical = len(labels) == 4 and all(
        len(label) <= 3
        and set(label) <= _DIGITS
        and (label == "0" or not label.startswith("0"))
        and int(label) <= 255
        for label in labels
    )
    if not canonical:
        raise UrlRefused("ip_form", f"numeric host {name!r} is not a canonical dotted quad")
    return name


def _normalise_escapes(text: str, safe: frozenset[str], *, path: bool) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "%":
            pair = text[i + 1 : i + 3]
            if len(pair) != 2 or not set(pair) <= _HEX:
                raise UrlRefused("percent", f"malformed percent-escape at {text[i : i + 3]!r}")
            byte = int(pair, 16)
            if path and byte in _ENCODED_SEPARATORS:
                raise UrlRefused("encoded_separator", f"%{pair} in the path is ambiguous")
            out.append(chr(byte) if chr(byte) in _UNRESERVED else f"%{pair.upper()}")
            i += 3
            continue
        out.append(ch if ch in safe else "".join(f"%{b:02X}" for b in ch.encode("utf-8")))
        i += 1
    return "".join(out)


def _without_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4 for an absolute path: ``/a/./b/../c`` is ``/a/c``, ``/a/..`` is ``/``.
    A ``..`` that would remove an empty segment (``/api//../admin``) is refused: a server that
    merges slashes first (nginx, Spring) removes ``api`` instead."""
    segments = path.split("/")[1:]
    out: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment in (".", ".."):
            if segment == ".." and out and out[-1] == "":
                raise UrlRefused("dot_segment", "'..' after an empty segment ('//') is ambiguous")
            if segment == ".." and out:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(segment)
    return "/" + "/".join(out)


def _refuse_lenient_readings(segment: str) -> None:
    """Refuse a normalised path segment that a lenient server reads as a separator or as a
    dot segment, though this reader does not (the module docstring lists the readings)."""
    if "%" not in segment and ";" not in segment:
        if segment and set(segment) == {"."}:
            raise UrlRefused("dot_segment", f"segment {segment!r} is all dots")
        return  # no escape, no parameter: every server reads it as written
    reading = _lenient_reading(segment)
    if "/" in reading or "\\" in reading:
        raise UrlRefused("encoded_separator", f"segment {segment!r} can decode to a separator")
    name = "".join(reading.split(";", 1)[0].split("\x00", 1)[0].split())
    if name and set(name) == {"."}:
        raise UrlRefused("dot_segment", f"segment {segment!r} can be read as {name!r}")


def _lenient_reading(segment: str) -> str:
    """``segment`` (normalised: ASCII, escapes well formed) percent-decoded until nothing
    changes (at most ``DECODE_ROUNDS_MAX`` times: deeper nesting is refused), overlong UTF-8
    forms folded, undecodable bytes dropped, and NFKC applied."""
    data = segment.encode("ascii")
    for _ in range(DECODE_ROUNDS_MAX):
        decoded = _unquote(data)
        if decoded == data:
            break
        data = decoded
    else:
        if _unquote(data) != data:
            detail = f"segment {segment!r} nests escapes over {DECODE_ROUNDS_MAX} deep"
            raise UrlRefused("percent", detail)
    text = _OVERLONG.sub(_fold_overlong, data).decode("utf-8", "ignore")
    return unicodedata.normalize("NFKC", text)


_ESCAPE: Final = re.compile(rb"%([0-9A-Fa-f]{2})")


def _unquote(data: bytes) -> bytes:
    return _ESCAPE.sub(lambda match: bytes([int(match.group(1), 16)]), data)


_OVERLONG: Final = re.compile(
    rb"[\xc0\xc1][\x80-\xbf]|\xe0[\x80-\x9f][\x80-\xbf]|\xf0[\x80-\x8f][\x80-\xbf]{2}"
)
"""UTF-8 sequences longer than their code point needs (``%C0%AE`` for ``.``): invalid, yet read
as the character by decoders that do not check (IIS and Tomcat once did)."""


def _fold_overlong(match: re.Match[bytes]) -> bytes:
    first, *rest = match.group()
    point = first & (0x1F if len(rest) == 1 else 0x0F if len(rest) == 2 else 0x07)
    for byte in rest:
        point = point << 6 | byte & 0x3F
    return chr(point).encode("utf-8")


# --- matching ----------------------------------------------------------------------------------


def path_has_prefix(path: str, prefix: str) -> bool:
    """Whether normalised ``path`` lies under ``prefix``, segment by segment."""
    if not prefix.startswith("/"):
        return False
    try:
        prefix = read_path(prefix)
    except UrlRefused:
        return False
    if prefix.endswith("/"):
        return path.startswith(prefix)
    return path == prefix or path.startswith(prefix + "/")


def host_matches_glob(host: str, glob: str) -> bool:
    """Whether normalised ``host`` matches the policy glob (rules in the module docstring)."""
    pattern = glob[:-1] if glob.endswith(".") else glob
    if not pattern.isascii():
        try:
            pattern = pattern.encode("idna").decode("ascii")
        except UnicodeError:
            return False
    return fnmatch.fnmatchcase(host, pattern.lower())
