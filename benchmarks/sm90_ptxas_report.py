"""Write ``ttr_edu/kernels/sm90_ptxas_report.csv``: ptxas's register and spill report for the package's delta-rule
kernel compiled for sm_90 on a CPU, for each dot precision, with and without the gate, with the tensor-core
instructions of its PTX; and ``ttr_edu/kernels/sm90_mma_by_tile.csv``: which tensor-core instruction (``wgmma`` or
``mma.sync``) the tf32 kernel gets at the puzzles' tiles and at the GPU configuration (see
ttr_edu.kernels.ptxas_report).

Usage::

    python benchmarks/sm90_ptxas_report.py                # writes the CSV the Triton chapter prints
    python benchmarks/sm90_ptxas_report.py --print-only   # prints the table, writes nothing
"""

from __future__ import annotations

import argparse
import csv
import sys

from ttr_edu.kernels.ptxas_report import (
    FIELDS,
    PRECISIONS,
    SHIPPED,
    SHIPPED_TILES,
    TILE_CONFIGURATIONS,
    TILE_FIELDS,
    compile_report,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print-only", action="store_true", help="print the table, do not write the CSV")
    args = parser.parse_args()
    rows = [compile_report(p, g) for p in PRECISIONS for g in (False, True)]
    tiles = []
    for name, (bt, bk, bv, warps) in TILE_CONFIGURATIONS.items():
        report = compile_report("tf32", False, d=bk, bt=bt, tiles=(bk, bv), num_warps=warps)
        tiles.append(
            {
                "tiles": name,
                "bt": bt,
                "bk": bk,
                "bv": bv,
                "num_warps": warps,
                **{key: report[key] for key in TILE_FIELDS[5:]},
            }
        )
    for fields, table, path in ((FIELDS, rows, SHIPPED), (TILE_FIELDS, tiles, SHIPPED_TILES)):
        csv.DictWriter(sys.stdout, fields).writeheader()
        csv.DictWriter(sys.stdout, fields).writerows(table)
        if not args.print_only:
            with open(path, "w", newline="") as handle:
                writer = csv.DictWriter(handle, fields)
                writer.writeheader()
                writer.writerows(table)
            print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
