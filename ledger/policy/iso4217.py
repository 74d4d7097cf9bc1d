"""ISO 4217 currency codes and their minor-unit exponents: how many decimal places a major
amount may have, and what to multiply it by for integer minor units ("12.50" EUR is 1250).

The active codes of ISO 4217 list one as published on 2026-01-01 (the maintenance agency's
list: BGN withdrawn when Bulgaria joined the euro, ANG replaced by XCG, XAD added). Codes
whose minor unit the list gives as "N.A." (precious metals, bond-market units, SDR, test and
"no currency" codes) are listed with None: an amount in them has no minor units to compare.

`ledger.rules.limits.EXPONENTS` (the non-2 exponents that limits use) is read from this
table, and
the claim trigger's SQL copy of it (migration 0021) is compared with it by
tests/test_limits_trigger.py.
"""

from __future__ import annotations

from decimal import Decimal

# Two decimal places, the common case.
_TWO = """
    AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BMD BND BOB BOV BRL BSD BTN BWP BYN BZD
    CAD CDF CHE CHF CHW CNY COP COU CRC CUP CVE CZK DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP
    GEL GHS GIP GMD GTQ GYD HKD HNL HTG HUF IDR ILS INR IRR JMD KES KGS KHR KPW KYD KZT LAK
    LBP LKR LRD LSL MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO
    NOK NPR NZD PAB PEN PGK PHP PKR PLN QAR RON RSD RUB SAR SBD SCR SDG SEK SGD SHP SLE SOS
    SRD SSP STN SVC SYP SZL THB TJS TMT TOP TRY TTD TWD TZS UAH USD USN UYU UZS VED VES WST
    XAD XCD XCG YER ZAR ZMW ZWG
"""
_OTHER = {
    # No minor unit.
    "BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0, "PYG": 0,
    "RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
    # Three places.
    "BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
    # Four places: Chile's Unidad de Fomento, Uruguay's Unidad Previsional.
    "CLF": 4, "UYW": 4,
}  # fmt: skip
# "N.A.": units of account, metals, test and "no currency" codes.
_NO_MINOR_UNIT = "XAG XAU XBA XBB XBC XBD XDR XPD XPT XSU XTS XUA XXX"

EXPONENTS: dict[str, int | None] = {
    **dict.fromkeys(_TWO.split(), 2),
    **_OTHER,
    **dict.fromkeys(_NO_MINOR_UNIT.split()),
}


def exponent(code: str) -> int:
    """The minor-unit exponent of an active currency; `ValueError` naming the code for one that
    is not active, or that has no minor unit."""
    if code not in EXPONENTS:
        raise ValueError(f"{code!r} is not an active ISO 4217 currency code")
    places = EXPONENTS[code]
    if places is None:
        raise ValueError(f"{code!r} has no minor unit (ISO 4217 gives N.A.)")
    return places


def major_units(amount_minor: int, currency: str) -> str:
    """An integer amount in minor units as people read it: 1250 EUR is "12.50 EUR", 1250 JPY
    "1250 JPY"; a code with no minor unit (or none known) is shown as the integer."""
    places = EXPONENTS.get(currency) or 0
    return f"{Decimal(amount_minor).scaleb(-places):.{places}f} {currency}"
