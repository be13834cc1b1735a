#!/usr/bin/env bash
# Build the `liburing` 2026.3.30 binding (YoSTEALTH/Liburing, Zig + PyOZ) from pinned sources
# as a wheel for a portable x86-64 CPU level, for machines whose CPU lacks AVX-512.
#
# Why: the PyPI wheel liburing-2026.3.30 dies of SIGILL on CPUs without AVX-512 (seen on an
# AMD EPYC Zen 3: `vmovups %zmm0` zero-fills the struct in Ring.__new__; docs/internals.md).
# `pyoz build` runs `zig build -Doptimize=...` with no -Dtarget/-Dcpu, so Zig compiled that
# wheel for its build host's own CPU. This script runs the same build through a `zig` wrapper
# that adds -Dcpu=$ZIG_CPU (default x86_64_v2: SSE4.2/POPCNT, no AVX) and checks the result
# has no AVX-512 instruction. Same sources, same API; only the instruction set differs.
#
#   bash scripts/build_liburing.sh [OUT_DIR]     # default ~/.cache/pulsys-bench/liburing
#   -> OUT_DIR/dist/liburing-2026.3.30-cp38-abi3-manylinux_2_17_x86_64.whl
#
# Then, for example: PULSYS_BENCH_LIBURING_WHEEL=<that wheel> bash scripts/bench_compare.sh ...
# (docs/benchmarks.md, "On a CPU without AVX-512").
#
# Sources (each a git URL or a local clone/mirror; defaults need network access to GitHub):
#   LIBURING_GIT   YoSTEALTH/Liburing    (default https://github.com/YoSTEALTH/Liburing.git)
#   CLIBURING_GIT  axboe/liburing, its lib/liburing submodule (default https://github.com/axboe/liburing.git)
#   PYOZ_GIT       PyOZ, the Zig package build.zig.zon names (default https://github.com/pyozig/PyOZ.git;
#                  any fork holding the pinned commit will do: the package hash is verified)
# Other settings: ZIG_CPU (default x86_64_v2), PULSYS_PYTHON (default python3, for the build venv).
# Needs git, tar, objdump (binutils), make and a C compiler (liburing's ./configure && make),
# and PyPI for the build tools: ziglang==0.15.2 (upstream CI's Zig) and pyoz==0.12.2.
set -euo pipefail

OUT=${1:-${PULSYS_BENCH_HOME:-$HOME/.cache/pulsys-bench}/liburing}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
ZIG_CPU=${ZIG_CPU:-x86_64_v2}
PY=${PULSYS_PYTHON:-python3}
LIBURING_GIT=${LIBURING_GIT:-https://github.com/YoSTEALTH/Liburing.git}
CLIBURING_GIT=${CLIBURING_GIT:-https://github.com/axboe/liburing.git}
PYOZ_GIT=${PYOZ_GIT:-https://github.com/pyozig/PyOZ.git}
# Pinned inputs: the tag 2026.3.30, the submodule commit that tag records, and PyOZ v0.12.2
# with the package hash build.zig.zon of that tag requires.
LIBURING_REF=a8d074e0bed813591cdd02ed251db2385732f1df
CLIBURING_REF=20b3fe67df9bb76badb00a1cb3b35556fd2899d9
PYOZ_REF=2236a2a33e083c15b6e6e50a86eef17427da9081
PYOZ_HASH=PyOZ-0.12.2-ntlpPuP8FwB3i629dScseeVY-p6-F4DV3nL9awKke0S1
W="$OUT/build"
say() { echo "build_liburing: $*" >&2; }
mkdir -p "$W"

# 1. build tools in a venv of their own
[ -x "$W/bvenv/bin/python" ] || "$PY" -m venv "$W/bvenv"
"$W/bvenv/bin/pip" install -q 'ziglang==0.15.2' 'pyoz==0.12.2'

# 2. a `zig` first on PATH that pins the CPU model for `zig build`
mkdir -p "$W/bin"
cat > "$W/bin/zig" <<EOF
#!/bin/sh
if [ "\$1" = build ]; then shift; exec "$W/bvenv/bin/python" -m ziglang build -Dcpu=$ZIG_CPU "\$@"; fi
exec "$W/bvenv/bin/python" -m ziglang "\$@"
EOF
chmod +x "$W/bin/zig"
export PATH="$W/bin:$PATH" ZIG_GLOBAL_CACHE_DIR="$W/zig-global-cache" ZIG_LOCAL_CACHE_DIR="$W/zig-local-cache"

# 3. sources at their pinned commits (bare clones, kept for the next build)
fetch() {   # fetch NAME URL COMMIT: a bare clone at $W/git/NAME that holds COMMIT
    local git="$W/git/$1"
    [ -d "$git" ] || { say "cloning $2"; git clone -q --bare "$2" "$git"; }
    git --git-dir="$git" cat-file -e "$3^{commit}" 2>/dev/null \
        || { say "$2 lacks commit $3"; exit 1; }
}
fetch Liburing "$LIBURING_GIT" "$LIBURING_REF"
fetch cliburing "$CLIBURING_GIT" "$CLIBURING_REF"
fetch PyOZ "$PYOZ_GIT" "$PYOZ_REF"
rm -rf "$W/src" && mkdir -p "$W/src/Liburing/lib/liburing" "$W/src/pyoz"
git --git-dir="$W/git/Liburing" archive "$LIBURING_REF" | tar -x -C "$W/src/Liburing"
git --git-dir="$W/git/cliburing" archive "$CLIBURING_REF" | tar -x -C "$W/src/Liburing/lib/liburing"

# 4. PyOZ into Zig's package cache from the pinned commit (zig fetch checks the hash the
#    build needs, so a fork or mirror cannot change what is built)
git --git-dir="$W/git/PyOZ" archive --prefix=PyOZ-0.12.2/ "$PYOZ_REF" | tar -x -C "$W/src/pyoz"
tar -C "$W/src/pyoz" -czf "$W/src/pyoz-0.12.2.tar.gz" PyOZ-0.12.2
got=$(zig fetch "$W/src/pyoz-0.12.2.tar.gz")
[ "$got" = "$PYOZ_HASH" ] || { say "PyOZ package hash mismatch: $got != $PYOZ_HASH"; exit 1; }

# 5. the wheel (release = ReleaseSafe per the project's [tool.pyoz])
(cd "$W/src/Liburing" && "$W/bvenv/bin/python" -m pyoz build --release)
so=$(find "$W/src/Liburing/zig-out" -name 'liburing*.so' | head -1)
n=$(objdump -d --no-show-raw-insn "$so" | grep -cE '%zmm|%k[0-7]' || true)
[ "$n" = 0 ] || { say "$n AVX-512 instructions in $so"; exit 1; }
mkdir -p "$OUT/dist"
cp "$W/src/Liburing/dist/"liburing-2026.3.30-*.whl "$OUT/dist/"

# 6. it must set up a ring in a fresh venv
rm -rf "$W/tvenv" && "$PY" -m venv "$W/tvenv"
"$W/tvenv/bin/pip" install -q --no-deps "$OUT/dist/"liburing-2026.3.30-*.whl
"$W/tvenv/bin/python" -c 'import liburing as L; r = L.Ring(); L.io_uring_queue_init(8, r, 0); L.io_uring_queue_exit(r)'
say "built (-Dcpu=$ZIG_CPU, no AVX-512 instruction, a ring set up):"
ls "$OUT/dist/"liburing-2026.3.30-*.whl
