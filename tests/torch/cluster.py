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
    """`link`: a ShapedLink (below) to put the shards and the coordinator on
    one side and the workers on the other; None = everything on loopback.
    `shard_rate`: bytes/s of each connection from a shard (a SlowProxy in
    front of every shard; no root needed); None = not limited."""

    def __init__(self, build, workers=2, shards=2, worker_flags=(), link=None, shard_flags=(),
                 shard_rate=None):
        self.build = os.path.abspath(build)
        self.run_dir = tempfile.mkdtemp(prefix="gs-torch-test-")
        self.procs = []
        self.n_workers = 0
        self.worker_flags = list(worker_flags)
        self.shard_flags = list(shard_flags)
        self.link = link
        self.shard_rate = shard_rate
        self.proxies = []
        self.host = link.server_ip if link else "127.0.0.1"
        self.argv = {}   # process name -> (argv, side), for restart()
        self.ports = {}  # process name -> the port it bound
        try:
            self._start(workers, shards)
        except BaseException:
            self.dump_logs()
            self.close()  # nothing outlives a cluster that did not start
            raise

    def bin(self, rel):
        return os.path.join(self.build, rel)

    def _in(self, side, argv):
        """argv run in the link's namespace for `side` ("server"/"worker")."""
        if self.link is None:
            return argv
        return ["ip", "netns", "exec", getattr(self.link, side + "_ns")] + argv

    def _spawn(self, name, argv, side="server"):
        self.argv[name] = (argv, side)
        log = open(os.path.join(self.run_dir, name + ".log"), "a")
        p = subprocess.Popen(self._in(side, argv), stdout=log, stderr=subprocess.STDOUT,
                             cwd=self.run_dir)
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
            mf = os.path.join(self.run_dir, "shard%d.metrics" % i)
            self._spawn("shard%d" % i, [self.bin("server/shard/gs_shard"), "--port=0",
                                        "--port_file=" + pf, "--shard_index=%d" % i,
                                        "--executor_threads=2", "--metrics_port=0",
                                        "--metrics_port_file=" + mf,
                                        "--checkpoint_dir=" + os.path.join(self.run_dir,
                                                                           "ckpt%d" % i)] +
                        self.shard_flags)
            addrs.append(pf)
        for i, pf in enumerate(addrs):
            self.ports["shard%d" % i] = self._wait_file(pf)
        if self.shard_rate:
            self.proxies = [SlowProxy(int(self.ports["shard%d" % i]), self.shard_rate)
                            for i in range(shards)]
            addrs = ["127.0.0.1:%d" % p.port for p in self.proxies]
        else:
            addrs = ["%s:%s" % (self.host, self.ports["shard%d" % i]) for i in range(shards)]
        self.shard_metrics_ports = [
            self._wait_file(os.path.join(self.run_dir, "shard%d.metrics" % i))
            for i in range(shards)]
        pf = os.path.join(self.run_dir, "coordinator.port")
        self._spawn("coordinator", [self.bin("server/coordinator/gs_coordinator"), "--port=0",
                                    "--port_file=" + pf, "--heartbeat_timeout=3s",
                                    "--start_grace=1s", "--shards=" + ",".join(addrs),
                                    "--state_file=" + os.path.join(self.run_dir,
                                                                   "coordinator.state")])
        self.ports["coordinator"] = self._wait_file(pf)
        self.coordinator = "%s:%s" % (self.host, self.ports["coordinator"])
        for _ in range(workers):
            self.add_worker()
        self.wait_for(lambda: len(self.cli_json("cluster").get("workers", [])) >= workers, 30,
                      "workers registering")

    def add_worker(self):
        self.n_workers += 1
        env = dict(os.environ, GRADSTREAM_COORDINATOR=self.coordinator)
        log = open(os.path.join(self.run_dir, "worker%d.log" % self.n_workers), "w")
        argv = [self.bin("worker/trainer/gs_worker"), "--device=cpu",
                "--name=torch-test-%d" % self.n_workers] + self.worker_flags
        self.argv["worker%d" % self.n_workers] = (argv, "worker")
        p = subprocess.Popen(self._in("worker", argv), stdout=log, stderr=subprocess.STDOUT,
                             cwd=self.run_dir, env=env)
        self.procs.append(("worker%d" % self.n_workers, p))
        return p

    def process(self, name):
        """The newest process started as `name` ("shard0", "coordinator", "worker2")."""
        return [p for n, p in self.procs if n == name][-1]

    def kill(self, name, sig=signal.SIGKILL, timeout=30):
        """Sends `sig` to process `name` and waits for it to exit."""
        p = self.process(name)
        p.send_signal(sig)
        p.wait(timeout)

    def restart(self, name):
        """Starts process `name` again with its arguments, on the port it had."""
        argv, side = self.argv[name]
        if name in self.ports:
            argv = ["--port=" + self.ports[name] if a == "--port=0" else a for a in argv]
        for a in argv:  # a fresh port file, read once the process serves again
            if a.startswith("--port_file="):
                try:
                    os.unlink(a.split("=", 1)[1])
                except FileNotFoundError:
                    pass
        self._spawn(name, argv, side)
        for a in argv:
            if a.startswith("--port_file="):
                self._wait_file(a.split("=", 1)[1])

    def cli(self, *args, check=True, timeout=60):
        r = subprocess.run(self._in("server", [self.bin("cli/gradstream"),
                                               "--coordinator=" + self.coordinator] + list(args)),
                           capture_output=True, text=True, timeout=timeout)
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

    def shard_metric(self, name):
        """The sum over the shards of Prometheus series `name` (all labels)."""
        total = 0.0
        for port in self.shard_metrics_ports:
            fetch = ("import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
                     "sys.argv[1], timeout=10).read().decode())")
            r = subprocess.run(self._in("server", [sys.executable, "-c", fetch,
                                                   "http://127.0.0.1:%s/metrics" % port]),
                               capture_output=True, text=True, timeout=20)
            for line in r.stdout.splitlines():
                if line.startswith(name + "{") or line.startswith(name + " "):
                    total += float(line.rsplit(" ", 1)[1])
        return total

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
        for proxy in self.proxies:
            proxy.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.dump_logs()
        self.close()
        return False


