"""Secrets kept out of everything llmbench writes, prints or reports: one rule, used everywhere.

A URL is *used* as given (credentials and all) and *shown* through :func:`redact_url`:

- the userinfo (``user:password@``) goes, the user name too: a user name alone is often the key
  (``https://TOKEN@host``);
- the query and the fragment go, whole. Which parameters carry a secret can't be known (``token``, ``key``,
  ``sig``, ``X-Amz-Signature``, ``code``, a bare ``?sk-...`` with no name), so none is kept: a list of names
  that "look secret" would miss the next one. Dropping the query also keeps a recorded URL stable, and
  resume and compare match runs on it;
- the scheme, host, port and path stay: they say where the requests went. (A path can hold a key too, as
  some gateways ask; that can't be told from a model's name, so paths are kept. Pass keys by
  ``--api-key-env``.)

Free text that may embed URLs (an httpx message: ``... for url 'http://u:p@h/m?token=...'``) goes through
:func:`scrub`; a command line (an ``ab`` side, a worker's) through :func:`redact_command`; text that may echo a
secret llmbench knows (a server's error body quoting the key) through :func:`mask`. Standard library only, so
any module can use it (``redact_url`` takes a history database's ``postgresql://`` URL as well).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from urllib.parse import parse_qsl, unquote, urlsplit

REDACTED = "redacted"
# a URL inside free text: a scheme, "://", then up to a space or a quote (trailing punctuation put back after)
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")
_TRAILING = ".,;:!?)]}"
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")  # VAR=value, as ``env`` and shells take it
# the words of an option's name that make its value a secret (--token, --api-key, --hf_token, --password, ...);
# a name ending in env/file/path/var names where the secret is (--api-key-env VAR), not the secret: kept
_SECRET_WORDS = frozenset({"token", "key", "apikey", "secret", "password", "passwd", "pw", "auth", "authorization",
                           "credential", "credentials", "signature", "sig", "cookie", "header", "bearer"})  # fmt: skip
_REFERENCE_WORDS = frozenset({"env", "file", "path", "var"})


def redact_url(url: str) -> str:
    """``url`` fit to record or print: no userinfo, no query, no fragment (see the module docstring for why).
    Works on any scheme (http, postgresql, ray) and on a bare ``user:pw@host:port``; never raises."""
    text = url.strip()
    if "://" not in text:  # a bare address (Ray's host:port, maybe with user@): the same rule by hand
        text = re.split(r"[?#]", text, maxsplit=1)[0]
        head, slash, rest = text.partition("/")
        return head.rpartition("@")[2] + slash + rest
    try:
        u = urlsplit(text)
    except ValueError:  # an invalid IPv6 host ("http://[::1/v1") and the like: cut by hand
        scheme, _, rest = text.partition("://")
        rest = re.split(r"[?#]", rest, maxsplit=1)[0]
        authority, slash, path = rest.partition("/")
        return f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"
    # host names are case-blind: lower-cased, as earlier versions recorded them (resume and compare match on it).
    # Joined by hand: urlunsplit drops an empty authority's "//" (sqlite:////abs/x.db would lose its root)
    return f"{u.scheme}://{u.netloc.rpartition('@')[2].lower()}{u.path}"


def scrub(text: str) -> str:
    """``text`` with every URL in it passed through :func:`redact_url` (an error line, a library's message)."""

    def one(m: re.Match[str]) -> str:
        found = m.group(0)
        core = found.rstrip(_TRAILING)
        return redact_url(core) + found[len(core) :]

    return _URL_IN_TEXT.sub(one, text)


def url_secrets(url: str) -> list[str]:
    """The secrets ``url`` carries, as they travel and decoded: its user, password and query values (for
    :func:`mask`, over text a server sent back)."""
    text = url.strip()
    try:
        u = urlsplit(text if "://" in text else f"//{text}")  # a bare user:pw@host:port parses as a netloc
    except ValueError:
        return []
    found = [u.username, u.password, *(v for _, v in parse_qsl(u.query, keep_blank_values=True)), u.fragment]
    return [s for v in found if v for s in {v, unquote(v)}]


def mask(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with each of ``secrets`` (values llmbench holds: a password, an API key) replaced by
    ``redacted``, then :func:`scrub`-bed. Secrets under 4 characters are left alone: masking ``a`` would garble
    every word and hide nothing."""
    for s in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(s, REDACTED)
    return scrub(text)


def redact_command(argv: Sequence[str]) -> str:
    """A command line fit to record or print (``shlex.join``): ``VAR=value`` assignments (``env HF_TOKEN=...``)
    become ``VAR=redacted``; the value of an option whose name says secret (``--token X``, ``--api-key=X``,
    ``-H 'Authorization: ...'``) becomes ``redacted``; URLs in the other words go through :func:`redact_url`."""
    out: list[str] = []
    secret_next = False
    for word in argv:
        if secret_next:
            out.append(REDACTED)
            secret_next = False
        elif word.startswith("-") and "=" in word and _secret_option(word.split("=", 1)[0]):
            out.append(word.split("=", 1)[0] + "=" + REDACTED)
        elif _secret_option(word):
            out.append(word)
            secret_next = True
        elif _ASSIGNMENT.match(word):
            out.append(word.split("=", 1)[0] + "=" + REDACTED)
        else:
            out.append(scrub(word))
    return shlex.join(out)


def _secret_option(word: str) -> bool:
    """Whether ``word`` is an option whose value is a secret: ``-H`` (curl's header) or a name with a secret word
    (``--hf-token``, ``--api_key``), unless it names where the secret is (``--api-key-env``, ``--token-file``)."""
    if word == "-H":
        return True
    if not word.startswith("--"):
        return False
    words = re.split(r"[-_]+", word[2:].lower())
    return bool(_SECRET_WORDS.intersection(words)) and words[-1] not in _REFERENCE_WORDS
