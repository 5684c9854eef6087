"""``changeflow capacity``: where changeflow stops on AWS (issue 25): the quotas, the first wall at 10², 10³
and 10⁴ changes/s for Standard and Express, one hot entity's limit, and (unless --model-only) the
simulation calibrated on the embedded stack and its predictions for AWS."""

from __future__ import annotations

from ..capacity import report
from ..common.errors import UsageError
from ..common.project import project_root
from .options import COUNT, EXIT_2, exit_help


def cmd_capacity(args) -> int:
    root = project_root()
    try:
        ks = tuple(int(k) for k in args.contention.split(",") if k.strip())
    except ValueError:
        raise UsageError(f"--contention {args.contention!r}: give whole numbers separated by commas, e.g. 10,50") from None
    if args.quick and not ks:
        ks = (3,)
    built = report.build(root, simulate=not args.model_only, seeds=args.seeds, contention=ks, quick=args.quick)
    for name, body in built["blocks"].items():
        print(f"{name}:\n{body}\n")
    if built["figures"]:
        print(f"figures: {report.save_figures(root, built['figures'])}")
    if args.write:
        try:
            page = report.write(root, built["blocks"])
        except ValueError as exc:  # the page lost a block's markers: say which to add back
            raise UsageError(f"docs/capacity.md: {exc}") from None
        print(f"{page.relative_to(root)}: replaced {', '.join(built['blocks'])}")
    return 0


def add_capacity(command) -> None:
    capacity = command("capacity", "where changeflow stops on AWS: quotas, walls, simulation",
                       "Print the capacity model (every quota cited, the first wall for Standard and Express at "
                       "100, 1,000 and 10,000 changes/s, one hot entity's limit) and, unless --model-only, the "
                       "simulation calibrated against the embedded stack's measured contention and its predictions "
                       "for AWS. --write puts the tables into docs/capacity.md (make capacity).",
                       exit_help("0  printed (and written with --write)", EXIT_2))
    capacity.add_argument("--write", action="store_true", help="replace the generated blocks of docs/capacity.md")
    capacity.add_argument("--model-only", action="store_true",
                          help="the closed-form model alone: no embedded stack, no simulation")
    capacity.add_argument("--seeds", type=COUNT, default=3, metavar="N",
                          help="simulation runs per figure, averaged (default %(default)s)")
    capacity.add_argument("--contention", default="", metavar="K,K",
                          help="also measure make cost's contention run now at these K, twice: the fit is made on the "
                               "first run and judged on the second, held out (e.g. 10,50; real back-off timing, tens of "
                               "seconds each; default: none, and the fit is on docs/cost.md's rows)")
    capacity.add_argument("--quick", action="store_true",
                          help="the same path on a small budget (4 changes, one seed, K = 3, a small prediction): "
                               "the test of make capacity, not its figures")
    capacity.set_defaults(func=cmd_capacity)
