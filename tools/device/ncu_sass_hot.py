"""The hottest SASS instructions of an Nsight Compute source page (CSV of `ncu -i REP
--page source --csv --print-source sass`): warp stall samples a line, with each nonzero
stall column, and the samples summed by instruction kind. Run on the GPU machine after
`ncu ... --section WarpStateStats --section SourceCounters -o REP`:

    python3 tools/device/ncu_sass_hot.py SRC.csv [TOP]"""
import csv
import sys
from collections import Counter


def main(path: str, top: int = 45) -> None:
    rows = list(csv.reader(open(path, newline="")))
    start = next(i for i, r in enumerate(rows) if any("Source" == c.strip() for c in r))
    head = [c.strip() for c in rows[start]]
    body = [r for r in rows[start + 1:] if len(r) == len(head)]
    src = head.index("Source")
    samp = next(i for i, c in enumerate(head) if c.startswith("Warp Stall Sampling (All"))
    num = lambda v: float(v.replace(",", "")) if v.strip() not in ("", "-") else 0.0  # noqa: E731
    total = sum(num(r[samp]) for r in body) or 1.0
    print(f"SASSHOT {path}: {len(body)} instructions, {total:.0f} stall samples; columns: {head}")
    kinds = Counter()
    for r in body:
        words = [w for w in r[src].split() if not w.startswith("@")]  # the opcode, past a predicate
        kinds[words[0] if words else "?"] += num(r[samp])
    print("SASSHOT by kind: " + ", ".join(f"{k} {v / total:.1%}" for k, v in kinds.most_common(14)))
    for r in sorted(body, key=lambda r: -num(r[samp]))[:top]:
        extra = {head[i][6:]: r[i] for i in range(len(head))
                 if head[i].startswith("stall_") and "Not Issued" not in head[i] and num(r[i])}
        print(f"SASSHOT {num(r[samp]) / total:6.2%} {r[0]:>8} {r[src][:70]:70} {extra}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 45)
