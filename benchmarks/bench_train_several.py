"""Several schemes in one ``gradcode train``: wall time against one scheme's run.

``gradcode train --scheme crc,frc,uncoded,ignore --rounds 40`` trains the four schemes in turn on
the same data, seed and delays. The target: its wall time at most 1.5 x (one scheme's run + the
other schemes' training time), i.e. what starting Ray and the workers costs is paid once, not once
a scheme. Each command runs as a fresh process (``python -m gradcode.cli``), so Python's and Ray's
start-up are counted as a user pays them; the training time of a scheme is the wall time its
rounds took (the sum of ``round_times`` in the run's ``result.json``).

Run: ``python benchmarks/bench_train_several.py [--repeats R] [--against REV]``. With ``--against
REV`` the same commands also run on the code of git revision ``REV`` (checked out in a temporary
worktree and put first on ``PYTHONPATH``), alternating with the working tree's, so both are timed
side by side on the same machine load. Prints one line per version: medians of the single run,
of the four-scheme run, the training time of the three schemes after the first, and the ratio
``several / (single + others' training)``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCHEMES = "crc,frc,uncoded,ignore"
ROUNDS = 40


def _run(scheme: str, run_dir: Path, src: str | None) -> float:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gradcode.cli", "train", "--scheme", scheme, "--rounds", str(ROUNDS),
                    "--run-dir", str(run_dir), "--json"], check=True, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def _training_time(run_dir: Path) -> float:
    return float(sum(json.loads((run_dir / "result.json").read_text())["round_times"]))


def measure(src: str | None, tmp: Path, tag: str, i: int) -> dict:
    one = _run("crc", tmp / f"{tag}-one-{i}", src)
    several = _run(SCHEMES, tmp / f"{tag}-four-{i}", src)
    others = sum(_training_time(tmp / f"{tag}-four-{i}" / s) for s in SCHEMES.split(",")[1:])
    return {"single": one, "several": several, "others": others}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--against", default=None, help="a git revision to time side by side")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-several-"))
    versions = {"now": None}
    worktree = None
    if args.against:
        worktree = tmp / "against"
        subprocess.run(["git", "worktree", "add", "--detach", str(worktree), args.against], check=True,
                       capture_output=True)
        versions[args.against] = str(worktree / "src")
    try:
        runs = {k: [] for k in versions}
        for i in range(args.repeats):
            for tag, src in versions.items():
                runs[tag].append(measure(src, tmp, tag.replace("/", "_"), i))
    finally:
        if worktree is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"gradcode train --scheme {SCHEMES} --rounds {ROUNDS} against --scheme crc; medians of {args.repeats}"
          " (seconds)")
    print(f"{'version':>10s} {'single':>8s} {'several':>8s} {'others':>8s} {'ratio':>6s}")
    for tag, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("single", "several", "others")}
        ratio = statistics.median(r["several"] / (r["single"] + r["others"]) for r in rs)
        print(f"{tag:>10s} {med['single']:8.2f} {med['several']:8.2f} {med['others']:8.2f} {ratio:6.2f}")


if __name__ == "__main__":
    main()
