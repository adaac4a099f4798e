"""Whether a serving certificate may be served now: every certificate of its chain inside its
validity dates.

A TLS library loads an expired or not-yet-valid certificate without a word, and every client then
refuses the handshake. So the adapter refuses one at start and in ``--check-config`` (the setting,
the file, the certificate's subject and both dates named), and on reload keeps serving the pair it
has (``filewatch.py`` logs the reason). A certificate that is not valid yet raises ``NotYetValid``:
cert-manager issues certificates valid from the second they are made, so a clock a little behind
sees a fresh one early; the watcher then reads it again at its next poll instead of waiting for the
files to change once more.
"""

from __future__ import annotations

import datetime

from cryptography import x509


class NotYetValid(ValueError):
    """The certificate becomes valid later; reading the same files again later may succeed."""


def _stamp(at: datetime.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def check_dates(what: str, chain: list[x509.Certificate], now: datetime.datetime | None = None) -> None:
    """ValueError (``NotYetValid`` for a certificate valid later) naming ``what`` (the setting and
    the file) and the first certificate of ``chain`` outside its validity at ``now``."""
    now = now or datetime.datetime.now(datetime.UTC)
    for position, cert in enumerate(chain):
        before, after = cert.not_valid_before_utc, cert.not_valid_after_utc
        which = "the certificate" if position == 0 else f"certificate {position + 1} of the chain"
        dates = (
            f"(subject {cert.subject.rfc4514_string() or 'empty'}, "
            f"notBefore {_stamp(before)}, notAfter {_stamp(after)})"
        )
        if now > after:
            raise ValueError(f"{what}: {which} has expired {dates}")
        if now < before:
            raise NotYetValid(f"{what}: {which} is not valid yet {dates}")


def check_pem_dates(what: str, pem: bytes, now: datetime.datetime | None = None) -> None:
    """``check_dates`` on a PEM chain; ValueError when it holds no PEM certificate."""
    try:
        chain = x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise ValueError(f"{what}: no PEM certificate in it") from None
    check_dates(what, chain, now)