class SlowProxy:
    """A loopback TCP forwarder to 127.0.0.1:`port` that passes what the
    server sends at `rate` bytes/s per connection (what the client sends is
    not limited): a slow link without root, for tests that need a pull to
    arrive tensor by tensor."""

    def __init__(self, port, rate):
        import socket
        import threading
        self._upstream, self._rate = port, float(rate)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._closed = False
        self._socks = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self):
        import socket
        import threading
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self._upstream), timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socks += [client, server]
            threading.Thread(target=self._pump, args=(client, server, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, self._rate),
                             daemon=True).start()

    @staticmethod
    def _pump(src, dst, rate):
        free_at = 0.0  # when the link has sent everything it was given
        try:
            while True:
                data = src.recv(4096)
                if not data:
                    break
                if rate:  # store and forward, as a link of `rate` bytes/s would
                    now = time.monotonic()
                    free_at = max(now, free_at) + len(data) / rate
                    time.sleep(free_at - now)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(2)
            except OSError:
                pass

    def close(self):
        self._closed = True
        for s in [self._listener] + self._socks:
            try:
                s.close()
            except OSError:
                pass


class ShapedLink:
    """Two network namespaces joined by a veth pair that tc's token bucket
    limits to `rate` in both directions (as bench/netns_shaped.sh): the
    cluster's servers on one side, its workers on the other. Needs root and
    iproute2; `missing()` says whether this machine can. Everything it
    creates is removed by close(); the host's own interfaces are not
    touched."""

    def __init__(self, rate):
        tag = "%d" % os.getpid()
        self.server_ns, self.worker_ns = "gs_ts_" + tag, "gs_tw_" + tag
        self.server_ip, self.worker_ip = "10.213.78.1", "10.213.78.2"
        vs, vw = "gsts" + tag, "gstw" + tag
        self._cmds = [
            ["ip", "netns", "add", self.server_ns], ["ip", "netns", "add", self.worker_ns],
            ["ip", "link", "add", vs, "type", "veth", "peer", "name", vw],
            ["ip", "link", "set", vs, "netns", self.server_ns],
            ["ip", "link", "set", vw, "netns", self.worker_ns],
            ["ip", "-n", self.server_ns, "addr", "add", self.server_ip + "/30", "dev", vs],
            ["ip", "-n", self.worker_ns, "addr", "add", self.worker_ip + "/30", "dev", vw]]
        for ns, dev in ((self.server_ns, vs), (self.worker_ns, vw)):
            self._cmds += [["ip", "-n", ns, "link", "set", "lo", "up"],
                           ["ip", "-n", ns, "link", "set", dev, "up"],
                           ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root",
                            "tbf", "rate", rate, "burst", "64kb", "latency", "400ms"]]
        try:
            for c in self._cmds:
                subprocess.run(c, check=True, capture_output=True, timeout=30)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def missing():
        """None when this machine can build the link, else one line saying
        what is missing (scripts/netns_check.sh tries it on a throwaway
        namespace)."""
        check = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                             "netns_check.sh")
        r = subprocess.run([check], capture_output=True, text=True, timeout=120)
        return None if r.returncode == 0 else (r.stdout + r.stderr).strip()

    def close(self):
        for ns in (self.worker_ns, self.server_ns):  # removes the veth pair too
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def main_args(device=False):
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True, help="the CMake build folder")
    if device:
        ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="where the job's model lives")
    return ap.parse_args()


