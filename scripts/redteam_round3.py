"""Re-run the command-line examples of the third reliability round (issue 34) and say how each ends.

Each case is what a careless or hostile user typed; each must end in a typed refusal (exit 2 with one
``rlsched ...: error`` line naming what was wrong, the fragment below, no traceback) or a correct run,
within a bound. Hangs are cut at ``--timeout`` seconds. The plugin's and the orchestrator's cases (a slow
router, a central policy's KeyboardInterrupt, a misfit parked centrally) run under vLLM-Omni's real
classes in the plugin tier (``make test-vllm``); the loadgen, eval Ctrl-C and PNG cases are main-tier tests.

    python scripts/redteam_round3.py            # a markdown table; exit 1 when any case ends otherwise
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Case:
    name: str
    args: Callable[[Path], list[str]]
    """The command line (after ``rlsched``), given a scratch folder it may prepare."""
    expect: str
    """A fragment of the refusal's message; empty: the run must succeed."""


def _fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "pipe.csv")
    return tmp / "pipe.csv"


def _link(tmp: Path) -> Path:
    (tmp / "target.csv").write_text("keep me\n")
    (tmp / "link.csv").symlink_to(tmp / "target.csv")
    return tmp / "link.csv"


def _scenario(tmp: Path, replicas: str) -> str:
    text = (ROOT / "envs" / "qwen-image-8gpu.yaml").read_text()
    head = text[:text.index("replicas:")] if "replicas:" in text else text
    (tmp / "s.yaml").write_text(head + "replicas:\n" + replicas)
    return str(tmp / "s.yaml")


def _checkpoint(tmp: Path, weights: Callable[[Path], None]) -> str:
    folder = tmp / "ck"
    shutil.copytree(ROOT / "checkpoints" / "default", folder)
    weights(folder / "policy.safetensors")
    return str(folder)


def _huge(path: Path) -> None:
    with path.open("r+b") as fh:  # sparse: 300 MB on paper, nothing on disk
        fh.truncate(300_000_000)


def _rank65(path: Path) -> None:
    raw = json.dumps({"w": {"dtype": "F32", "shape": [1] * 65, "data_offsets": [0, 4]}}).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(4))


def _big_trace(tmp: Path) -> str:
    path = tmp / "big.csv"
    with path.open("wb") as fh:  # sparse past the 1 GiB trace bound
        fh.write(b"arrival_s,model,height,width,steps\n")
        fh.truncate((1 << 30) + 1)
    return str(path)


def _folder_scenario(tmp: Path) -> str:
    (tmp / "x.yaml").mkdir()
    return str(tmp / "x.yaml")


CASES = [
    Case("--records into a named pipe", lambda t: ["simulate", "--duration", "60", "--records", str(_fifo(t))],
         "not a regular file"),
    Case("--records onto a symbolic link", lambda t: ["simulate", "--duration", "60", "--records", str(_link(t))],
         "symbolic link"),
    Case("plan --out on a file, checked before any layout runs",
         lambda t: ["plan", "--scenario", "qwen-image-8gpu", "--out", str(_link(t))], "--out"),
    Case("--replicas past the stage cap", lambda t: ["simulate", "--scenario", "default", "--replicas", "100000"],
         "--replicas"),
    Case("--sp 3 (the schema allows 1, 2, 4, 8)",
         lambda t: ["simulate", "--scenario", "qwen-image-8gpu", "--sp", "3"], "--sp"),
    Case("a replica group of 2,000,000,000 GPUs",
         lambda t: ["simulate", "--scenario", _scenario(t, "  - {count: 2, sp_degree: 2000000000}\n")],
         "sp_degree"),
    Case("count: true", lambda t: ["simulate", "--scenario", _scenario(t, "  - {count: true}\n")], "count"),
    Case("two replica groups with one name",
         lambda t: ["simulate", "--scenario", _scenario(t, "  - {count: 2, name: a}\n  - {count: 2, name: a}\n")],
         "name"),
    Case("many groups past the stage cap",
         lambda t: ["simulate", "--scenario", _scenario(t, "".join(f"  - {{count: 1000, name: g{i}}}\n"
                                                                 for i in range(40)))], "replicas"),
    Case("profile predict --frames 100 on an image model",
         lambda t: ["profile", "predict", "qwen-image-h200", "--height", "512", "--width", "512", "--steps", "20",
                    "--frames", "100"], "frames"),
    Case("a trace past the 1 GiB bound", lambda t: ["simulate", "--trace", _big_trace(t)], "at most 1,073,741,824"),
    Case("drr:1e-6 runs (its idle rounds added in one step: it looped for minutes)",
         lambda t: ["simulate", "--policy", "drr:1e-6"], ""),
    Case("drr:1e-3 runs", lambda t: ["simulate", "--policy", "drr:0.001"], ""),
    Case("a 300 MB weights file", lambda t: ["simulate", "--duration", "60", "--policy",
                                             f"rl:{_checkpoint(t, _huge)}"], "not read"),
    Case("a tensor of 65 dimensions", lambda t: ["simulate", "--duration", "60", "--policy",
                                                 f"rl:{_checkpoint(t, _rank65)}"], "at most 8 integers"),
    Case("deploy --time-scale 1e300", lambda t: ["deploy", "--policy", "edf", "--time-scale", "1e300",
                                                 "--out", str(t / "stage.yaml")], "--time-scale"),
    Case("a scenario that is a folder", lambda t: ["simulate", "--scenario", _folder_scenario(t)], "folder"),
    Case("edf@hindsight:-5 names the teacher",
         lambda t: ["simulate", "--scenario", "qwen-image-8gpu", "--policy", "edf@hindsight:-5"], "hindsight"),
    Case("plan --gpus 1000000 names --gpus", lambda t: ["plan", "--gpus", "1000000"], "--gpus"),
    Case("--replicas 2 --sp 2 on a profile without an sp block",
         lambda t: ["simulate", "--scenario", "video-mix", "--replicas", "2", "--sp", "2"], "wan21-t2v-14b-h100"),
]


def run(case: Case, timeout_s: float) -> tuple[str, float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        args = case.args(Path(tmp))
        t0 = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, "-m", "rlsched", *args], capture_output=True, text=True,
                                  timeout=timeout_s, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
        except subprocess.TimeoutExpired:
            return "HANG", time.monotonic() - t0, f"no end in {timeout_s:.0f} s"
        took = time.monotonic() - t0
    err = proc.stderr.strip()
    last = err.splitlines()[-1] if err else ""
    if "Traceback" in err:
        return "TRACEBACK", took, last
    if not case.expect:
        return ("ok: ran" if proc.returncode == 0 else "WRONG"), took, last or "exit 0"
    if proc.returncode == 2 and case.expect.lower() in err.lower():
        return "ok: refused", took, last
    return "WRONG", took, f"exit {proc.returncode}: {last}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a case may run (default: 120)")
    args = parser.parse_args()
    print("| case | outcome | s | last line |\n|---|---|---|---|")
    bad = 0
    for case in CASES:
        outcome, took, line = run(case, args.timeout)
        bad += not outcome.startswith("ok")
        print(f"| {case.name} | {outcome} | {took:.1f} | {line[:150].replace('|', '/')} |", flush=True)
    print(f"\n{len(CASES) - bad} of {len(CASES)} end as they should")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
