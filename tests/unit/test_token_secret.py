"""admin/token_secret.py: the file of the secret that seals Hub tokens."""

import os
import stat

import pytest

from pulsys.admin.token_secret import open_sealer
from pulsys.errors import ConfigError


def test_made_once_with_mode_0600_and_read_back_the_same(tmp_path):
    path = tmp_path / "dir" / "token-secret"
    assert open_sealer(str(path), create=False) is None
    first = open_sealer(str(path), create=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(path.read_text().strip()) == 64
    sealed = first.seal("0123456789ab", "hf_token")
    assert open_sealer(str(path), create=True).open("0123456789ab", sealed) == "hf_token"


@pytest.mark.parametrize("content,mode,why", [
    ("ab" * 32, 0o644, "chmod 600"), ("ab" * 31, 0o600, "64 hex digits"), ("zz" * 32, 0o600, "64 hex digits"),
])
def test_unusable_files_are_refused_in_one_line(tmp_path, content, mode, why):
    path = tmp_path / "token-secret"
    path.write_text(content)
    os.chmod(path, mode)
    with pytest.raises(ConfigError, match=why) as e:
        open_sealer(str(path), create=True)
    assert "\n" not in str(e.value)


def test_a_directory_is_not_a_secret(tmp_path):
    with pytest.raises(ConfigError, match="not a regular file"):
        open_sealer(str(tmp_path), create=True)
