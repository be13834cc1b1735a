#!/usr/bin/env python3
"""Run the fake Hugging Face Hub (pulsys.testing.fake_hub) with demo content until SIGINT/SIGTERM.

Content is deterministic, so etags and commit shas repeat from run to run:
  model   demo/tiny-model    config.json, tokenizer.json, README.md, model.safetensors (--lfs-mib MiB, LFS)
  dataset demo/tiny-dataset  README.md, data/train.parquet (LFS)

Prints the Hub and CDN URLs, the HF_ENDPOINT line for talking to the fake
directly, and the flags pulsys needs to use it as its upstream (the CDN is a
different origin that pulsys must be allowed to follow redirects to).

    python scripts/run_fake_hub.py --port 9000 --lfs-mib 64
"""

import argparse
import json
import random
import signal
import struct
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulsys.testing.fake_hub import FakeHub  # noqa: E402

MIB = 1024 * 1024


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, "%s: error: %s\n" % (self.prog, message))


def _port(text):
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("port must be 0..65535, got %s" % text)
    return value


def _mib(text):
    value = float(text)
    if not 0 < value <= 4096:
        raise argparse.ArgumentTypeError("--lfs-mib must be > 0 and <= 4096, got %s" % text)
    return value


def parse_args(argv):
    p = _OneLineParser(prog="run_fake_hub.py", description="Run a fake Hugging Face Hub on loopback.")
    p.add_argument("--host", default="127.0.0.1", help="Hub origin address (loopback only)")
    p.add_argument("--cdn-host", default="127.0.0.2", help="CDN origin address (loopback only)")
    p.add_argument("--port", type=_port, default=0, help="Hub port (0 = any free port)")
    p.add_argument("--cdn-port", type=_port, default=0, help="CDN port (0 = any free port)")
    p.add_argument("--no-xet", action="store_true", help="serve no Xet signals (plain HTTP downloads)")
    p.add_argument("--lfs-mib", type=_mib, default=8, help="size of model.safetensors in MiB (default 8)")
    return p.parse_args(argv)


def demo_bytes(seed, nbytes):
    """Deterministic pseudo-random bytes (randbytes caps one call below 256 MiB)."""
    rng, step = random.Random(seed), 16 * MIB
    return b"".join(rng.randbytes(min(step, nbytes - i)) for i in range(0, nbytes, step))


def demo_safetensors(nbytes):
    """A valid safetensors file: one U8 tensor of deterministic bytes."""
    header = json.dumps({"__metadata__": {"format": "pt"},
                         "weight": {"dtype": "U8", "shape": [nbytes], "data_offsets": [0, nbytes]}}).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + demo_bytes(1, nbytes)


def add_demo_content(hub, lfs_mib):
    tokenizer = {"version": "1.0", "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "hello": 1, "world": 2},
                                             "unk_token": "[UNK]"}}
    model_sha = hub.add_repo("demo/tiny-model", files={
        "config.json": json.dumps({"model_type": "demo", "hidden_size": 8}, indent=2).encode(),
        "tokenizer.json": json.dumps(tokenizer, indent=2).encode(),
        "README.md": b"# tiny-model\n\nDeterministic demo model served by pulsys's fake hub.\n",
        "model.safetensors": demo_safetensors(int(lfs_mib * MIB)),
    })
    dataset_sha = hub.add_repo("demo/tiny-dataset", repo_type="dataset", files={
        "README.md": b"# tiny-dataset\n\nDeterministic demo dataset served by pulsys's fake hub.\n",
        "data/train.parquet": b"PAR1" + demo_bytes(2, MIB) + b"PAR1",
    })
    return model_sha, dataset_sha


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        hub = FakeHub(host=args.host, cdn_host=args.cdn_host, port=args.port, cdn_port=args.cdn_port,
                      xet=not args.no_xet)
    except ValueError as exc:
        print("run_fake_hub.py: error: %s" % exc, file=sys.stderr)
        return 2
    model_sha, dataset_sha = add_demo_content(hub, args.lfs_mib)
    try:
        hub.start()
    except OSError as exc:
        print("run_fake_hub.py: error: cannot listen: %s" % exc, file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print("hub url:  %s" % hub.url)
    print("cdn url:  %s" % hub.cdn_url)
    print("model   demo/tiny-model    main=%s" % model_sha)
    print("dataset demo/tiny-dataset  main=%s" % dataset_sha)
    print("# talk to the fake directly:")
    print("export HF_ENDPOINT=%s" % hub.url)
    print("# run pulsys in front of it:")
    print("--upstream %s --allow-upstream-host %s" % (hub.url, hub.cdn_netloc), flush=True)
    print("# a line follows whenever file bodies are sent (a warm pulsys causes none)", flush=True)
    last = (0, 0)
    try:
        while not stop.wait(0.5):
            now = (hub.count(), hub.total_body_bytes())
            if now != last:
                print("requests so far: %d   file body bytes sent so far: %d" % now, flush=True)
                last = now
    finally:
        hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
