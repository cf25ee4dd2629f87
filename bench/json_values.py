"""Typed JSON values benchmark: a column of JSON values → a struct column of the topic's record
type (``magnetar.tier.rows.decode_json_values``), what an offload into an Iceberg table and the
Spark source's ``data`` column pay, next to pyarrow's own JSON reader on the same values.

``--rows`` values like an order (``id``, ``item``, ``price``, a nested ``ship`` record), of
which some do not fit the record (``"id": "x"``, a string where it says long), spread evenly:

* **magnetar** — ``decode_json_values``: Arrow's reader on the whole column when every value
  fits, on parts of it around the ones that do not, row by row for small parts;
* **row by row** — ``decode_json``: ``json.loads``, the fit check and ``pa.array`` per
  value, what a whole column with one such value cost before it was cut in parts;
* **peer** — ``pyarrow.json.read_json`` of the same values, newline-joined, with the record as
  its explicit schema (it refuses the whole block as soon as one value does not fit: the
  figure is for the clean values).

Every figure is the best of ``--repeat`` runs, in rows per second.

Run: ``PYTHONPATH=. .venv/bin/python bench/json_values.py [--rows N] [--markdown]``
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pj

from bench.common import (
    RESULTS_DIR,
    best_seconds,
    fmt_rate,
    machine_info,
    render_markdown_table,
    render_table,
    utc_now,
    write_json,
)
from bench.tiered_iceberg import ORDER, order
from magnetar.tier.rows import decode_json, decode_json_values, record_type

RECORD = record_type(ORDER)[0]
BAD_COUNTS = (0, 1, 10, 100, 1000)


def values(rows: int, bad: int) -> list[bytes]:
    out = [json.dumps(order(i)).encode() for i in range(rows)]
    for k in range(bad):
        out[(2 * k + 1) * rows // (2 * bad)] = b'{"id": "x"}'
    return out


def peer(raw: list[bytes]) -> pa.Table:
    options = pj.ParseOptions(explicit_schema=pa.schema(list(RECORD)))
    return pj.read_json(pa.BufferReader(b"\n".join(raw)), parse_options=options)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", type=Path, default=RESULTS_DIR / "json_values.json")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = p.parse_args(argv)
    print(utc_now(), machine_info())
    clean = values(args.rows, 0)
    peer_s = best_seconds(lambda: peer(clean), args.repeat)
    results = []
    for bad in BAD_COUNTS:
        raw = values(args.rows, bad)
        column = pa.array(raw, pa.binary())
        got = decode_json_values(column, RECORD)
        if got.to_pylist() != decode_json(raw, RECORD).to_pylist():
            raise SystemExit(f"{bad} bad values: the two paths disagree")
        ours = best_seconds(partial(decode_json_values, column, RECORD), args.repeat)
        rows = best_seconds(partial(decode_json, raw, RECORD), args.repeat)
        results.append(
            {
                "bad": bad,
                "rows": args.rows,
                "magnetar_rows_per_s": args.rows / ours,
                "row_by_row_rows_per_s": args.rows / rows,
                "peer_rows_per_s": args.rows / peer_s,
            }
        )
    headers = [
        "values that do not fit",
        "magnetar rows/s",
        "row by row rows/s",
        "pyarrow read_json (clean) rows/s",
        "magnetar vs peer",
        "magnetar vs row by row",
    ]
    table = [
        [
            f"{r['bad']:,} of {r['rows']:,}",
            fmt_rate(r["magnetar_rows_per_s"]),
            fmt_rate(r["row_by_row_rows_per_s"]),
            fmt_rate(r["peer_rows_per_s"]),
            f"{r['magnetar_rows_per_s'] / r['peer_rows_per_s']:.2f}x",
            f"{r['magnetar_rows_per_s'] / r['row_by_row_rows_per_s']:.1f}x",
        ]
        for r in results
    ]
    print()
    print(render_markdown_table(headers, table) if args.markdown else render_table(headers, table))
    write_json(args.json, {"when": utc_now(), "machine": machine_info(), "results": results})
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
