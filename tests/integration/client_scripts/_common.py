"""Helpers shared by the client scripts (runs inside the client venvs).

Kept free of anything but the standard library and huggingface_hub.
"""

import hashlib
import json
import os
import sys
import traceback


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def emit(obj):
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def client_info():
    import huggingface_hub
    from huggingface_hub import constants

    info = {"huggingface_hub": huggingface_hub.__version__, "endpoint": constants.ENDPOINT}
    try:
        import hf_xet  # noqa: F401

        info["hf_xet"] = True
    except ImportError:
        info["hf_xet"] = False
    try:
        import hf_transfer  # noqa: F401

        info["hf_transfer"] = True
    except ImportError:
        info["hf_transfer"] = False
    info["hf_transfer_enabled"] = bool(getattr(constants, "HF_HUB_ENABLE_HF_TRANSFER", False))
    info["xet_disabled"] = bool(getattr(constants, "HF_HUB_DISABLE_XET", False))
    return info


def run(main):
    """Run ``main()``; on an exception print ``{"error": ClassName, ...}`` and exit 2.

    The error JSON carries the exception's MRO (class names) so tests can
    check e.g. ``EntryNotFoundError`` whatever subclass a client version
    raises, plus the HTTP status / X-Error-Code if the error has a response.
    """
    try:
        out = main()
    except BaseException as e:  # noqa: BLE001 - we report every failure
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        err = {
            "error": type(e).__name__,
            "error_mro": [c.__name__ for c in type(e).__mro__],
            "message": str(e)[:2000],
        }
        resp = getattr(e, "response", None)
        if resp is not None:
            err["status"] = getattr(resp, "status_code", None)
            try:
                err["x_error_code"] = resp.headers.get("X-Error-Code")
            except Exception:  # noqa: BLE001
                pass
        cause = e.__cause__ or e.__context__
        if cause is not None:
            err["cause"] = "%s: %s" % (type(cause).__name__, str(cause)[:1000])
        traceback.print_exc(file=sys.stderr)
        emit(err)
        sys.exit(2)
    out.setdefault("client", client_info())
    emit(out)


def common_args(parser):
    parser.add_argument("--repo-type", default=None)
    parser.add_argument("--revision", default=None)
    parser.add_argument("--token", default=None)
    return parser


def env_flag(name):
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
