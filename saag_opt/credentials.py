"""What counts as a credential in a URL, and the URL with them masked: one rule for every URL we keep.

Why: a model server's URL is written into run.json, cache namespaces and messages, a ``--storage``
URL into run.json and error lines; a secret must reach none of them. Credentials are the password
of ``user:password@host`` and the value of a query parameter named like a secret (``api-key``,
``key``, ``token``, ``access_token``, ``password``, ``sig``, ...; any case, ``-`` or ``_``). A
user name alone is not one.

Bottom layer: stdlib only.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

SECRET_PARAM_WORDS = ("key", "token", "secret", "password", "passwd", "pwd", "auth", "authorization",
                      "signature", "sig", "credential", "credentials")
"""A query parameter is a secret when its name, folded (lower case, no ``-``/``_``), is or ends with one."""

MASK = "***"


def is_secret_param(name: str) -> bool:
    """Whether a query parameter called ``name`` carries a secret (``api-key``, ``Access_Token``, ...)."""
    folded = unquote(name).lower().replace("-", "").replace("_", "")
    return any(folded == word or folded.endswith(word) for word in SECRET_PARAM_WORDS)


def _query_pairs(query: str) -> list[tuple[str, str, str]]:
    """``(pair, name, value)`` for each ``name=value`` of a raw query string, as written."""
    return [(pair, *pair.partition("=")[::2]) for pair in query.split("&") if pair]


def url_secrets(url: str) -> list[str]:
    """The credential values in ``url`` as written in it (empty: none)."""
    try:
        parts = urlsplit(url.strip())
        password = parts.password
    except ValueError:  # not a URL (a bad port, say): nothing structured to find
        return []
    found = [password] if password else []
    return found + [value for _, name, value in _query_pairs(parts.query) if value and is_secret_param(name)]


def redacted_url(url: str) -> str:
    """``url`` with each credential replaced by ``***`` (the user name, host and other parameters kept).

    A URL without credentials comes back exactly as given.
    """
    if not url_secrets(url):
        return url
    parts = urlsplit(url.strip())
    password = parts.password
    netloc = parts.netloc
    if password:
        user, host = netloc.rsplit("@", 1)
        netloc = f"{user.split(':', 1)[0]}:{MASK}@{host}"
    query = "&".join(f"{name}={MASK}" if value and is_secret_param(name) else pair
                     for pair, name, value in _query_pairs(parts.query))
    return parts._replace(netloc=netloc, query=query).geturl()


def mask_url_secrets(text: str, url: str) -> str:
    """``text`` (a message that may quote ``url``, or a part of it) with every credential of ``url`` masked."""
    text = text.replace(url, redacted_url(url))
    for secret in sorted(url_secrets(url), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


__all__ = ["MASK", "SECRET_PARAM_WORDS", "is_secret_param", "mask_url_secrets", "redacted_url", "url_secrets"]
