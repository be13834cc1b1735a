"""auth/sealed.py: Hub tokens sealed with AES-256-GCM, bound to their key id."""

import os

import pytest

from pulsys.auth.sealed import Sealer, Unsealable, check_hub_token

TOKEN = "hf_" + "x" * 34


def test_a_sealed_token_opens_with_its_secret_and_key_id_only():
    secret = os.urandom(32)
    s = Sealer(secret)
    sealed = s.seal("0123456789ab", TOKEN)
    assert sealed.startswith("v1.") and TOKEN not in sealed
    assert s.seal("0123456789ab", TOKEN) != sealed          # a fresh nonce each time
    assert Sealer(secret).open("0123456789ab", sealed) == TOKEN
    with pytest.raises(Unsealable):                          # moved onto another key's row
        s.open("ba9876543210", sealed)
    with pytest.raises(Unsealable):                          # another --token-secret-file
        Sealer(os.urandom(32)).open("0123456789ab", sealed)


@pytest.mark.parametrize("bad", ["", "v0.abc", "v1.", "v1.@@@", "v1." + "A" * 40, None, "v1.é"])
def test_damaged_or_foreign_text_is_unsealable_never_a_crash(bad):
    with pytest.raises(Unsealable):
        Sealer(os.urandom(32)).open("0123456789ab", bad)


def test_a_flipped_bit_is_caught():
    s = Sealer(os.urandom(32))
    sealed = s.seal("0123456789ab", TOKEN)
    i = len(sealed) - 5
    flipped = sealed[:i] + ("A" if sealed[i] != "A" else "B") + sealed[i + 1:]
    with pytest.raises(Unsealable):
        s.open("0123456789ab", flipped)


def test_the_secret_is_32_bytes():
    with pytest.raises(ValueError):
        Sealer(b"short")


@pytest.mark.parametrize("bad", ["", "hf_ x", "hf_\n", "x" * 513, 5, None, "hf_pulsys" + "a" * 55, "pulsys_0123456789ab_x"])
def test_hub_tokens_are_checked(bad):
    with pytest.raises(ValueError):
        check_hub_token(bad)
    assert check_hub_token(TOKEN) == TOKEN
