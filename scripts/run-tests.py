#!/usr/bin/env python3
"""Runs the workspace's tests as `cargo test` would, several test binaries
at a time, and ends with the line "tests: N passed, N failed".

Usage: scripts/run-tests.py CARGO_TEST_ARGS... [-- TEST_BINARY_ARGS...]
(scripts/test.sh calls it with --release --workspace --features ...).

It builds the tests (`cargo test --no-run` with the same arguments), then
runs each test binary, and the doc tests (`cargo test --doc`) when no
target was picked, in up to $STRATA_TEST_JOBS lanes (default 3: on two
cores three lanes keep the CPU busy while paced jobs and servers wait; a
fourth only slows them down). Every test runs: a failing binary does not
stop the others (unlike `cargo test`), and the exit code is 1 if any
test failed.

The end-to-end tests share the test servers. A test binary uses a server
when its source names the helper module that reaches it
(`strata_tests::cassandra`, `::kafka`, `::s3`, `::secure`: the secured
Cassandra and the broker's SASL_SSL listener); one that stops a server
(`server_script("kafka.sh", &["stop"])`) must have it alone, so it runs
only while no other binary that uses that server runs. A binary other
than an integration test is taken to use every server. Binaries that
stop a server start first; then the longest (by the previous run's
times, kept in $CARGO_TARGET_DIR/strata-test-times.json; without them,
binaries that use servers first), so that the run ends with short ones.

Each binary's output is printed whole when it ends, then a table of
times. A binary still running after $STRATA_TEST_TIMEOUT seconds (default
1200) is killed, with the processes it started, and counts as failed.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

SERVERS = ("cassandra", "cassandra-secure", "kafka", "s3")
USES = {
    "cassandra": ("cassandra",),
    "kafka": ("kafka",),
    "s3": ("s3",),
    "secure": ("cassandra-secure", "kafka"),
}
USE_RE = re.compile(r"\bstrata_tests::(?:\{[^}]*\}|(cassandra|kafka|s3|secure)\b)")
GROUP_RE = re.compile(r"\b(cassandra|kafka|s3|secure)\b")
STOP_RE = re.compile(r'server_script\(\s*"(\w+)\.sh",\s*&\[\s*"stop"\s*(,\s*"--secure")?')
RESULT_RE = re.compile(r"^test result: \w+\. (\d+) passed; (\d+) failed", re.M)
TARGET_FLAGS = {
    "--lib", "--bin", "--bins", "--example", "--examples", "--test",
    "--tests", "--bench", "--benches", "--all-targets", "--doc",
}


class Job:
    """One test binary (or the doc tests) and what it needs."""

    def __init__(self, name, command, cwd, uses, stops, env=None):
        self.name, self.command, self.cwd, self.env = name, command, cwd, env or {}
        self.uses, self.stops = set(uses), set(stops)
        self.proc = self.started = self.output = None
        self.elapsed = self.cpu = self.written_mb = 0.0
        self.timed_out = False

    def conflicts(self, running):
        """Whether it cannot start beside the `running` jobs."""
        return any(
            (self.stops & other.uses) or (other.stops & self.uses) for other in running
        )


def split_args(argv):
    """(cargo arguments, test binary arguments), split at the first `--`."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def servers_of(source):
    """(servers used, servers stopped) by a test binary, from its source."""
    uses = set()
    for match in USE_RE.finditer(source):
        names = [match.group(1)] if match.group(1) else GROUP_RE.findall(match.group(0))
        for name in names:
            uses.update(USES[name])
    stops = set()
    for script, secure in STOP_RE.findall(source):
        stops.add("cassandra-secure" if script == "cassandra" and secure else script)
    return uses | stops, stops


