"""Write ``ttr_edu/kernels/sm90_ptxas_report.csv``: ptxas's register and spill report for the package's delta-rule
kernel compiled for sm_90 on a CPU, for each dot precision, with and without the gate (see
ttr_edu.kernels.ptxas_report).

Usage::

    python benchmarks/sm90_ptxas_report.py                # writes the CSV the Triton chapter prints
    python benchmarks/sm90_ptxas_report.py --print-only   # prints the table, writes nothing
"""

from __future__ import annotations

import argparse
import csv
import sys

from ttr_edu.kernels.ptxas_report import FIELDS, PRECISIONS, SHIPPED, compile_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print-only", action="store_true", help="print the table, do not write the CSV")
    args = parser.parse_args()
    rows = [compile_report(p, g) for p in PRECISIONS for g in (False, True)]
    csv.DictWriter(sys.stdout, FIELDS).writeheader()
    csv.DictWriter(sys.stdout, FIELDS).writerows(rows)
    if not args.print_only:
        with open(SHIPPED, "w", newline="") as handle:
            writer = csv.DictWriter(handle, FIELDS)
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {SHIPPED}", file=sys.stderr)


if __name__ == "__main__":
    main()
