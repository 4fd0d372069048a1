"""A private shaped network for bench/tta/run.py: a "switch" namespace with a
Linux bridge, and one namespace per process joined to it by a veth pair
whose two ends are both limited by tc's token bucket (tbf) to the rate, so
what a node sends and what it receives are each shaped. Needs root.

Nothing on the host is touched: the veth pairs are created and moved into
the namespaces at once, the addresses (10.231.0.0/24) exist only inside
them, and close() deletes the namespaces (which deletes their veth ends and
the peers with them) after killing, by pid, whatever still runs in them.
"""

import json
import os
import signal
import subprocess

SUBNET = "10.231.0"


def sh(*argv, check=True):
    r = subprocess.run(argv, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(argv), r.returncode, r.stderr.strip()))
    return r.stdout


class Network:
    """Nodes named by the caller (e.g. "a", "b"), each with its namespace,
    its veth inside it (`dev`) and its address (`ip`)."""

    def __init__(self, nodes, rate):
        self.tag = "%d" % (os.getpid() % 100000)
        self.switch = "tta_sw_" + self.tag
        self.rate = rate
        self.nodes = {}
        self._made = []
        try:
            self._build(nodes)
        except BaseException:
            self.close()
            raise

    def _build(self, nodes):
        sh("ip", "netns", "add", self.switch)
        self._made.append(self.switch)
        sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.switch, "link", "set", "br0", "up")
        for i, name in enumerate(nodes, start=1):
            ns = "tta_%s_%s" % (name, self.tag)
            dev, port = "ttn%s%s" % (name, self.tag), "tts%s%s" % (name, self.tag)
            sh("ip", "netns", "add", ns)
            self._made.append(ns)
            # Created inside the switch namespace, so the host never holds either end.
            sh("ip", "-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", dev,
               "netns", ns)
            sh("ip", "-n", self.switch, "link", "set", port, "master", "br0", "up")
            ip = "%s.%d" % (SUBNET, i)
            sh("ip", "-n", ns, "addr", "add", ip + "/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "link", "set", dev, "up")
            if self.rate != "none":
                # The tbf line bench/netns_shaped.sh validated; on both ends: the
                # node's egress is its upload, the switch port's egress its download.
                for where, d in ((ns, dev), (self.switch, port)):
                    sh("ip", "netns", "exec", where, "tc", "qdisc", "add", "dev", d, "root", "tbf",
                       "rate", self.rate, "burst", "512kb", "latency", "50ms")
            self.nodes[name] = {"ns": ns, "dev": dev, "port": port, "ip": ip}

    def exec_argv(self, node, argv):
        """argv run in `node`'s namespace (`ip netns exec` execs it: the
        child's pid is the program's)."""
        return ["ip", "netns", "exec", self.nodes[node]["ns"]] + list(argv)

    def counters(self):
        """{node: (tx_bytes, rx_bytes)} as the node sees them, read from the
        switch ports in one call (a port's rx is its node's tx)."""
        links = json.loads(sh("ip", "-n", self.switch, "-s", "-j", "link", "show"))
        by_port = {l["ifname"]: l["stats64"] for l in links if "stats64" in l}
        return {name: (by_port[n["port"]]["rx"]["bytes"], by_port[n["port"]]["tx"]["bytes"])
                for name, n in self.nodes.items()}

    def kill_all(self):
        """SIGKILL, by pid, every process still in one of the namespaces."""
        for ns in self._made:
            for pid in sh("ip", "netns", "pids", ns, check=False).split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass

    def close(self):
        self.kill_all()
        for ns in reversed(self._made):
            sh("ip", "netns", "del", ns, check=False)
        self._made = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
