"""get_hf_file_metadata for one file; prints the parsed metadata.

usage: file_metadata.py REPO_ID FILENAME [--repo-type T] [--revision R] [--token TOK]
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
    a = p.parse_args()

    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(a.repo_id, a.filename, repo_type=a.repo_type, revision=a.revision)
    md = get_hf_file_metadata(url, token=a.token)
    xet = getattr(md, "xet_file_data", None)
    return {
        "url": url,
        "commit_hash": md.commit_hash,
        "etag": md.etag,
        "location": md.location,
        "size": md.size,
        "xet_hash": getattr(xet, "file_hash", None) if xet is not None else None,
        "xet_refresh_route": getattr(xet, "refresh_route", None) if xet is not None else None,
    }


if __name__ == "__main__":
    _common.run(main)
