"""hf_hub_download of one file; prints {"path", "sha256", "size", "client"}.

usage: hf_hub_download.py REPO_ID FILENAME [--repo-type T] [--revision R]
                          [--token TOK] [--require-hf-transfer] [--local-dir D]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402


def main():
    p = _common.common_args(argparse.ArgumentParser())
    p.add_argument("repo_id")
    p.add_argument("filename")
    p.add_argument("--require-hf-transfer", action="store_true")
    p.add_argument("--local-dir", default=None)
    a = p.parse_args()

    if a.require_hf_transfer:
        info = _common.client_info()
        if not (info["hf_transfer"] and info["hf_transfer_enabled"]):
            raise RuntimeError("hf_transfer is required but not active: %r" % (info,))

    from huggingface_hub import hf_hub_download

    kwargs = dict(repo_id=a.repo_id, filename=a.filename, repo_type=a.repo_type, revision=a.revision)
    if a.token:
        kwargs["token"] = a.token
    if a.local_dir:
        kwargs["local_dir"] = a.local_dir
    path = hf_hub_download(**kwargs)
    return {
        "path": path,
        "realpath": os.path.realpath(path),
        "sha256": _common.sha256_file(path),
        "size": os.path.getsize(path),
    }


if __name__ == "__main__":
    _common.run(main)
