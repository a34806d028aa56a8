"""Top-k distillation loss: time and peak memory of forward + backward, ours against naive versions.

  python bench/topk_loss.py                 # V = 49152, T in {256, 1024}, k in {8, 32, 64}, 1 thread
  python bench/topk_loss.py --quick         # smaller: a smoke run
  python bench/topk_loss.py --seq 4096 --k 32 --naive-max-gb 0

Implementations (teacher support unless said; all give the same loss, which the table checks):

- ``ours``: ``topk_distillation_loss`` with the teacher's top-k (``TopK``): one fused
  log-softmax + gather over V for the student, nothing ``[T, V]`` kept for the backward.
- ``ours, student support``: the same with ``support="student"``: the student's top-k chosen
  inside (a ``topk`` over V), the teacher's log-probs gathered from a full ``[T, V]`` tensor that
  exists before the measurement (so it is not counted).
- ``one-pass autograd``: what one would write first, ``log_softmax(z).gather(ids)`` under plain
  autograd, then the same binned KL (``binned_reverse_kl``). One pass over V, but autograd keeps
  the ``[T, V]`` log-softmax and its backward creates two more.
- ``NAIVE per-bin softmax``: for each of the k bins a separate full softmax over V, gathered at
  that bin's id, the tail as ``1 - sum``: k passes over V, k ``[T, V]`` softmaxes kept for the
  backward. Skipped where its estimated memory, ``(k + 3) * T * V * 4`` bytes, is over
  ``--naive-max-gb``.

Time: wall time of ``loss = f(...); loss.backward()``, p50 over ``--reps`` calls after ``--warmup``
unmeasured ones, all in one process on ``--threads`` torch threads (1 by default). glibc is set
(``mallopt``) as it settles by itself after freeing large blocks: allocations of 32 MiB or more get
their own ``mmap`` (so every call faults in its large buffers afresh, as in a trainer), smaller
ones are reused from the heap.

Memory: one more call per implementation, with glibc set to serve every allocation of 64 KiB or
more with its own ``mmap``, returned to the system when freed (and ``malloc_trim`` before), so that
RSS follows what is live: the increase of the process's peak RSS over its RSS just before the call
(``VmHWM`` after, reset to the current RSS with ``/proc/self/clear_refs`` before). It includes the
logits' gradient, one ``[T, V]`` tensor that every implementation must produce; ``x T*V*4`` is the
increase in units of one float32 ``[T, V]`` tensor.

The naive version takes seconds per call: it runs ``--naive-reps`` calls (default 1) with no
warmup, under the memory setting, each giving both figures (at the default sizes its ``[T, V]``
buffers are 48 MiB or more, mapped the same way under either setting).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402
from _common import env_info, md_table, parse_int_list, proc_mem, reset_peak, summary, write_json  # noqa: E402

from slime_ext.algorithms import TopK, masked_sample_mean, teacher_topk, topk_distillation_loss  # noqa: E402
from slime_ext.algorithms.topk import binned_reverse_kl  # noqa: E402

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MiB = 1024 * 1024


def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


LIBC = _libc()


def allocator(mode: str) -> bool:
    """``"timing"``: glibc's settled defaults (mmap from 32 MiB, heap kept up to 64 MiB);
    ``"memory"``: every block of 64 KiB or more mapped on its own and unmapped when freed.
    Returns False where glibc cannot be told (then RSS may lag what is live)."""
    if LIBC is None:
        return False
    mmap_at, trim_at = (32 * MiB, 64 * MiB) if mode == "timing" else (64 * 1024, 128 * 1024)
    ok = LIBC.mallopt(M_MMAP_THRESHOLD, mmap_at) == 1 and LIBC.mallopt(M_TRIM_THRESHOLD, trim_at) == 1
    if mode == "memory":
        LIBC.malloc_trim(0)
    return ok


# ----------------------------------------------------------------------------- implementations
def ours(logits: torch.Tensor, teacher: TopK, mask: torch.Tensor, k: int) -> torch.Tensor:
    return topk_distillation_loss(logits, teacher, mask)[0]


def ours_student_support(logits: torch.Tensor, teacher_full: torch.Tensor, mask: torch.Tensor, k: int) -> torch.Tensor:
    return topk_distillation_loss(logits, teacher_full, mask, k=k, support="student")[0]


def one_pass_autograd(logits: torch.Tensor, teacher: TopK, mask: torch.Tensor, k: int) -> torch.Tensor:
    """One log-softmax over V under plain autograd, gathered; the same binned KL as ours."""
    student = torch.log_softmax(logits, dim=-1).gather(-1, teacher.ids)
    return masked_sample_mean(binned_reverse_kl(student, teacher.logprobs)[0], mask)


def naive_per_bin_softmax(logits: torch.Tensor, teacher: TopK, mask: torch.Tensor, k: int) -> torch.Tensor:
    """NAIVE, for comparison only: a separate full softmax over V for each of the k bins."""
    eps = torch.finfo(logits.dtype).eps
    q_bins = []
    for j in range(k):
        q = torch.softmax(logits, dim=-1)  # one full [B, T, V] pass (kept by autograd) per bin
        q_bins.append(q.gather(-1, teacher.ids[..., j : j + 1]))
    q_s = torch.cat(q_bins, dim=-1)
    p_s = teacher.logprobs.exp()
    q = torch.cat([q_s, (1 - q_s.sum(-1, keepdim=True)).clamp(min=eps)], dim=-1)
    p = torch.cat([p_s, (1 - p_s.sum(-1, keepdim=True)).clamp(min=eps)], dim=-1)
    kl = (q * (q.clamp(min=1e-38).log() - p.log())).sum(-1)
    return masked_sample_mean(kl, mask)


# name -> (function, teacher input, label in the tables)
IMPLS = {
    "ours": (ours, "topk", "ours"),
    "ours-student": (ours_student_support, "full", "ours, student support"),
    "one-pass": (one_pass_autograd, "topk", "one-pass autograd"),
    "naive": (naive_per_bin_softmax, "topk", "NAIVE per-bin softmax"),
}


# ----------------------------------------------------------------------------- measurement
def measure(fn, logits: torch.Tensor, teacher, mask: torch.Tensor, k: int, mode: str) -> dict[str, float]:
    """One forward + backward: wall seconds, peak RSS increase (MiB; ``"memory"`` mode only), the loss."""
    logits.grad = None
    gc.collect()
    exact = allocator(mode)
    before = proc_mem()["VmRSS"]
    exact = reset_peak() and exact
    t0 = time.perf_counter()
    loss = fn(logits, teacher, mask, k)
    loss.backward()
    dt = time.perf_counter() - t0
    peak = proc_mem()["VmHWM"]
    value = loss.item()
    del loss
    logits.grad = None
    return {"s": dt, "peak_mib": peak - before if exact and mode == "memory" else float("nan"), "loss": value}


def run_length(args, T: int) -> list[dict]:
    """Every k and implementation at response length T, on one set of random logits."""
    g = torch.Generator().manual_seed(T)
    B, V = args.batch, args.vocab
    logits = (torch.randn(B, T, V, generator=g) * args.scale).requires_grad_()
    with torch.no_grad():
        teacher_logits = logits.detach() + torch.randn(B, T, V, generator=g) * args.scale
        teacher_full = torch.log_softmax(teacher_logits, dim=-1) if "ours-student" in args.impls else None
    mask = torch.ones(B, T)
    tensor_mib = B * T * V * 4 / MiB
    rows = []
    for k in args.k:
        with torch.no_grad():
            topk = teacher_topk(teacher_logits, k)
        cell = []
        for name in args.impls:
            fn, form, label = IMPLS[name]
            row = {"T": T, "k": k, "impl": name, "label": label, "tensor_mib": tensor_mib}
            cell.append(row)
            est_gb = (k + 3) * tensor_mib / 1024
            if name == "naive" and est_gb > args.naive_max_gb:
                row["skipped"] = f"est. {est_gb:.1f} GB > --naive-max-gb {args.naive_max_gb:g}"
                print(f"  T={T} k={k} {label}: skipped ({row['skipped']})", flush=True)
                continue
            teacher = teacher_full if form == "full" else topk
            if name == "naive":
                timed = mem = [measure(fn, logits, teacher, mask, k, "memory") for _ in range(args.naive_reps)]
            else:
                timed = [measure(fn, logits, teacher, mask, k, "timing") for _ in range(args.warmup + args.reps)]
                timed = timed[args.warmup:]
                mem = [measure(fn, logits, teacher, mask, k, "memory")]
            times = [r["s"] * 1000 for r in timed]
            peaks = [r["peak_mib"] for r in mem]
            row.update({"ms": summary(times), "ms_raw": times, "peak_mib": max(peaks), "peak_mib_raw": peaks,
                        "ms_memory_run": [r["s"] * 1000 for r in mem], "loss": mem[-1]["loss"]})
            print(f"  T={T} k={k} {label}: {row['ms']['p50']:.0f} ms, peak +{row['peak_mib']:.0f} MiB", flush=True)
        ref = next((r["loss"] for r in cell if r["impl"] == "ours" and "loss" in r), None)
        for r in cell:  # the student-support loss is a different quantity (another support set)
            if ref is not None and "loss" in r and r["impl"] != "ours-student":
                r["loss_diff_vs_ours"] = abs(r["loss"] - ref)
        rows += cell
    return rows


# ----------------------------------------------------------------------------- report
def report(result: dict) -> str:
    rows = result["rows"]
    head = ["T", "k", "implementation", "fwd+bwd ms p50", "min", "peak RSS +MiB", "x T*V*4", "|loss - ours|"]
    table = []
    for r in rows:
        if "skipped" in r:
            table.append([r["T"], r["k"], r["label"], "skipped", "", r["skipped"], "", ""])
            continue
        diff = r.get("loss_diff_vs_ours")
        table.append([r["T"], r["k"], r["label"], r["ms"]["p50"], r["ms"]["min"], r["peak_mib"],
                      r["peak_mib"] / r["tensor_mib"], "" if diff is None else f"{diff:.1e}"])
    by = {(r["T"], r["k"], r["impl"]): r for r in rows if "ms" in r}
    ratios = []
    for T in result["args"]["seq"]:
        for k in result["args"]["k"]:
            base = by.get((T, k, "ours"))
            if base is None:
                continue
            for name in ("one-pass", "naive"):
                other = by.get((T, k, name))
                if other is not None:
                    ratios.append([T, k, other["label"], other["ms"]["p50"] / base["ms"]["p50"],
                                   other["peak_mib"] / base["peak_mib"]])
    a = result["args"]
    env = result["env"]
    lines = [
        f"## Top-k reverse KL, forward + backward (V = {a['vocab']}, B = {a['batch']}, float32, "
        f"{a['threads']} thread(s), {a['reps']} reps after {a['warmup']} warmup, naive {a['naive_reps']})",
        "",
        md_table(head, table),
        "",
        md_table(["T", "k", "vs ours", "time ratio", "peak memory ratio"], ratios) if ratios else "",
        "",
        f"One float32 [T, V] tensor is T * {a['vocab']} * 4 bytes; every implementation must produce the "
        "logits' gradient, one such tensor. Peak RSS is exact per call: "
        f"{result['mallopt'] and result['peak_reset']}. Load average at start "
        f"{tuple(round(x, 2) for x in env['loadavg'])}, at end {tuple(round(x, 2) for x in env['loadavg_end'])} on "
        f"{env['cpu_count']} CPUs.",
    ]
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--vocab", type=int, default=49152, help="vocabulary size (SmolLM2's: 49152)")
    p.add_argument("--seq", type=parse_int_list, default=None, help="response lengths T (default 256,1024)")
    p.add_argument("--k", type=parse_int_list, default=None, help="top-k widths (default 8,32,64)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--reps", type=int, default=None, help="measured calls per cell (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured calls per cell before the measured ones")
    p.add_argument("--naive-reps", type=int, default=1,
                   help="measured calls of the naive version (seconds each; no warmup) (default 1)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--scale", type=float, default=2.0, help="std of the random logits")
    p.add_argument("--naive-max-gb", type=float, default=4.0,
                   help="skip the naive version where (k + 3) * T * V * 4 bytes exceeds this")
    p.add_argument("--impls", default=",".join(IMPLS), help=f"comma-separated subset of: {','.join(IMPLS)}")
    p.add_argument("--quick", action="store_true", help="T in {64, 256}, k in {8, 32}, 2 reps")
    p.add_argument("--out", default=None, help="JSON path (default bench/results/topk_loss.json)")
    args = p.parse_args(argv)
    args.seq = args.seq or ([64, 256] if args.quick else [256, 1024])
    args.k = args.k or ([8, 32] if args.quick else [8, 32, 64])
    args.reps = args.reps or (2 if args.quick else 3)
    args.impls = [s.strip() for s in args.impls.split(",") if s.strip()]
    unknown = [s for s in args.impls if s not in IMPLS]
    if unknown:
        p.error(f"unknown --impls {unknown}; choose from {list(IMPLS)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    result = {"env": env_info(), "args": {k: v for k, v in vars(args).items() if k != "out"},
              "mallopt": allocator("memory"), "peak_reset": reset_peak(), "rows": []}
    t0 = time.perf_counter()
    for T in args.seq:
        result["rows"] += run_length(args, T)
    result["wall_s"] = time.perf_counter() - t0
    result["env"]["loadavg_end"] = env_info()["loadavg"]
    print(report(result))
    print(f"\nJSON: {write_json('topk_loss', result, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