def package_without_cluster(build):
    """Makes the build's package importable as a single-process script sees
    it (no GRADSTREAM_AGENT): for tests of the package alone."""
    sys.path.insert(0, os.path.join(os.path.abspath(build), "python"))
    os.environ.pop("GRADSTREAM_AGENT", None)


def check_shares(log, n, global_batch):
    """Checks the shares gs.shard handed out (GRADSTREAM_SHARE_LOG = `log`)
    for a dataset of `n` samples: in every complete pass of every membership
    epoch the ranks' shares are disjoint and cover the dataset, and every
    clock's pieces add up to `global_batch` whatever the world size. True when
    all hold and at least one complete pass was checked; prints each pass."""
    import collections
    shares = collections.defaultdict(dict)
    for line in open(log):
        r = json.loads(line)
        shares[(r["epoch"], r["pass"])][r["rank"]] = (r["world_size"], r["indices"],
                                                      r["batches"])
    ok = True
    complete_passes = 0
    for (epoch, pass_no), ranks in sorted(shares.items()):
        world = {w for w, _, _ in ranks.values()}
        sets = [set(idx) for _, idx, _ in ranks.values()]
        per_clock = [sum(b) for b in zip(*[bs for _, _, bs in ranks.values()])]
        same_clocks = len({len(bs) for _, _, bs in ranks.values()}) == 1
        kept = same_clocks and per_clock == [global_batch] * (n // global_batch)
        union = set().union(*sets)
        disjoint = sum(len(s) for s in sets) == len(union)
        complete = len(ranks) == max(world) and len(world) == 1
        covers = union == set(range(n))
        print("epoch %d pass %d: %d ranks of %s, disjoint %s, covers %s, global batch "
              "%d per clock %s" % (epoch, pass_no, len(ranks), sorted(world), disjoint, covers,
                                   global_batch, kept))
        if complete:
            complete_passes += 1
            ok = ok and disjoint and covers and kept
        elif not disjoint:
            ok = False
    # With no complete pass (an empty or truncated share log) nothing was checked.
    print("complete passes checked: %d" % complete_passes)
    return ok and complete_passes > 0


def check(cond, what):
    if not cond:
        raise AssertionError(what)
