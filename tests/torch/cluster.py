"""A local gradstream cluster for the PyTorch tests: 2 shards, a coordinator
and N workers on loopback, the real binaries, driven through the CLI.

Every wait has a deadline; the processes are stopped (by their own pids) when
the `with` block ends, and their logs are printed when a test fails.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77  # ctest SKIP_RETURN_CODE


def require_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP: torch is not importable by %s (apt-get install python3-torch)" %
              sys.executable)
        sys.exit(SKIP)


class Cluster:
    def __init__(self, build, workers=2, shards=2, worker_flags=()):
        self.build = os.path.abspath(build)
        self.run_dir = tempfile.mkdtemp(prefix="gs-torch-test-")
        self.procs = []
        self.n_workers = 0
        self.worker_flags = list(worker_flags)
        try:
            self._start(workers, shards)
        except BaseException:
            self.dump_logs()
            self.close()  # nothing outlives a cluster that did not start
            raise

    def bin(self, rel):
        return os.path.join(self.build, rel)

    def _spawn(self, name, argv):
        log = open(os.path.join(self.run_dir, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.run_dir)
        self.procs.append((name, p))
        return p

    def _wait_file(self, path, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if os.path.exists(path) and os.path.getsize(path) > 0:
                return open(path).read().strip()
            time.sleep(0.05)
        raise TimeoutError("no %s within %ds" % (path, timeout))

    def _start(self, workers, shards):
        addrs = []
        for i in range(shards):
            pf = os.path.join(self.run_dir, "shard%d.port" % i)
            self._spawn("shard%d" % i, [self.bin("server/shard/gs_shard"), "--port=0",
                                        "--port_file=" + pf, "--shard_index=%d" % i,
                                        "--executor_threads=2"])
            addrs.append(pf)
        addrs = ["127.0.0.1:" + self._wait_file(pf) for pf in addrs]
        pf = os.path.join(self.run_dir, "coordinator.port")
        self._spawn("coordinator", [self.bin("server/coordinator/gs_coordinator"), "--port=0",
                                    "--port_file=" + pf, "--heartbeat_timeout=3s",
                                    "--start_grace=1s", "--shards=" + ",".join(addrs)])
        self.coordinator = "127.0.0.1:" + self._wait_file(pf)
        for _ in range(workers):
            self.add_worker()
        self.wait_for(lambda: len(self.cli_json("cluster").get("workers", [])) >= workers, 30,
                      "workers registering")

    def add_worker(self):
        self.n_workers += 1
        env = dict(os.environ, GRADSTREAM_COORDINATOR=self.coordinator)
        log = open(os.path.join(self.run_dir, "worker%d.log" % self.n_workers), "w")
        p = subprocess.Popen([self.bin("worker/trainer/gs_worker"), "--device=cpu",
                              "--name=torch-test-%d" % self.n_workers] + self.worker_flags,
                             stdout=log, stderr=subprocess.STDOUT, cwd=self.run_dir, env=env)
        self.procs.append(("worker%d" % self.n_workers, p))
        return p

    def cli(self, *args, check=True, timeout=60):
        r = subprocess.run([self.bin("cli/gradstream"), "--coordinator=" + self.coordinator] +
                           list(args), capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError("gradstream %s: exit %d\n%s%s" % (" ".join(args), r.returncode,
                                                                 r.stdout, r.stderr))
        return r

    def cli_json(self, *args):
        return json.loads(self.cli(*args, "--json").stdout)

    def submit(self, *flags):
        return self.cli_json("submit", *flags)["job_id"]

    def job(self, job_id):
        return self.cli_json("status", job_id)

    def wait_for(self, pred, timeout, what):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if pred():
                return
            time.sleep(0.2)
        raise TimeoutError("timed out after %ds waiting for %s" % (timeout, what))

    def wait_job(self, job_id, timeout=120):
        """Waits until the job ends; returns its status."""
        out = {}

        def ended():
            out["s"] = self.job(job_id)
            return out["s"].get("state") in ("COMPLETED", "FAILED", "CANCELLED")
        self.wait_for(ended, timeout, "job %s to end" % job_id)
        return out["s"]

    def dump_logs(self):
        for name, _ in self.procs:
            path = os.path.join(self.run_dir, name + ".log")
            try:
                text = open(path).read()
            except OSError:
                continue
            print("----- %s (last 40 lines)" % name)
            print("\n".join(text.splitlines()[-40:]))

    def close(self):
        for _, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.time() + 10
        for _, p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.dump_logs()
        self.close()
        return False


def main_args():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True, help="the CMake build folder")
    return ap.parse_args()


def package_without_cluster(build):
    """Makes the build's package importable as a single-process script sees
    it (no GRADSTREAM_AGENT): for tests of the package alone."""
    sys.path.insert(0, os.path.join(os.path.abspath(build), "python"))
    os.environ.pop("GRADSTREAM_AGENT", None)


def check(cond, what):
    if not cond:
        raise AssertionError(what)
