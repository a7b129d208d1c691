"""``python -m ttr_edu.experiments capacity|overwrite|mqar|mqar_memories|lm|design_space [options]``: run one
experiment's grid."""

from __future__ import annotations

import importlib
import sys

from ttr_edu.experiments import EXPERIMENTS


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        print("Each experiment takes --help for its options.")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in EXPERIMENTS:
        print(f"unknown experiment {name!r}; valid names are {', '.join(EXPERIMENTS)}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(f"ttr_edu.experiments.{name}")  # lazily: mqar is written separately
    except ModuleNotFoundError as error:
        if error.name != f"ttr_edu.experiments.{name}":
            raise
        print(
            f"experiment {name!r} is not available in this installation (ttr_edu/experiments/{name}.py is missing)",
            file=sys.stderr,
        )
        return 1
    status = module.main(rest)
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(main())
