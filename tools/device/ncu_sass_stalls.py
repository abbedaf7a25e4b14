"""Where a kernel's warps stall, instruction by instruction, from Nsight Compute's source page.

On the device (a report with the WarpStateStats and SourceCounters sections, e.g. from the
commands in ncu_k2_experts.py with `-o REPORT`):

    ncu --import REPORT.ncu-rep --page source --print-source sass --csv > REPORT-sass.csv

then here or there: `python3 tools/device/ncu_sass_stalls.py REPORT-sass.csv [TOP]`. For each
profiled kernel it prints the sampled stall reasons and opcodes as shares of all samples,
and the TOP instructions with the most samples and their three main reasons (sixteenth
session: docs/evidence/logs/s16-call2-ncu-*-sass-stalls-*.log)."""
import collections
import csv
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"


def kernels(rows: list[list[str]]):
    """(header, instruction rows) of each kernel in the CSV: a 'Kernel Name' line opens one,
    its 'Address' line names the columns."""
    out, header = [], None
    for r in rows:
        if r and r[0] == "Kernel Name":
            out.append((None, []))
        elif r and r[0] == "Address":
            header = {h: i for i, h in enumerate(r)}
            out[-1] = (header, out[-1][1])
        elif r and out:
            out[-1][1].append(r)
    return out


def opcode(source: str) -> str:
    words = source.split()
    if words and words[0].startswith("@"):  # a predicate guards it
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def main(path: str, top: int) -> None:
    for k, (h, body) in enumerate(kernels(list(csv.reader(open(path))))):
        reasons = [c for c in h if c.startswith("stall_") and "Not Issued" not in c]
        count = lambda r, c: int(r[h[c]] or 0)  # noqa: E731
        total = sum(count(r, SAMPLES) for r in body) or 1
        by_reason, by_op = collections.Counter(), collections.Counter()
        for r in body:
            by_op[opcode(r[h["Source"]])] += count(r, SAMPLES)
            for c in reasons:
                by_reason[c[len("stall_"):]] += count(r, c)
        share = lambda n: f"{100 * n / total:.1f}%"  # noqa: E731
        print(f"== result {k}: {len(body)} instructions, {total} samples")
        print("   by reason:", ", ".join(f"{c} {share(n)}" for c, n in by_reason.most_common(10)))
        print("   by opcode:", ", ".join(f"{c} {share(n)}" for c, n in by_op.most_common(14)))
        for r in sorted(body, key=lambda r: -count(r, SAMPLES))[:top]:
            why = sorted(((count(r, c), c[len("stall_"):]) for c in reasons), reverse=True)[:3]
            print(f"   {r[h['Address']]:>6} {share(count(r, SAMPLES)):>6} {r[h['Source']][:60]:60s} "
                  + " ".join(f"{c}:{n}" for n, c in why if n))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25)
