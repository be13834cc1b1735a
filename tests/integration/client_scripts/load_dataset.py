"""datasets.load_dataset of a Hub dataset; prints {"rows", "columns", "first", "seconds"}.

usage: load_dataset.py REPO_ID [--split S]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("repo_id")
    p.add_argument("--split", default="train")
    a = p.parse_args()
    t0 = time.monotonic()
    import datasets

    ds = datasets.load_dataset(a.repo_id, split=a.split)
    return {"rows": ds.num_rows, "columns": ds.column_names, "first": ds[0],
            "seconds": time.monotonic() - t0, "datasets": datasets.__version__}


if __name__ == "__main__":
    _common.run(main)
