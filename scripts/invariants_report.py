#!/usr/bin/env python
"""The invariant checker against the planted-bug suite (tests/invariants/suite.py).

Prints, at specialized shapes and symbolically: mutants killed / total (rejected with a
counterexample that names the mutated line), false alarms on the correct kernels (and on the
library's kernels), and the median and max seconds per kernel verification.

    .venv/bin/python scripts/invariants_report.py [--json] [--verbose]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from argus_inductor.dsl import Policy  # noqa: E402
from argus_inductor.invariants import default_staging, verify, verify_source  # noqa: E402
from tests.invariants.suite import CASES, LIBRARY, library_kernels  # noqa: E402

MODES = ("specialized", "symbolic")
TARGET = {"specialized": 2.0, "symbolic": 20.0}


def run_suite(verbose: bool) -> dict[str, Any]:
    report: dict[str, Any] = {m: {"killed": 0, "mutants": 0, "false_alarms": 0, "kernels": 0, "times": [],
                                  "survivors": [], "alarms": [], "undecided": 0} for m in MODES}
    rows = []
    for case in CASES:
        row = {"kernel": case.name, "mutants": len(case.mutants)}
        for mode in MODES:
            r = report[mode]
            shapes = case.shapes if mode == "specialized" else None
            (res,) = verify_source(case.source, case.name, case.make_policy(), shapes, kernels=[case.kernel],
                                   assumptions=case.assumptions)
            r["kernels"] += 1
            r["times"].append(res.seconds)
            r["undecided"] += len(res.undecided)
            if not res.ok:
                r["false_alarms"] += 1
                r["alarms"].append(f"{case.name}: {res.violations[0].headline if res.violations else res.errors}")
            killed = 0
            for m in case.mutants:
                t0 = time.perf_counter()
                (mres,) = verify_source(m.apply(case.source), case.name, case.make_policy(), shapes,
                                        kernels=[case.kernel], assumptions=case.assumptions,
                                        staging=m.staging or default_staging)
                r["times"].append(mres.seconds)
                want = m.expected_line(case.source)
                ok = not mres.ok and any(want in v.lines for v in mres.violations)
                killed += ok
                if not ok:
                    r["survivors"].append(f"{case.name}: {m.name} (line {want})")
                if verbose:
                    v = next((v for v in mres.violations if want in v.lines), None)
                    print(f"  [{mode[:4]}] {'killed ' if ok else 'SURVIVED'} {case.name}: {m.name} "
                          f"({time.perf_counter() - t0:.2f} s)" + (f"\n      {v.headline}" if v else ""))
            r["killed"] += killed
            r["mutants"] += len(case.mutants)
            row[mode] = {"proved": res.ok, "seconds": round(res.seconds, 3), "killed": killed}
        rows.append(row)
    lib = {m: {"checked": 0, "false_alarms": 0, "times": [], "alarms": []} for m in MODES}
    kernels = library_kernels()
    for name, (pol, shapes, pre) in sorted(LIBRARY.items()):
        k = kernels.get(name)
        if k is None or set(pol) - {p.name for p in k.ir.constexprs} or set(shapes) - set(k.ir.symbols):
            continue
        for mode in MODES:
            res = verify(k, Policy.make(**pol), shapes if mode == "specialized" else None, assumptions=pre)
            lib[mode]["checked"] += 1
            lib[mode]["times"].append(res.seconds)
            if not res.ok:
                lib[mode]["false_alarms"] += 1
                lib[mode]["alarms"].append(name)
    return {"suite": report, "kernels": rows, "library": lib}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="one line per mutant with its counterexample")
    args = ap.parse_args()
    t0 = time.perf_counter()
    data = run_suite(args.verbose and not args.json)
    wall = time.perf_counter() - t0
    suite, lib = data["suite"], data["library"]
    if args.json:
        for m in MODES:
            ts = suite[m].pop("times")
            suite[m]["median_s"], suite[m]["max_s"] = statistics.median(ts), max(ts)
            lt = lib[m].pop("times")
            lib[m]["median_s"], lib[m]["max_s"] = (statistics.median(lt), max(lt)) if lt else (0, 0)
        data["wall_s"] = wall
        print(json.dumps(data, indent=2))
    else:
        n_k, n_m = len(CASES), sum(len(c.mutants) for c in CASES)
        print(f"Argus data-flow invariant checker: planted-bug suite ({n_k} kernels, {n_m} mutants)")
        print(f"{'mode':12s} {'mutants killed':>15s} {'false alarms':>13s} {'median s/kernel':>16s} "
              f"{'max s/kernel':>13s} {'target':>8s} {'undecided':>10s}")
        for m in MODES:
            r = suite[m]
            ts = r["times"]
            print(f"{m:12s} {r['killed']:>9d} / {r['mutants']:<3d} {r['false_alarms']:>6d} / {r['kernels']:<4d} "
                  f"{statistics.median(ts):>16.3f} {max(ts):>13.3f} {'< ' + str(TARGET[m]) + ' s':>8s} "
                  f"{r['undecided']:>10d}")
        print("\nper kernel (correct kernel: proved? seconds; mutants killed)")
        for row in data["kernels"]:
            sp, sy = row["specialized"], row["symbolic"]
            print(f"  {row['kernel']:17s} specialized: {'proved' if sp['proved'] else 'FALSE ALARM':11s} "
                  f"{sp['seconds']:6.3f} s  {sp['killed']}/{row['mutants']}   symbolic: "
                  f"{'proved' if sy['proved'] else 'FALSE ALARM':11s} {sy['seconds']:6.3f} s  "
                  f"{sy['killed']}/{row['mutants']}")
        print("\nlibrary kernels (argus_inductor/kernels), false alarms:")
        for m in MODES:
            lt = lib[m]["times"]
            med = statistics.median(lt) if lt else 0.0
            print(f"  {m:12s} {lib[m]['false_alarms']} / {lib[m]['checked']}   median {med:.3f} s, "
                  f"max {max(lt) if lt else 0.0:.3f} s" + (f"   ({', '.join(lib[m]['alarms'])})" if lib[m]['alarms']
                                                         else ""))
        for m in MODES:
            for s in suite[m]["survivors"]:
                print(f"SURVIVED [{m}] {s}")
            for s in suite[m]["alarms"]:
                print(f"FALSE ALARM [{m}] {s}")
        print(f"\ntotal wall time {wall:.1f} s")
    bad = any(suite[m]["survivors"] or suite[m]["alarms"] or lib[m]["false_alarms"] for m in MODES)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
