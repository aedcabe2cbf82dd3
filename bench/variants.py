"""bench/variants.py: one peer run as it is (NAME) and with an extra feature configured
(NAME+SUFFIX), in interleaved rounds of the same scenarios, and the report of what the
feature costs: median jobs/s and server CPU per job of both, and the median of the
per-round ratios. Used by bench/policies and bench/schedules (Python 3 standard library
only; never touches port 6379 or 11300)."""

import copy
import importlib.machinery
import importlib.util
import json
import os
import shlex
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402  (bench/peers.py, beside this module)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_loader = importlib.machinery.SourceFileLoader("batches", os.path.join(REPO, "bench", "batches"))
batches = importlib.util.module_from_spec(importlib.util.spec_from_loader("batches", _loader))
_loader.exec_module(batches)
build, find_bins, median, fmt = batches.build, batches.find_bins, batches.median, batches.fmt
cpu_per_job = batches.cpu_per_job


def run(opts, command, suffix, extra_args, scenarios, title, explain, check_empty=True):
    """Measure `opts.servers` (comma-separated peers) with and without `extra_args`
    (a function of the temporary directory, returning the flags), `opts.rounds` rounds
    of each of `scenarios` ((label, bench args)) for `opts.duration` s; write
    `opts.out` (markdown, with `title` and the `explain` paragraph) and its .jsonl.
    Returns the exit status: 1 if a run failed its checks."""
    target_dir = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    if not opts.no_build:
        build(target_dir)
    bins = find_bins(target_dir)
    tmp = tempfile.mkdtemp(prefix="redstalk-%s-" % suffix)
    servers = {}
    runs = []  # (round, scenario, name, result, failure, command)
    try:
        flags = extra_args(tmp)
        for n in [n.strip() for n in opts.servers.split(",") if n.strip()]:
            for name, extra in [(n, []), (n + "+" + suffix, flags)]:
                peer = copy.copy(peers.PEER_BY_NAME[n])
                peer.args = list(peer.args) + extra
                peer.name = name
                s = peers.Server(peer, tmp)
                s.start(bins)
                servers[name] = s
        names = list(servers)
        for r in range(opts.rounds):
            for label, scenario in scenarios:
                for name in (names if r % 2 == 0 else list(reversed(names))):
                    res, fail, cmd = servers[name].measure(bins, scenario, opts.duration,
                                                           check_empty=check_empty)
                    print("round %d %s %s: %s jobs/s, %s us CPU/job%s" % (
                        r + 1, label, name, fmt((res or {}).get("ops_per_sec")),
                        fmt(cpu_per_job(res), 1), "" if not fail else " FAILED " + fail),
                        flush=True)
                    runs.append((r, label, name, res, fail, cmd))
    finally:
        for s in servers.values():
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    failures = [(n, label, fail, cmd) for (_, label, n, _, fail, cmd) in runs if fail]
    with open(opts.out.replace(".md", ".jsonl"), "w") as f:
        for r, label, n, res, fail, cmd in runs:
            f.write(json.dumps({"round": r + 1, "scenario": label, "peer": n, "result": res,
                                "failure": fail, "command": shlex.join(cmd)}) + "\n")
    with open(opts.out, "w") as f:
        f.write(render(command, title, explain, suffix, scenarios, names, runs, failures,
                       check_empty))
    print("wrote", opts.out)
    return 1 if failures else 0


def render(command, title, explain, suffix, scenarios, names, runs, failures, check_empty):
    L = ["# %s" % title, "",
         "Command: `%s`" % command, "",
         "Machine: %d cores, Linux %s, load average at the end %s." % (
             os.cpu_count(), os.uname().release,
             " ".join("%.2f" % x for x in os.getloadavg())), "",
         explain, "",
         "| scenario | peer | jobs/s | CPU µs/job | with %s | jobs/s | CPU µs/job | "
         "ratio of jobs/s (median of rounds) |" % suffix,
         "|---|---|---|---|---|---|---|---|"]
    by = {}
    for r, label, n, res, fail, _ in runs:
        by.setdefault((label, n), {})[r] = None if fail else res
    for label, _ in scenarios:
        for n in names:
            if n.endswith("+" + suffix):
                continue
            b, p = by.get((label, n), {}), by.get((label, n + "+" + suffix), {})
            ops = lambda d: median([x and x.get("ops_per_sec") for x in d.values()])  # noqa: E731
            cpu = lambda d: median([cpu_per_job(x) for x in d.values()])  # noqa: E731
            ratios = [p[r]["ops_per_sec"] / b[r]["ops_per_sec"] for r in b
                      if r in p and b[r] and p[r] and b[r].get("ops_per_sec")]
            L.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                label, n, fmt(ops(b)), fmt(cpu(b), 1), n + "+" + suffix, fmt(ops(p)),
                fmt(cpu(p), 1), fmt(median(ratios), 3)))
    L.append("")
    if failures:
        for n, label, fail, cmd in failures:
            L.append("- **%s %s FAILED**: %s (reproduce: `%s`)" % (n, label, fail, shlex.join(cmd)))
    else:
        L.append("Every run passed its checks (each job reserved and deleted exactly once, "
                 "bodies intact, %s)." % ("the server empty afterwards" if check_empty
                                          else "the run's own tubes empty afterwards"))
    L.append("")
    return "\n".join(L)
