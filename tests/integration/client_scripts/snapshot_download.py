"""snapshot_download of a repo; prints {"path", "files": {relpath: sha256}, "client"}.

usage: snapshot_download.py REPO_ID [--repo-type T] [--revision R] [--token TOK]
                            [--allow-patterns P ...]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402


def main():
    p = _common.common_args(argparse.ArgumentParser())
    p.add_argument("repo_id")
    p.add_argument("--allow-patterns", nargs="*", default=None)
    a = p.parse_args()

    from huggingface_hub import snapshot_download

    kwargs = dict(repo_id=a.repo_id, repo_type=a.repo_type, revision=a.revision)
    if a.token:
        kwargs["token"] = a.token
    if a.allow_patterns:
        kwargs["allow_patterns"] = a.allow_patterns
    root = snapshot_download(**kwargs)
    files = {}
    for dirpath, _dirs, filenames in os.walk(root, followlinks=True):
        for fn in filenames:
            full = os.path.join(dirpath, fn)
            files[os.path.relpath(full, root)] = _common.sha256_file(full)
    return {"path": root, "files": files}


if __name__ == "__main__":
    _common.run(main)