def build(cargo_args):
    """Builds the tests; returns [(kind, name, executable, package dir, source)]."""
    command = ["cargo", "test", *cargo_args, "--no-run", "--message-format=json-render-diagnostics"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    found = []
    for line in proc.stdout:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message["profile"]["test"]:
            continue
        target = message["target"]
        found.append((
            target["kind"][0], target["name"], message["executable"],
            str(Path(message["manifest_path"]).parent), target["src_path"],
        ))
    if proc.wait() != 0:
        print(f"run-tests: `{' '.join(command)}` failed")
        print("tests: 0 passed, 1 failed (the tests did not build)")
        sys.exit(1)
    return sorted(found, key=lambda f: (f[3], f[0], f[1]))


def jobs_of(cargo_args, test_args):
    """The jobs: every test binary cargo built, and the doc tests."""
    jobs = []
    for kind, _name, exe, package, src in build(cargo_args):
        label = os.path.relpath(src)
        if kind == "test":
            uses, stops = servers_of(Path(src).read_text())
        else:
            uses, stops = set(SERVERS), set()
            label = f"unittests {label}"
        env = {"CARGO_MANIFEST_DIR": package}
        jobs.append(Job(f"{label} ({exe})", [exe, *test_args], package, uses, stops, env))
    if not TARGET_FLAGS & set(cargo_args):
        command = ["cargo", "test", *cargo_args, "--doc", "--", *test_args]
        jobs.append(Job("doc tests", command, None, SERVERS, ()))
    return jobs


def order(jobs, times):
    """Binaries that stop a server first, then the longest."""
    def key(job):
        known = times.get(label(job))
        guess = known if known is not None else (1e6 if job.uses else 1e5)
        return (not job.stops, -guess)
    return sorted(jobs, key=key)


def descendants(pid):
    """The processes `pid` started, and theirs (servers a script started
    have left the tree: they are the init process's)."""
    children = {}
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def kill_tree(pid):
    """SIGKILLs `pid` and the processes it started."""
    for p in [pid, *descendants(pid)]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start(job):
    """Starts `job`, its output read into `job.chunks` as it comes."""
    job.started = time.monotonic()
    job.proc = subprocess.Popen(
        job.command, cwd=job.cwd, env={**os.environ, **job.env},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
    )
    chunks = []
    job.reader = threading.Thread(target=lambda: chunks.extend(job.proc.stdout), daemon=True)
    job.reader.start()
    job.chunks = chunks


def finished(job, timeout):
    """Whether `job` has ended (killing it once past `timeout` seconds);
    notes its CPU time, its own and that of the processes it waited for."""
    pid, status, usage = os.wait4(job.proc.pid, os.WNOHANG)
    if pid == 0:
        if time.monotonic() - job.started < timeout:
            return False
        job.timed_out = True
        kill_tree(job.proc.pid)
        pid, status, usage = os.wait4(job.proc.pid, 0)
    job.proc.returncode = os.waitstatus_to_exitcode(status)
    job.cpu = usage.ru_utime + usage.ru_stime
    job.written_mb = usage.ru_oublock * 512 / 1e6
    job.reader.join()
    job.elapsed = time.monotonic() - job.started
    job.output = "".join(job.chunks)
    if job.timed_out:
        job.output += f"\nrun-tests: killed after {timeout} s\n"
    return True


def counts(job):
    """(passed, failed) of a finished job; a binary that failed without
    a result line (a crash, a time-out) counts one failure."""
    results = RESULT_RE.findall(job.output)
    passed = sum(int(p) for p, _ in results)
    failed = sum(int(f) for _, f in results)
    if job.proc.returncode != 0 and failed == 0:
        failed = 1
    return passed, failed


def run(jobs, lanes, timeout):
    """Runs `jobs` (in order, as lanes and servers allow); returns them as they ended."""
    waiting, running, done = list(jobs), [], []
    while waiting or running:
        for job in [j for j in running if finished(j, timeout)]:
            running.remove(job)
            done.append(job)
            print(f"     Running {job.name}: {job.elapsed:.1f} s\n{job.output}", flush=True)
        blocked = set()
        for job in list(waiting):
            if len(running) >= lanes:
                break
            # A binary waiting to stop a server holds back new users of it.
            if not job.conflicts(running) and not (job.uses & blocked):
                waiting.remove(job)
                start(job)
                running.append(job)
            blocked |= job.stops
        time.sleep(0.1)
    return done


def label(job):
    """A job's name without its executable's path."""
    return job.name.split(" (")[0]


def report(done, started, lanes):
    """Prints the table of times and the closing line; returns whether all passed."""
    print("run-tests: per test binary: started (s into the run), wall s, CPU s and MB"
          " written (its own and its processes')")
    for job in sorted(done, key=lambda j: -j.elapsed):
        print(f"  {job.started - started:6.0f} {job.elapsed:7.1f} {job.cpu:7.1f}"
              f" {job.written_mb:7.0f}  {label(job)}")
    wall, cpu = time.monotonic() - started, sum(j.cpu for j in done)
    print(f"run-tests: {len(done)} binaries in {wall:.0f} s on {lanes} lanes, {cpu:.0f} s of CPU")
    passed = sum(counts(j)[0] for j in done)
    failed = sum(counts(j)[1] for j in done)
    for job in done:
        if counts(job)[1]:
            print(f"run-tests: FAILED: {job.name}")
    print(f"tests: {passed} passed, {failed} failed")
    return failed == 0


def main():
    cargo_args, test_args = split_args(sys.argv[1:])
    times_file = Path(os.environ.get("CARGO_TARGET_DIR", "target")) / "strata-test-times.json"
    try:
        times = json.loads(times_file.read_text())
    except (OSError, ValueError):
        times = {}
    lanes = int(os.environ.get("STRATA_TEST_JOBS", "3"))
    timeout = float(os.environ.get("STRATA_TEST_TIMEOUT", "1200"))
    jobs = order(jobs_of(cargo_args, test_args), times)
    started = time.monotonic()
    try:
        done = run(jobs, lanes, timeout)
    except KeyboardInterrupt:
        # The test binaries share this process group: the interrupt
        # stopped them too.
        print("run-tests: interrupted; no closing line", file=sys.stderr)
        sys.exit(130)
    times.update({label(j): round(j.elapsed, 1) for j in done})
    try:
        times_file.write_text(json.dumps(times, indent=1, sort_keys=True))
    except OSError:
        pass
    sys.exit(0 if report(done, started, lanes) else 1)


if __name__ == "__main__":
    main()
