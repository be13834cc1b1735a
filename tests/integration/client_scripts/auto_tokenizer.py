"""transformers.AutoTokenizer.from_pretrained of a Hub repo, then one encode; prints
{"ids", "class", "seconds"}.

usage: auto_tokenizer.py REPO_ID TEXT
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
    p.add_argument("text")
    a = p.parse_args()
    t0 = time.monotonic()
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(a.repo_id)
    return {"ids": tok(a.text)["input_ids"], "class": type(tok).__name__,
            "seconds": time.monotonic() - t0, "transformers": transformers.__version__}


if __name__ == "__main__":
    _common.run(main)
