"""Render the JSON records of ``opformer bench`` / ``compare_reference.py`` as Markdown tables (for docs/benchmarks.md).

Usage: python benchmarks/make_tables.py RESULT.json [...]
"""

from __future__ import annotations

import json
import sys


def _mib(b):
    return "-" if b is None else f"{b / 2**20:,.0f}"


def bench_table(records: list[dict]) -> str:
    rows = [
        "| what | n | batch | dtype | time fwd+bwd [s] | peak mem [MiB] | GFLOP fwd+bwd | GFLOP/s | of matmul | load | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        what = r.get("preset") or r.get("kind")
        if r.get("impl") == "reference":
            what += " (reference)"
        if r.get("chunk_size"):
            what += f" (chunk {r['chunk_size']})"
        if r.get("compile"):
            what += " (compiled)"
        ok = r["status"] == "ok"
        frac = r.get("fraction_of_matmul_rate")
        rows.append(
            f"| {what} | {r['n']} | {r['batch']} | {r['dtype']} | "
            + (f"{r['seconds_fwd_bwd']:.3f} | {_mib(r['peak_memory_bytes'])} | {r['flops_fwd_bwd'] / 1e9:.2f} | "
               f"{r['gflops_per_s']:.1f} | {100 * frac:.0f}% | " if ok else "- | - | - | - | - | ")
            + f"{(r.get('loadavg') or ['?'])[0]} | {'' if ok else r['status'] + ': ' + r['note']} |"
        )
    m = records[0]["machine"] if records else {}
    rows.append("")
    rows.append(f"Machine: {m.get('gpu') or m.get('cpu')}, {m.get('cpu_count')} cores, torch {m.get('torch')}, "
                f"{m.get('torch_threads')} threads; measured fp32 matmul {m.get('matmul_gflops_fp32', 0):.1f} GFLOP/s "
                f"(load {m.get('loadavg')}).")
    return "\n".join(rows)


def compare_table(doc: dict) -> str:
    rows = [
        "| kind | n | ours [s] | reference [s] | reference, dropout patched out [s] | ours/ref | ours/ref (no dropout) | target | met | load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["records"]:
        s = r["seconds"]
        tgt = r.get("target_ratio")
        rows.append(
            f"| {r['kind']} | {r['n']} | {s['ours']:.3f} | {s['ref']:.3f} | {s['ref_nodrop']:.3f} | "
            f"{r['ratio_ours_over_ref']:.2f} | {r['ratio_ours_over_ref_nodrop']:.2f} | "
            f"{'' if tgt is None else '≤ ' + str(tgt)} | {'' if tgt is None else ('yes' if r['target_met'] else 'NO')} | "
            f"{r['loadavg_before'][0]}→{r['loadavg_after'][0]} |"
        )
    m = doc["machine"]
    rows.append("")
    rows.append(f"Machine: {m['cpu']}, {m['cpu_count']} cores, torch {m['torch']}, {m['torch_threads']} threads; "
                f"measured fp32 matmul {m['matmul_gflops_fp32']:.1f} GFLOP/s (load {m['loadavg']}).")
    return "\n".join(rows)


def main(paths) -> int:
    for p in paths:
        with open(p) as f:
            doc = json.load(f)
        print(f"<!-- {p} -->")
        print(compare_table(doc) if isinstance(doc, dict) else bench_table(doc))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
