"""`python -m faults run [--long] [--cycles N] [--only a,b] [--no-second-writer] [--work DIR] [--keep]`.

Runs a profile (`faults.profiles`), printing progress, then the summary table; writes the full
report to `{work}/report.json` (with `--keep` or `--work`); exits 0 when every check passed, 1
otherwise. `python -m faults list` names the scenarios.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from faults.profiles import SHORT, Profile, long_profile
from faults.run import Run, work_dir
from faults.scenarios import SCENARIOS


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m faults", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a profile of the fault suite")
    run.add_argument(
        "--long", action="store_true", help="the long profile (20 kill -9 cycles, 5 min fuzzing)"
    )
    run.add_argument(
        "--cycles", type=int, default=None, help="kill -9 cycles of the long profile (implies --long)"
    )
    run.add_argument("--only", default=None, help="comma-separated scenarios to run instead of the plan")
    run.add_argument("--no-second-writer", action="store_true", help="skip the second-writer phase")
    run.add_argument("--fuzz-seconds", type=float, default=None, help="schemathesis time budget")
    run.add_argument("--seed", type=int, default=7)
    run.add_argument("--work", type=Path, default=None, help="work directory (kept); default: a temp dir")
    run.add_argument("--keep", action="store_true", help="keep the temp work directory")
    sub.add_parser("list", help="list the scenarios")
    return parser.parse_args(argv)


def profile_of(args: argparse.Namespace) -> Profile:
    profile = long_profile(args.cycles or 20) if args.long or args.cycles else SHORT
    if args.only:
        plan = tuple(name.strip() for name in args.only.split(",") if name.strip())
        unknown = [name for name in plan if name not in SCENARIOS and name != "second-writer"]
        if unknown:
            raise SystemExit(
                f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}, second-writer"
            )
        profile = replace(
            profile,
            plan=tuple(name for name in plan if name != "second-writer"),
            second_writer="second-writer" in plan,
        )
    if args.no_second_writer:
        profile = replace(profile, second_writer=False)
    if args.fuzz_seconds is not None:
        profile = replace(profile, fuzz_s=args.fuzz_seconds)
    return profile


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.command == "list":
        for name in [*SCENARIOS, "second-writer"]:
            print(name)
        return 0
    profile = profile_of(args)
    print(
        f"fault suite, profile {profile.name}: {', '.join(profile.plan)}"
        + (", second-writer" if profile.second_writer else "")
    )
    with work_dir(args.work, keep=args.keep) as work:
        report = Run(profile, work, seed=args.seed, say=lambda line: print(line, flush=True)).execute()
        print()
        print(report.table())
        if args.keep or args.work is not None:
            (work / "report.json").write_text(report.to_json())
            print(f"report: {work / 'report.json'}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
