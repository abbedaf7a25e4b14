"""Where a persistent launch spends its warps, loop by loop, from Nsight Compute's source page.

ncu_sass_stalls.py sums a kernel's stall samples by reason and opcode; in K2's persistent launch
every phase is in one kernel, so those sums mix them. This splits the SASS at its backward
branches (each loop from the branch target to the branch) and prints, for the loops holding the
most samples, their share of the samples and of the executed instructions, what they hold (HMMA,
loads, barriers) and their stall reasons; `--lines A B` lists one loop's sampled lines in order
(a stall every N instructions at fixed spacing is an instruction fetch); `--buckets N` sums
no_inst / barrier / long_sb over N-instruction slices (which phase waits on what).

    python3 tools/device/ncu_sass_loops.py REPORT-sass.csv[.gz] [TOP]
    python3 tools/device/ncu_sass_loops.py REPORT-sass.csv[.gz] --lines A B [MIN_SHARE]
    python3 tools/device/ncu_sass_loops.py REPORT-sass.csv[.gz] --buckets N

The CSV is `ncu --import REP --page source --print-source sass --csv` of a report with the
WarpStateStats and SourceCounters sections (bench.sh ncu-src writes it gzipped)."""
import collections
import csv
import gzip
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ncu_sass_stalls import SAMPLES, opcode  # noqa: E402  (one reading of a SASS line's opcode)


def load(path: str):
    """(header index, instruction rows) of the CSV's first kernel."""
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path, newline="")) as f:
        rows = list(csv.reader(f))
    at = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    head = {c: i for i, c in enumerate(rows[at])}
    body = []
    for r in rows[at + 1:]:
        if r and r[0] == "Kernel Name":
            break
        if len(r) == len(rows[at]):
            body.append(r)
    return head, body


def num(v: str) -> float:
    return float(v.replace(",", "")) if v not in ("", "-") else 0.0


def loops(head, body):
    """(first, last) row of each loop: a BRA whose target is an earlier address of the kernel."""
    at = {int(r[head["Address"]], 16): i for i, r in enumerate(body)}
    out = []
    for i, r in enumerate(body):
        words = [w for w in r[head["Source"]].split() if not w.startswith("@")]
        if words and words[0] == "BRA":
            try:
                target = int(words[-1].rstrip(";"), 16)
            except ValueError:
                continue
            if target in at and at[target] < i:
                out.append((at[target], i))
    return out


def summary(head, body, top: int) -> None:
    reasons = [c for c in head if c.startswith("stall_") and "Not Issued" not in c]
    samples = [num(r[head[SAMPLES]]) for r in body]
    executed = [num(r[head["Instructions Executed"]]) for r in body]
    total, total_ex = sum(samples) or 1.0, sum(executed) or 1.0
    print(f"{len(body)} instructions, {total:.0f} samples, {total_ex / 1e6:.2f} M warp instructions executed")
    rows = []
    for a, b in loops(head, body):
        s = sum(samples[a:b + 1])
        ops = collections.Counter(opcode(body[k][head["Source"]]) for k in range(a, b + 1))
        why = collections.Counter()
        for k in range(a, b + 1):
            for c in reasons:
                why[c[len("stall_"):]] += num(body[k][head[c]])
        rows.append((s, a, b, sum(executed[a:b + 1]), executed[b], ops, why))
    for s, a, b, ex, trips, ops, why in sorted(rows, reverse=True)[:top]:
        held = " ".join(f"{k} {ops[k]}" for k in ("HMMA", "LDG", "LDGSTS", "LDS", "LDSM", "BAR") if ops[k])
        print(f"loop {a:5d}-{b:5d} ({b - a + 1:4d} instructions, its branch run {trips:.0f} times by warps): "
              f"samples {s / total:5.1%}, executed {ex / total_ex:5.1%}; {held}")
        print("     " + ", ".join(f"{k} {v / max(s, 1):.0%}" for k, v in why.most_common(6)))


def lines(head, body, a: int, b: int, least: float) -> None:
    reasons = [c for c in head if c.startswith("stall_") and "Not Issued" not in c]
    total = sum(num(r[head[SAMPLES]]) for r in body[a:b + 1]) or 1.0
    run = 0.0
    for k in range(a, b + 1):
        r = body[k]
        s = num(r[head[SAMPLES]])
        run += s
        if s >= least * total:
            why = sorted(((num(r[head[c]]), c[len("stall_"):]) for c in reasons), reverse=True)[:3]
            print(f"{k:5d} {s / total:6.1%} (to here {run / total:6.1%}) {r[head['Source']].strip()[:58]:58s} "
                  + " ".join(f"{c}:{n:.0f}" for n, c in why if n))


def buckets(head, body, size: int) -> None:
    total = sum(num(r[head[SAMPLES]]) for r in body) or 1.0
    for a in range(0, len(body), size):
        part = body[a:a + size]
        share = {c: sum(num(r[head[c]]) for r in part) / total
                 for c in (SAMPLES, "stall_no_inst", "stall_barrier", "stall_long_sb")}
        ops = collections.Counter(opcode(r[head["Source"]]) for r in part)
        held = " ".join(f"{k}{ops[k]}" for k in ("HMMA", "LDGSTS", "LDG", "BAR", "ATOMG", "SHFL") if ops[k])
        print(f"{a:5d} samples {share[SAMPLES]:5.1%}  no_inst {share['stall_no_inst']:5.1%}  "
              f"barrier {share['stall_barrier']:5.1%}  long_sb {share['stall_long_sb']:5.1%}  {held}")


if __name__ == "__main__":
    h, rows = load(sys.argv[1])
    if len(sys.argv) > 2 and sys.argv[2] == "--lines":
        lines(h, rows, int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]) if len(sys.argv) > 5 else 0.005)
    elif len(sys.argv) > 2 and sys.argv[2] == "--buckets":
        buckets(h, rows, int(sys.argv[3]))
    else:
        summary(h, rows, int(sys.argv[2]) if len(sys.argv) > 2 else 12)
