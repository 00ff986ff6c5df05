"""The quantization ladder's tables for docs/quantize.md, measured on this machine.

Runs `tandem quantize --ladder --all` (every rung judged, no bisection, so the
whole size-against-flips curve shows) with `--imatrix auto` on:
  - the SmolLM2 decider, from an F16 reference made by requantizing the pinned
    Q4_1 fixture (the F16 file holds exactly those weights);
  - the Gemma-3 decider, whose only pinned file is a Q4_K_M-class one (its
    large embedding at Q8_0), requantized with --allow-requantize: its rungs
    are measured against that file;
both on the shipped 60-case set, half of it (seeded) shaping the importance
matrix and half judged; and `--plan-only` for Kev-9B beside Laya on 6 GiB,
on the full-size shape fixtures (the memory side of the seed case). Each
table goes into its own section of --out (bench/mdsection.py), with the
command that made it; the HTML reports go beside it.

    build/venv/bin/python bench/ladder_bench.py --tandem build/tandem --out docs/quantize.md
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mdsection import replace_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "eval" / "decisions.jsonl"
CACHE = Path(os.environ.get("TANDEM_CACHE", Path(os.environ.get("XDG_CACHE_HOME",
                                                                 Path.home() / ".cache")) / "tandem"))
FIXTURES = CACHE / "fixtures"
GATE = "0.25"


def run(cmd):
    print("$", " ".join(map(str, cmd)), file=sys.stderr, flush=True)
    p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True)
    if p.returncode not in (0, 1) or not p.stdout.strip():
        sys.exit(f"failed ({p.returncode}): {p.stderr[-3000:]}")
    return p


def pct(x):
    return "–" if x is None else f"{100 * x:.0f}%"


def num(x, fmt):
    return "–" if x is None else format(x, fmt)


def table(s):
    rows = ["| type | imatrix | MiB | bits/weight | planned MiB | sure flips | 95% interval "
            "| all flips | KL mean | max \\|Δp\\| | Δ accuracy | s | verdict |",
            "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|"]
    for r in s["rungs"]:
        sure = "–" if r["sure_flips"] is None else f"{r['sure_flips']}/{r['sure_compared']}"
        allf = "–" if r["flips"] is None else f"{r['flips']}/{r['compared']}"
        ci = "–" if r["sure_ci95"] is None else f"{pct(r['sure_ci95'][0])}–{pct(r['sure_ci95'][1])}"
        dacc = "–" if r["delta_accuracy"] is None else f"{100 * r['delta_accuracy']:+.1f} pt"
        rows.append(f"| {r['type']} | {'yes' if r['imatrix'] else 'no'} | {r['mib']:.1f} "
                    f"| {r['bpw']:.2f} | {r['vram_alone'] / 2**20:.0f} | {sure} | {ci} | {allf} "
                    f"| {num(r['kl_mean'], '.4f')} | {num(r['max_dp'], '.3f')} | {dacc} "
                    f"| {num(r['seconds'], '.0f')} | {r['status']} |")
    return "\n".join(rows)


def ladder_section(tandem, name, src, work, out, *extra):
    report = out.parent / f"ladder-{name}.html"
    cmd = [tandem, "quantize", src, "--ladder", "--all", "--data", DATA, "--imatrix", "auto",
           "--max-flip-rate", GATE, "--vram", "6GiB", "--out-dir", work / name, "--json",
           "--report", report, *extra]
    shutil.rmtree(work / name, ignore_errors=True)  # measure every build and judgement afresh
    t0 = time.monotonic()
    s = json.loads(run(cmd).stdout)
    took = time.monotonic() - t0
    ref, im, rec = s["reference"], s["imatrix"] or {}, s["recommendation"]
    shown = " ".join(str(c).replace(str(ROOT) + "/", "").replace(str(work) + "/", "WORK/")
                     .replace(str(CACHE), "~/.cache/tandem") for c in cmd[1:])
    body = [f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on this machine "
            f"({os.cpu_count()} CPU cores, no GPU), engine b11434:",
            "", "```", f"tandem {shown}", "```", "",
            f"Source {s['source']['type']}, {s['source']['mib']:.1f} MiB; "
            f"{s['source']['protected']}. Judged on {s['data']['judged']} of "
            f"{s['data']['cases']} cases ({ref['questions']} answers, {ref['sure']} held by the "
            f"reference with a margin ≥ {s['margin']}); the other {s['data']['calibration']} "
            f"shaped the importance matrix"
            + (f" in {im['seconds']:.0f} s." if im.get("seconds") else
               f" ({im.get('unavailable', 'none')})."),
            f"The whole ladder took {took:.0f} s "
            f"({len([r for r in s['rungs'] if r['seconds'] is not None])} builds and "
            f"judgements); the reference answered in {ref['seconds']:.0f} s.",
            "", table(s), ""]
    body.append(f"Recommended at --max-flip-rate {GATE}: " + (rec["why"] if rec else "none."))
    body.append(f"\nThe HTML report with the size-against-flips plot: "
                f"[{report.name}]({report.name}).")
    replace_section(out, f"ladder-{name}", f"### {name}: every rung", "\n".join(body))
    return s


def plan_table(tandem, src, work, *args):
    """`--plan-only` for src; returns the command as shown and the markdown table."""
    cmd = [tandem, "quantize", src, "--ladder", "--plan-only", *args, "--out-dir",
           work / "plan-only"]
    env = dict(os.environ, XDG_CACHE_HOME=str(CACHE.parent))
    p = subprocess.run(list(map(str, cmd + ["--json"])), capture_output=True, text=True, env=env)
    if p.returncode:
        sys.exit(p.stderr)
    s = json.loads(p.stdout)
    rows = ["| type | MiB | bits/weight | alone (MiB) | with the partner (MiB) | fits "
            f"{s['budget_bytes'] / 2**20:.0f} MiB | the partner runs on |",
            "|---|---:|---:|---:|---:|---|---|"]
    for r in s["rungs"]:
        rows.append(f"| {r['type']} | {r['mib']:.0f} | {r['bpw']:.2f} | "
                    f"{r['vram_alone'] / 2**20:.0f} | {r['vram_pair'] / 2**20:.0f} | "
                    f"{'yes' if r['fits'] else 'no'} | "
                    f"{', '.join(r['partner_device'] or ['-'])} |")
    shown = " ".join(str(c).replace(str(ROOT) + "/", "").replace(str(work) + "/", "WORK/")
                     .replace(str(CACHE), "~/.cache/tandem") for c in cmd[1:])
    return "\n".join(["```", f"tandem {shown}", "```", "", f"{s['source']['protected']}.", "",
                      *rows])


def plan_section(tandem, out, work):
    kev = plan_table(tandem, FIXTURES / "kev-9b-shape.gguf", work, "--config",
                     ROOT / "examples" / "kev9b-laya-6gb.yaml", "--model", "kev-9b")
    laya = plan_table(tandem, FIXTURES / "laya-shape.gguf", work, "--with",
                      FIXTURES / "kev-9b-iq3m-shape.gguf", "--vram", "6GiB", "--ctx", "8192")
    body = "\n".join(["Kev-9B's rungs beside Laya (Q8_0), with the settings and the 6 GiB "
                      "budget of `examples/kev9b-laya-6gb.yaml` (ctx 8192, 512 MiB reserve):",
                      "", kev, "", "Laya's rungs beside Kev-9B at IQ3_M, on the same budget:",
                      "", laya])
    replace_section(out, "ladder-kev9b-laya", "### Kev-9B beside Laya on 6 GiB: the memory side",
                    body)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tandem", default=str(ROOT / "build" / "tandem"))
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "quantize.md")
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "bench-ladder")
    ap.add_argument("--only", choices=["smollm2", "gemma3", "kev9b"], action="append")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    only = set(a.only or ["smollm2", "gemma3", "kev9b"])
    if "kev9b" in only:
        plan_section(a.tandem, a.out, a.work)
    if "smollm2" in only:
        f16 = a.work / "smollm2-f16.gguf"
        if not f16.exists():
            run([a.tandem, "quantize", "--allow-requantize", FIXTURES / "smollm2-decider.gguf",
                 f16, "F16"])
        ladder_section(a.tandem, "smollm2", f16, a.work, a.out)
    if "gemma3" in only:
        # the only pinned Gemma-3 decider is a Q4_K_M-class file (its embedding at Q8_0)
        ladder_section(a.tandem, "gemma3", FIXTURES / "gemma3-decider.gguf", a.work, a.out,
                       "--allow-requantize")


if __name__ == "__main__":
    main()
