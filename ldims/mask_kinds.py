"""The kinds of personal data and secrets the proxy masks, named below the settings that
choose among them (``LDIMS_MCP_PROXY_MASK``): :mod:`ldims.proxy.masking` finds them."""

from __future__ import annotations

__all__ = ["MASK_KINDS"]

# Most specific first: this order breaks ties between two detections of the same span.
MASK_KINDS: tuple[str, ...] = (
    "private_key",
    "jwt",
    "api_key",
    "token",
    "password",
    "cn_resident_id",  # a RIC's check digit and date say more than a card's Luhn digit
    "iban",
    "card",
    "ru_snils",
    "ru_passport",
    "ru_inn",
    "email",
    "phone",
)
