import os
import subprocess
import sys

import pytest

from pulsys.config import build_config, usable_cpus
from pulsys.errors import ConfigError


def test_defaults():
    c = build_config({}, {"HOME": "/home/u"})
    assert c.listen == ("127.0.0.1", 8080)
    assert c.upstream == "https://huggingface.co"
    assert c.cache_dir == "/home/u/.cache/pulsys"
    assert c.auth == "required" and c.revision_ttl == 60.0 and not c.offline
    assert c.db == "sqlite:///home/u/.cache/pulsys/pulsys.sqlite3"


def test_every_flag_has_an_env_var():
    env = {"PULSYS_LISTEN": "0.0.0.0:9000", "PULSYS_UPSTREAM": "http://127.0.0.1:1/",
           "PULSYS_CACHE_DIR": "/tmp/x", "PULSYS_HF_TOKEN": "hf_abc",
           "PULSYS_ALLOW_UPSTREAM_HOST": "a.example:81, b.example", "PULSYS_PUBLIC_BASE_URL": "http://p:1",
           "PULSYS_ADMIN_LISTEN": "off", "PULSYS_LOG_FORMAT": "json", "PULSYS_REVISION_TTL": "5",
           "PULSYS_OFFLINE": "1", "PULSYS_ACCESS_LOG": "off", "PULSYS_LISTENERS": "2"}
    c = build_config({}, env)
    assert c.listen == ("0.0.0.0", 9000) and c.upstream == "http://127.0.0.1:1"
    assert c.hf_token == "hf_abc" and c.allow_upstream_host == ("a.example:81", "b.example")
    assert c.admin_listen is None and c.log_format == "json" and c.revision_ttl == 5.0
    assert c.offline and not c.access_log and c.listeners == 2
    assert "a.example:81" in c.allowed_redirect_hosts() and "cdn-lfs.hf.co" in c.allowed_redirect_hosts()


def test_flags_override_env():
    c = build_config({"listen": "127.0.0.1:1"}, {"PULSYS_LISTEN": "127.0.0.1:2"})
    assert c.listen == ("127.0.0.1", 1)


@pytest.mark.parametrize("values", [
    {"listen": "nohostport"}, {"listen": "127.0.0.1:99999"}, {"upstream": "ftp://x"},
    {"upstream": "notaurl"}, {"revision_ttl": "-1"}, {"revision_ttl": "soon"},
    {"log_format": "xml"}, {"auth": "maybe"}, {"listeners": "0"}, {"db": "mysql://u@h/x"},
    {"db": "postgres:nohost"}, {"db": "sqlite:"},
    {"allow_upstream_host": ["http://x/y"]}, {"offline": "perhaps"},
    {"upstream_auth": "user"}, {"upstream_auth": "client", "auth": "off", "access_ttl": "-1"},
])
def test_bad_values_raise_config_error(values):
    with pytest.raises(ConfigError):
        build_config(values, {})


@pytest.mark.parametrize("args", [["--listen", "x"], ["--bogus"], ["--auth", "sometimes"],
                                  ["--db", "mysql://u:secret@h/x"],
                                  ["--revision-ttl", "abc"], ["--access-ttl", "-3"]])
def test_cli_bad_input_is_one_line_and_exit_2(args):
    p = subprocess.run([sys.executable, "-m", "pulsys"] + args, capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pulsys: error:"), p.stderr
    assert "Traceback" not in p.stderr


def test_cli_bad_env_is_one_line_and_exit_2():
    import os
    env = dict(os.environ, PULSYS_LISTENERS="many")
    p = subprocess.run([sys.executable, "-m", "pulsys"], capture_output=True, text=True, timeout=30, env=env)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--listeners" in p.stderr


def test_cli_help_lists_env_vars():
    p = subprocess.run([sys.executable, "-m", "pulsys", "--help"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "PULSYS_CACHE_DIR" in p.stdout and "--allow-upstream-host" in p.stdout


def test_connection_limits_and_timeouts_are_settings_with_env_vars():
    c = build_config({}, {})
    assert (c.max_connections, c.max_connections_per_ip) == (10000, 1000)
    assert (c.header_timeout, c.idle_timeout, c.send_timeout) == (30.0, 75.0, 60.0)
    env = {"PULSYS_MAX_CONNECTIONS_PER_IP": "0", "PULSYS_HEADER_TIMEOUT": "5",
           "PULSYS_IDLE_TIMEOUT": "2.5", "PULSYS_SEND_TIMEOUT": "9"}
    c = build_config({"max_connections": "50"}, env)
    assert c.reactor_limits() == {"max_connections": 50, "max_per_ip": 0, "header_timeout": 5.0,
                                  "idle_timeout": 2.5, "send_timeout": 9.0}


@pytest.mark.parametrize("values", [
    {"header_timeout": "0"}, {"idle_timeout": "-1"}, {"send_timeout": "soon"},
    {"max_connections_per_ip": "-1"}, {"max_connections_per_ip": "many"}, {"max_connections": "0"},
])
def test_bad_limits_raise_config_error(values):
    with pytest.raises(ConfigError):
        build_config(values, {})


def test_upstream_auth_client_with_either_auth_and_the_token_secret_file(tmp_path):
    c = build_config({"upstream_auth": "client", "auth": "off", "access_ttl": "5"}, {})
    assert c.upstream_auth == "client" and c.access_ttl == 5.0
    c = build_config({"upstream_auth": "client", "cache_dir": str(tmp_path)}, {})
    assert c.auth == "required" and c.token_secret_file == str(tmp_path / "token-secret")
    c = build_config({"cache_dir": str(tmp_path)}, {"PULSYS_TOKEN_SECRET_FILE": "/etc/pulsys/secret"})
    assert c.token_secret_file == "/etc/pulsys/secret"
    assert build_config({}, {}).upstream_auth == "service"


def test_default_listeners_are_the_cpus_this_process_may_use():
    n = usable_cpus()
    assert 1 <= n <= len(os.sched_getaffinity(0))
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
    except OSError:
        quota = "max"
    if quota != "max":
        assert n <= -(-int(quota) // int(period))


def test_node_ids_as_long_as_kubernetes_node_names():
    assert build_config({"node_id": "n" * 253}, {}).node_id == "n" * 253
    with pytest.raises(ConfigError):
        build_config({"node_id": "n" * 254}, {})


def test_hf_token_from_a_file(tmp_path):
    f = tmp_path / "token"
    f.write_text("hf_abc123\n")
    assert build_config({"hf_token_file": str(f)}, {}).hf_token == "hf_abc123"
    assert build_config({}, {"PULSYS_HF_TOKEN_FILE": str(f)}).hf_token == "hf_abc123"
    for bad, why in ((tmp_path / "absent", "No such file"), (tmp_path / "empty", "no token")):
        if why == "no token":
            bad.write_text("\n")
        with pytest.raises(ConfigError, match=why):
            build_config({"hf_token_file": str(bad)}, {})
    with pytest.raises(ConfigError, match="both"):
        build_config({"hf_token_file": str(f), "hf_token": "hf_x"}, {})
