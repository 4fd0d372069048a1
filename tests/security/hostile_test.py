#!/usr/bin/python3
"""Hostile and buggy members of a job against a real gs_shard on loopback.

A second client implementation of proto/ps.proto (Python, Debian's
python3-grpcio; stubs generated from proto/ at test time into --work_dir by
python3-grpc-tools). Each case sends what a misbehaving member of a job
could send (it holds a valid worker token of that job), and asserts
  - the reply: the Ack / PullAnswer / StreamError code and the stream's status,
  - that the shard stays alive and responsive: a good client's step in
    another job (push, ClockAdvance, pull) still works and is fast,
  - that the parameters of the attacked job are unchanged (pulled and
    compared) unless the case says how they change.
Cases: clocks far ahead, non-finite pushes, parked-pull caps, Hello as
another member, messages after Leave, and the malformed-frame classes of
tests/security/security_test.cc and server/shard/rpc/session_fuzzer.cc.

  hostile_test.py --shard=BIN --proto_dir=DIR --work_dir=DIR [-k NAME]
Exit status 0 when every case passes. Bounded: well under 2 minutes.
"""

import argparse
import hashlib
import hmac
import math
import os
import queue
import secrets
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import grpc

METHOD = "/gradstream.v1.ParameterServer/Session"
OK, CANCELLED, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND = 0, 1, 3, 4, 5
PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION = 7, 8, 9
OUT_OF_RANGE, UNAUTHENTICATED = 11, 16
FAR = 1 << 62
FLT_MAX = 3.4028234663852886e38
N = 1024  # elements per chunk
MAX_PULLS_PER_STREAM = 16  # StreamPulls::kMaxWaiting in server/shard/stream_pulls.h
PULL_TIMEOUT_MS = 3000  # the shard's --pull_timeout_ms here
GOOD_STEP_LIMIT_S = 0.5  # a good client's step while (or after) the shard is attacked

JOB_TOKEN_ONLY = False  # --job_token_only: members present the job token (older shards)
pb = None  # ps_pb2, generated at start
pbg = None  # ps_pb2_grpc


def generate_stubs(proto_dir, work_dir):
    global pb, pbg
    os.makedirs(work_dir, exist_ok=True)
    from grpc_tools import protoc
    rc = protoc.main(["protoc", "-I" + proto_dir, "--python_out=" + work_dir,
                      "--grpc_python_out=" + work_dir,
                      os.path.join(proto_dir, "ps.proto"), os.path.join(proto_dir, "job.proto")])
    if rc != 0:
        sys.exit("protoc failed")
    sys.path.insert(0, work_dir)
    import ps_pb2
    import ps_pb2_grpc
    pb, pbg = ps_pb2, ps_pb2_grpc


def worker_token(job_token, job_id, worker, incarnation):
    """common/rpc/worker_token.h [worker tokens], computed independently."""
    msg = b"%s\x00%d\x00%d" % (job_id.encode(), worker, incarnation)
    return "w1." + hmac.new(job_token.encode(), msg, hashlib.sha256).hexdigest()


def floats(values):
    return struct.pack("<%df" % len(values), *values)


def unfloats(data):
    return list(struct.unpack("<%df" % (len(data) // 4), data))


class Stream:
    """One Session stream on raw bytes: what is sent is exactly what we write."""

    END = object()

    def __init__(self, channel, token):
        self._q = queue.Queue()
        self._out = queue.Queue()
        call = channel.stream_stream(METHOD, request_serializer=None, response_deserializer=None)
        md = (("authorization", "Bearer " + token),) if token else ()
        self.call = call(self._requests(), metadata=md)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _requests(self):
        while True:
            item = self._q.get()
            if item is None:
                return
            yield item

    def _read(self):
        try:
            for raw in self.call:
                self._out.put(pb.ServerMessage.FromString(raw))
        except grpc.RpcError:
            pass
        self._out.put(Stream.END)

    def send(self, msg):
        self._q.put(msg if isinstance(msg, bytes) else msg.SerializeToString())

    def recv(self, timeout=5.0):
        try:
            return self._out.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no answer within %.1f s" % timeout)

    def half_close(self):
        self._q.put(None)

    def cancel(self):
        self.call.cancel()
        self._q.put(None)

    def status(self, timeout=5.0):
        """Waits for the end of the stream: (code value, details)."""
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise AssertionError("stream did not end")
            if self.recv(left) is Stream.END:
                break
        return self.call.code().value[0], self.call.details()

    # --- protocol helpers
    def hello(self, job, worker, incarnation=1, expect_ok=True, protocol=None):
        m = pb.WorkerMessage()
        m.hello.job_id, m.hello.worker_id, m.hello.incarnation = job, worker, incarnation
        m.hello.protocol = pb.SESSION_PROTOCOL_ADVANCE if protocol is None else protocol
        self.send(m)
        r = self.recv()
        if expect_ok:
            check(r is not Stream.END and r.HasField("hello_ack"), "HelloAck", r)
        return r

    def push(self, seq, chunk, clock, values=None, codec=0, scale=0.0, payload=None, n=N):
        """A Push of one chunk."""
        return self.push_bucket(seq, clock, [pushed(chunk, values, codec, scale, payload, n)])

    def push_bucket(self, seq, clock, chunks):
        """A Push of several chunks (pushed() builds each)."""
        m = pb.WorkerMessage()
        m.push.seq, m.push.clock = seq, clock
        m.push.chunks.extend(chunks)
        self.send(m)
        return self.ack(seq)

    def ack(self, seq):
        r = self.recv()
        check(r is not Stream.END and r.HasField("ack"), "an Ack", r)
        check(r.ack.seq == seq, "Ack of seq %d" % seq, r)
        return r.ack

    def init(self, seq, chunk, values):
        m = pb.WorkerMessage()
        m.init.seq, m.init.chunk_id, m.init.values = seq, chunk, floats(values)
        self.send(m)
        return self.ack(seq)

    def clock(self, c):
        m = pb.WorkerMessage()
        m.clock.clock = c
        self.send(m)

    def pull_request(self, rid, clock, timeout_ms=0, chunks=()):
        m = pb.WorkerMessage()
        m.pull.request_id, m.pull.clock, m.pull.timeout_ms = rid, clock, timeout_ms
        m.pull.chunk_ids.extend(chunks)
        self.send(m)

    def pull(self, rid, clock, timeout_ms=0, timeout=5.0):
        """Returns (code, {chunk: values})."""
        self.pull_request(rid, clock, timeout_ms)
        out = {}
        while True:
            r = self.recv(timeout)
            check(r is not Stream.END and r.HasField("pull"), "a PullAnswer", r)
            if r.pull.request_id != rid:
                continue
            if r.pull.code != 0:
                return r.pull.code, r.pull.message
            for c in r.pull.chunks:
                out[c.chunk_id] = unfloats(c.values)
            if r.pull.last:
                return 0, out

    def expect_stream_error(self, code, what, status_code=OK):
        """A StreamError with `code`, then the stream ends with `status_code`
        (OK: the StreamError says why; INVALID_ARGUMENT for a frame that is
        not a WorkerMessage)."""
        r = self.recv()
        check(r is not Stream.END and r.HasField("error"), "StreamError for " + what, r)
        check(r.error.code == code, "%s: StreamError code %d" % (what, code), r.error)
        status, details = self.status()
        check(status == status_code,
              "%s: stream status %d, got %d (%s)" % (what, status_code, status, details))
        return r.error.message


class CaseFailed(AssertionError):
    pass


def pushed(chunk, values=None, codec=0, scale=0.0, payload=None, n=N):
    """One chunk of a Push: fp32 `values`, or a `payload` in `codec`."""
    c = pb.PushedChunk(chunk_id=chunk)
    c.chunk.codec, c.chunk.num_elems, c.chunk.scale = codec, n, scale
    c.chunk.payload = payload if payload is not None else floats(values)
    return c


def check(cond, what, got=None):
    if not cond:
        raise CaseFailed("expected %s%s" % (what, "" if got is None else ", got: %r" % (got,)))


class Shard:
    def __init__(self, binary, work_dir):
        self.dir = tempfile.mkdtemp(prefix="hostile_shard_", dir=work_dir)
        self.cluster_token = secrets.token_hex(16)
        with open(os.path.join(self.dir, "token"), "w") as f:
            f.write(self.cluster_token)
        port_file = os.path.join(self.dir, "port")
        self.log = open(os.path.join(self.dir, "shard.log"), "w")
        self.proc = subprocess.Popen(
            [binary, "--port=0", "--address=127.0.0.1", "--port_file=" + port_file,
             "--auth_token_file=" + os.path.join(self.dir, "token"), "--executor_threads=2",
             "--pull_timeout_ms=%d" % PULL_TIMEOUT_MS, "--max_pending_rounds=4"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while not os.path.exists(port_file):
            if self.proc.poll() is not None or time.time() > deadline:
                sys.exit("gs_shard did not start; log in " + self.dir)
            time.sleep(0.02)
        self.port = int(open(port_file).read().strip())
        self.channel = grpc.insecure_channel(
            "127.0.0.1:%d" % self.port,
            options=[("grpc.max_send_message_length", 64 << 20),
                     ("grpc.max_receive_message_length", 64 << 20)])
        self.stub = pbg.ParameterServerStub(self.channel)

    def control_md(self):
        return (("authorization", "Bearer " + self.cluster_token),)

    def create_job(self, job, mode, members, optimizer="sgd", lr=0.1, staleness=0, chunks=1):
        token = secrets.token_hex(16)
        req = pb.CreateJobRequest(job_id=job, job_token=token)
        req.optimizer.type, req.optimizer.learning_rate = optimizer, lr
        req.consistency.mode, req.consistency.staleness = mode, staleness
        for c in range(chunks):
            req.chunks.add(chunk_id=c, num_elems=N)
        req.membership.epoch, req.membership.effective_clock = 1, 0
        req.membership.worker_ids.extend(members)
        self.stub.CreateJob(req, metadata=self.control_md(), timeout=10)
        return token

    def stats(self, job):
        return self.stub.GetStats(pb.StatsRequest(job_id=job), metadata=self.control_md(),
                                  timeout=5)

    def alive(self):
        return self.proc.poll() is None

    def cpu_seconds(self):
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise CaseFailed("gs_shard did not stop within 10 s of SIGTERM")
        self.log.close()


SYNC, BOUNDED, ASYNC = 0, 1, 2


class Job:
    """A job on the shard with an initialized chunk and an observer stream."""

    def __init__(self, shard, name, mode, members, staleness=0, optimizer="sgd", lr=0.1,
                 chunks=1):
        self.shard, self.name, self.members = shard, name, members
        self.token = shard.create_job(name, mode, members, optimizer=optimizer, lr=lr,
                                      staleness=staleness, chunks=chunks)
        self.init_values = [0.5 + 0.001 * i for i in range(N)]
        s = self.stream(members[0])
        for c in range(chunks):
            check(s.init(1 + c, c, self.init_values).code == OK, "InitChunk accepted")
        s.half_close()
        check(s.status()[0] == OK, "clean close after Init")
        self.observer = Stream(shard.channel, self.token)  # the job token: coordinator's trust
        self.observer.hello(name, 999999)
        self._rid = 0

    def wtoken(self, worker, incarnation=1):
        if JOB_TOKEN_ONLY:
            return self.token
        return worker_token(self.token, self.name, worker, incarnation)

    def stream(self, worker, incarnation=1):
        s = Stream(self.shard.channel, self.wtoken(worker, incarnation))
        s.hello(self.name, worker, incarnation)
        return s

    def params(self):
        """Chunk 0's values."""
        return self.all_params()[0]

    def all_params(self):
        """{chunk: values}."""
        self._rid += 1
        code, chunks = self.observer.pull(self._rid, 0)
        check(code == OK, "observer pull OK", chunks)
        return chunks


class GoodClient:
    """A well-behaved member of its own sync job: push, ClockAdvance, pull."""

    def __init__(self, shard):
        self.job = Job(shard, "good", SYNC, [1])
        self.s = self.job.stream(1)
        self.clock = 0
        self.seq = 10

    def step(self):
        t0 = time.time()
        self.seq += 1
        a = self.s.push(self.seq, 0, self.clock, [0.01] * N)
        check(a.code == OK and not a.duplicate, "good push applied", a)
        self.clock += 1
        self.s.clock(self.clock)
        code, chunks = self.s.pull(self.seq, self.clock)
        check(code == OK, "good pull answered", chunks)
        took = time.time() - t0
        check(took < GOOD_STEP_LIMIT_S, "a good step under %.1f s" % GOOD_STEP_LIMIT_S, took)
        return took


# ---------------------------------------------------------------- cases


def park_pulls(job, n_streams, per_stream):
    """Opens n_streams streams, alternating members 5 and 6, each parking
    per_stream pulls for clock 1 with the longest timeout a client can ask."""
    streams = []
    for i in range(n_streams):
        st = job.stream(5 + i % 2)
        for rid in range(per_stream):
            st.pull_request(rid, 1, timeout_ms=0xFFFFFFFF)
        streams.append(st)
    return streams


def case_clock_advance_far_future(sh, good):
    """ClockAdvance{2^62} from the only member of a sync job, alone and
    riding in a Push (WorkerMessage.advance)."""
    job = Job(sh, "wedge", SYNC, [5])
    before = job.params()
    streams = [job.stream(5, 1) for _ in range(2)]  # two streams: both executor threads
    for s in streams:
        s.clock(FAR)
    for s in streams:
        msg = s.expect_stream_error(OUT_OF_RANGE, "ClockAdvance 2^62")
        check(str(FAR) in msg and "window" in msg, "message naming the clock and window", msg)
    s = job.stream(5, 1)
    m = pb.WorkerMessage()
    m.push.seq, m.push.clock, m.advance = 1, 0, FAR
    m.push.chunks.extend([pushed(0, [0.1] * N)])
    s.send(m)
    msg = s.expect_stream_error(OUT_OF_RANGE, "a Push riding advance 2^62")
    check(str(FAR) in msg and "window" in msg, "message naming the clock and window", msg)
    good.step()
    check(job.params() == before, "parameters unchanged")
    check(sh.stats("wedge").min_clock == 0, "the member's clock unchanged")
    # Its next clock is still fine, and the job still works.
    s = job.stream(5, 1)
    check(s.push(1, 0, 0, [0.1] * N).code == OK, "a normal push after it")
    s.clock(1)
    code, _ = s.pull(1, 1)
    check(code == OK, "a normal pull after it")


def case_pull_and_push_far_future(sh, good):
    """pull and push clocks beyond the window, in every mode."""
    for mode, name in ((SYNC, "farpull-sync"), (BOUNDED, "farpull-ssp"), (ASYNC, "farpull-async")):
        job = Job(sh, name, mode, [5, 6], staleness=2)
        before = job.params()
        s = job.stream(5)
        code, msg = s.pull(1, FAR, timeout_ms=0xFFFFFFFF, timeout=2)
        check(code == OUT_OF_RANGE, name + ": far pull refused at once", (code, msg))
        a = s.push(2, 0, FAR, [1.0] * N)
        want = RESOURCE_EXHAUSTED if mode == SYNC else OUT_OF_RANGE
        check(a.code == want, name + ": far push refused", a)
        check(job.params() == before, name + ": parameters unchanged")
        good.step()


def case_overflow_async(sh, good):
    """25 async twobit pushes with scale FLT_MAX, every code +1."""
    for mode, name in ((ASYNC, "nan-async"), (BOUNDED, "nan-ssp"), (SYNC, "nan-sync")):
        job = Job(sh, name, mode, [5], staleness=100, lr=1.0)
        s = job.stream(5)
        refused = None
        last = job.params()
        for clock in range(25):
            a = s.push(100 + clock, 0, clock, payload=b"\x55" * (N // 4), codec=1, scale=FLT_MAX)
            now = job.params()
            check(all(math.isfinite(x) for x in now), name + ": parameters finite", clock)
            if a.code != OK:
                refused = a
                check(now == last, name + ": refused push left the chunk as it was")
                break
            last = now
            s.clock(clock + 1)
        check(refused is not None and refused.code == INVALID_ARGUMENT,
              name + ": an overflowing push refused with INVALID_ARGUMENT", refused)
        check("non-finite" in refused.message, name + ": message says why", refused.message)
        good.step()


def case_far_push_then_normal(sh, good):
    """a normal push after a refused far-future one is applied."""
    job = Job(sh, "dup-async", ASYNC, [5], lr=1.0)
    s = job.stream(5)
    before = job.params()
    a = s.push(1, 0, FAR, [1.0] * N)
    check(a.code == OUT_OF_RANGE, "push for clock 2^62 refused", a)
    check(job.params() == before, "parameters unchanged")
    a = s.push(2, 0, 5, [1.0] * N)
    check(a.code == OK and not a.duplicate, "push for clock 5 applied, not a duplicate", a)
    after = job.params()
    check(all(abs(x - (y - 1.0)) < 1e-5 for x, y in zip(after, before)), "the update applied")
    good.step()


def case_parked_pulls(sh, good):
    """caps on parked pulls and timeouts; parked pulls end with their stream."""
    job = Job(sh, "park", SYNC, [5, 6])
    before = job.params()
    s = job.stream(5)
    # A pull that cannot be answered (member 6 never pushes), with the largest
    # timeout: answered by the shard's --pull_timeout_ms instead.
    t0 = time.time()
    code, _ = s.pull(1, 1, timeout_ms=0xFFFFFFFF, timeout=PULL_TIMEOUT_MS / 1000 + 3)
    took = time.time() - t0
    check(code == DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED", code)
    check(took < PULL_TIMEOUT_MS / 1000 + 1.5, "timeout clamped to --pull_timeout_ms", took)
    # Per-stream cap.
    for rid in range(MAX_PULLS_PER_STREAM):
        s.pull_request(100 + rid, 1, timeout_ms=0xFFFFFFFF)
    s.pull_request(999, 1, timeout_ms=0xFFFFFFFF)
    r = s.recv()
    check(r is not Stream.END and r.HasField("pull") and r.pull.request_id == 999 and
          r.pull.code == RESOURCE_EXHAUSTED, "pull past the cap: RESOURCE_EXHAUSTED", r)
    s.cancel()
    # Many streams park the most they may, then are cancelled.
    rss0, cpu0 = sh.rss_kib(), sh.cpu_seconds()
    streams = park_pulls(job, 48, MAX_PULLS_PER_STREAM)
    time.sleep(0.5)
    step_while = good.step()
    for st in streams:
        st.cancel()
    for st in streams:
        st.status()
    time.sleep(0.5)
    cpu1 = sh.cpu_seconds()
    time.sleep(2.0)
    idle_cpu = (sh.cpu_seconds() - cpu1) / 2.0
    rss1 = sh.rss_kib()
    print("    parked %d pulls on %d streams; good step while parked %.1f ms; after cancel: "
          "idle CPU %.1f%% of a core, RSS %+d KiB" %
          (48 * MAX_PULLS_PER_STREAM, len(streams), step_while * 1e3, idle_cpu * 100,
           rss1 - rss0))
    check(idle_cpu < 0.05, "idle shard after cancel uses < 5% of a core", idle_cpu)
    check(job.params() == before, "parameters unchanged")
    # Were they released? Make them all ready: a leaked one would be served.
    served = sh.stats("park").pulls_served
    for w in (5, 6):
        m = job.stream(w)
        check(m.push(1, 0, 0, [0.0] * N).code == OK, "member push")
        m.half_close()
        m.status()
    time.sleep(0.3)
    check(sh.stats("park").pulls_served == served, "no cancelled pull served after its stream "
          "ended", sh.stats("park").pulls_served - served)
    good.step()


def case_impersonation(sh, good):
    """a member cannot say Hello as another member."""
    job = Job(sh, "imp", ASYNC, [7, 8])
    before = job.params()
    # H (8) as G (7) with incarnation + 1000, with H's own token.
    h = Stream(sh.channel, job.wtoken(8, 1))
    r = h.hello("imp", 7, 1001, expect_ok=False)
    check(r is not Stream.END and r.HasField("error") and r.error.code == UNAUTHENTICATED,
          "impersonating Hello refused UNAUTHENTICATED", r)
    h.status()
    # H with its token as G at G's own incarnation: refused too.
    h2 = Stream(sh.channel, job.wtoken(8, 1))
    r = h2.hello("imp", 7, 1, expect_ok=False)
    check(r is not Stream.END and r.HasField("error") and r.error.code == UNAUTHENTICATED,
          "Hello as 7 with 8's token refused", r)
    # H as itself in a later incarnation it was not assigned: refused.
    h3 = Stream(sh.channel, job.wtoken(8, 1))
    r = h3.hello("imp", 8, 2, expect_ok=False)
    check(r is not Stream.END and r.HasField("error") and r.error.code == UNAUTHENTICATED,
          "Hello in an unassigned incarnation refused", r)
    # G is not locked out.
    g = job.stream(7, 1)
    check(g.push(1, 0, 0, [0.0] * N).code == OK, "G still pushes")
    # A worker token of another job is PERMISSION_DENIED.
    x = Stream(sh.channel, worker_token(good.job.token, "good", 1, 1))
    r = x.hello("imp", 1, 1, expect_ok=False)
    check(r is not Stream.END and r.HasField("error") and r.error.code == PERMISSION_DENIED,
          "another job's worker token: PERMISSION_DENIED", r)
    check(job.params() == before, "parameters unchanged")
    good.step()


def case_leave_then_push(sh, good):
    """a Leave followed by more pushes."""
    job = Job(sh, "leave", ASYNC, [5])
    before = job.params()
    s = job.stream(5)
    m = pb.WorkerMessage()
    m.leave.SetInParent()
    s.send(m)
    seq_msg = pb.WorkerMessage()
    seq_msg.push.seq = 1
    seq_msg.push.chunks.append(pushed(0, [1.0] * N))
    s.send(seq_msg)
    s.expect_stream_error(FAILED_PRECONDITION, "push after Leave")
    check(job.params() == before, "parameters unchanged")
    good.step()


def case_not_protobuf(sh, good):
    """a frame that is not a WorkerMessage ends the stream INVALID_ARGUMENT."""
    job = Job(sh, "garbage", ASYNC, [5])
    before = job.params()
    for junk in (b"\xff\xff\xff\xff", b"\x0a\x05ab", b"\x12\xff\xff\xff\xff\x0f"):
        s = job.stream(5)
        s.send(junk)
        s.expect_stream_error(INVALID_ARGUMENT, "unparsable frame %r" % junk, INVALID_ARGUMENT)
    s = Stream(sh.channel, job.wtoken(5))  # before Hello, too
    s.send(b"\xff\xff")
    s.expect_stream_error(INVALID_ARGUMENT, "unparsable first frame", INVALID_ARGUMENT)
    check(job.params() == before, "parameters unchanged")
    good.step()


def case_malformed_classes(sh, good):
    """The frame classes handled before: each gets its code, nothing changes."""
    job = Job(sh, "frames", ASYNC, [5, 6])
    before = job.params()
    # Stream-level.
    s = Stream(sh.channel, job.wtoken(5))
    m = pb.WorkerMessage()
    m.push.seq = 1
    s.send(m)
    s.expect_stream_error(FAILED_PRECONDITION, "push before Hello")
    s = Stream(sh.channel, job.wtoken(5))
    s.send(pb.WorkerMessage())
    s.expect_stream_error(INVALID_ARGUMENT, "empty WorkerMessage")
    s = job.stream(5)
    m = pb.WorkerMessage()
    m.hello.job_id, m.hello.worker_id, m.hello.incarnation = "frames", 5, 1
    s.send(m)
    s.expect_stream_error(FAILED_PRECONDITION, "second Hello")
    s = Stream(sh.channel, job.token)
    r = s.hello("no-such-job", 5, 1, expect_ok=False)
    check(r.HasField("error") and r.error.code == NOT_FOUND, "unknown job: NOT_FOUND", r)
    s = Stream(sh.channel, "")
    r = s.hello("frames", 5, 1, expect_ok=False)
    check(r.HasField("error") and r.error.code == UNAUTHENTICATED, "no token: UNAUTHENTICATED", r)
    # Stale incarnation (the job token may say any incarnation).
    newer = Stream(sh.channel, job.token)
    newer.hello("frames", 6, 5)
    older = Stream(sh.channel, job.token)
    r = older.hello("frames", 6, 4, expect_ok=False)
    check(r.HasField("error") and r.error.code == FAILED_PRECONDITION,
          "stale incarnation: FAILED_PRECONDITION", r)
    # Per-message: each answered with its code, the stream goes on.
    s = job.stream(5)
    cases = [
        ("unknown chunk", dict(chunk=77, values=[1.0] * N), NOT_FOUND),
        ("count mismatch", dict(values=[1.0] * (N - 1)), INVALID_ARGUMENT),
        ("truncated twobit payload", dict(codec=1, scale=1.0, payload=b"\x55" * 10),
         INVALID_ARGUMENT),
        ("invalid 2-bit code", dict(codec=1, scale=1.0, payload=b"\xff" * (N // 4)),
         INVALID_ARGUMENT),
        ("NaN scale", dict(codec=1, scale=float("nan"), payload=b"\x55" * (N // 4)),
         INVALID_ARGUMENT),
        ("Inf scale", dict(codec=1, scale=float("inf"), payload=b"\x55" * (N // 4)),
         INVALID_ARGUMENT),
        ("NaN in fp32 payload", dict(values=[float("nan")] * N), INVALID_ARGUMENT),
        ("unknown codec", dict(codec=9, payload=b"\x00" * N), INVALID_ARGUMENT),
    ]
    for seq, (what, kw, want) in enumerate(cases, start=1):
        chunk = kw.pop("chunk", 0)
        a = s.push(seq, chunk, 0, **kw)
        check(a.code == want and a.message, "%s: Ack code %d with a message" % (what, want), a)
    a = s.init(50, 0, [1.0] * (N - 1))
    check(a.code == INVALID_ARGUMENT, "InitChunk size mismatch", a)
    a = s.init(51, 0, [1.0] * N)
    check(a.code == OK and a.duplicate, "a later InitChunk is ignored", a)
    s.pull_request(61, 0, chunks=[77])
    r = s.recv()
    check(r.HasField("pull") and r.pull.code == NOT_FOUND, "pull of an unknown chunk", r)
    # A message over --max_message_bytes ends that stream only.
    big = Stream(sh.channel, job.wtoken(5))
    big.hello("frames", 5, 1)
    m = pb.WorkerMessage()
    m.push.seq = 1
    m.push.chunks.append(pushed(0, payload=b"\x00" * (9 << 20)))
    big.send(m)
    code, _ = big.status()
    check(code == RESOURCE_EXHAUSTED, "oversized message: RESOURCE_EXHAUSTED", code)
    check(s.push(99, 0, 0, [0.0] * N).code == OK, "the stream goes on")
    check(job.params() == before, "parameters unchanged")
    good.step()


def case_malformed_buckets(sh, good):
    """A Push of several chunks is checked whole before any is applied: a
    good chunk beside a bad one changes nothing (async: it would apply at
    once), each refusal names its chunk; a worker of an older protocol is
    refused at Hello."""
    job = Job(sh, "buckets", ASYNC, [5], chunks=3)
    before = job.all_params()
    s = job.stream(5)
    good_chunk = pushed(0, [1.0] * N)
    cases = [
        ("no chunk", [], INVALID_ARGUMENT, "no chunks"),
        ("a chunk twice", [good_chunk, pushed(1, [1.0] * N), good_chunk], INVALID_ARGUMENT,
         "chunk 0 is in the Push twice"),
        ("a chunk not on the shard", [good_chunk, pushed(77, [1.0] * N)], NOT_FOUND, "chunk 77"),
        ("a truncated twobit payload",
         [good_chunk, pushed(1, codec=1, scale=1.0, payload=b"\x55" * 10)], INVALID_ARGUMENT,
         "chunk 1 (2 of 2 in the Push)"),
        ("an invalid 2-bit code", [good_chunk, pushed(2, codec=1, scale=1.0,
                                                      payload=b"\xff" * (N // 4))],
         INVALID_ARGUMENT, "chunk 2 (2 of 2 in the Push)"),
        ("NaN in the last chunk", [good_chunk, pushed(1, [1.0] * N),
                                   pushed(2, [float("nan")] * N)],
         INVALID_ARGUMENT, "chunk 2 (3 of 3 in the Push)"),
        ("an unknown codec", [good_chunk, pushed(1, codec=9, payload=b"\x00" * N)],
         INVALID_ARGUMENT, "chunk 1 of the Push: unknown codec 9"),
    ]
    for seq, (what, chunks, want, says) in enumerate(cases, start=1):
        a = s.push_bucket(seq, 0, chunks)
        check(a.code == want and says in a.message,
              "%s: Ack code %d saying %r" % (what, want, says), a)
    check(job.all_params() == before, "parameters unchanged")
    # A bucket of 200,000 entries of one chunk (1.2 MB): refused at once.
    t0 = time.time()
    a = s.push_bucket(100, 0, [pushed(0, n=1, payload=b"\x00" * 4)] * 200000)
    check(a.code == INVALID_ARGUMENT and "twice" in a.message, "a huge bucket refused", a)
    check(time.time() - t0 < 2.0, "refused within 2 s", time.time() - t0)
    check(job.all_params() == before, "parameters unchanged")
    # The same chunks well formed are applied, every one.
    a = s.push_bucket(101, 0, [good_chunk, pushed(1, [1.0] * N), pushed(2, [1.0] * N)])
    check(a.code == OK and not a.duplicate, "a good bucket applied", a)
    st = sh.stats("buckets")
    check(st.pushes_applied == 3, "3 chunks applied", st.pushes_applied)
    # A Hello of the Session protocol before buckets.
    old = Stream(sh.channel, job.wtoken(5))
    r = old.hello("buckets", 5, 1, expect_ok=False, protocol=pb.SESSION_PROTOCOL_UNSPECIFIED)
    check(r.HasField("error") and r.error.code == FAILED_PRECONDITION and
          "Session protocol 0" in r.error.message, "an older protocol: FAILED_PRECONDITION", r)
    good.step()


def case_sigterm(sh, good):
    """SIGTERM stops the shard within its grace period, even under attack."""
    job = Job(sh, "term", SYNC, [5, 6])
    s = job.stream(5)
    for rid in range(MAX_PULLS_PER_STREAM):
        s.pull_request(rid, 1, timeout_ms=0xFFFFFFFF)
    time.sleep(0.2)
    t0 = time.time()
    sh.proc.terminate()
    try:
        sh.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        sh.proc.kill()
        raise CaseFailed("gs_shard still running 10 s after SIGTERM")
    print("    stopped %.2f s after SIGTERM" % (time.time() - t0))


# ---------------------------------------------------------------- --measure
# Figures for the far-clock wedge and the parked-pull leak, without asserting:
# run against this gs_shard and an older one (--job_token_only) to compare.


def good_step_ms(good, timeout=5.0):
    try:
        t0 = time.time()
        good.seq += 1
        good.s.push(good.seq, 0, good.clock, [0.01] * N)
        good.clock += 1
        good.s.clock(good.clock)
        good.s.pull(good.seq, good.clock, timeout=timeout)
        return "%.1f ms" % ((time.time() - t0) * 1e3)
    except AssertionError:
        return "no answer in %.0f s" % timeout


def measure_wedge(binary, work_dir):
    sh = Shard(binary, work_dir)
    good = GoodClient(sh)
    # Two jobs, so that both executor threads would be taken.
    streams = [Job(sh, "wedge%d" % i, SYNC, [5]).stream(5) for i in range(2)]
    for st in streams:
        st.clock(FAR)
    time.sleep(1.0)
    cpu0 = sh.cpu_seconds()
    time.sleep(2.0)
    cpu = (sh.cpu_seconds() - cpu0) / 2.0
    step = good_step_ms(good)
    t0 = time.time()
    sh.proc.terminate()
    try:
        sh.proc.wait(timeout=15)
        stop = "%.2f s" % (time.time() - t0)
    except subprocess.TimeoutExpired:
        sh.proc.kill()
        stop = "still running after 15 s (killed)"
    print("wedge: ClockAdvance{2^62} from the only member of 2 sync jobs: shard CPU %.0f%% of a "
          "core, a good client's step %s, SIGTERM -> exit %s" % (cpu * 100, step, stop))


def measure_leak(binary, work_dir, streams_n=100, pulls_per_stream=600):
    sh = Shard(binary, work_dir)
    good = GoodClient(sh)
    job = Job(sh, "leak", SYNC, [5, 6])
    base = sorted(float(good_step_ms(good).split()[0]) for _ in range(10))[5]
    rss0 = sh.rss_kib()
    streams = park_pulls(job, streams_n, pulls_per_stream)
    time.sleep(2.0)
    rss_parked = sh.rss_kib()
    for st in streams:
        st.cancel()
    time.sleep(2.0)
    cpu0 = sh.cpu_seconds()
    time.sleep(3.0)
    cpu = (sh.cpu_seconds() - cpu0) / 3.0
    steps = []
    for _ in range(10):
        r = good_step_ms(good)
        steps.append(float(r.split()[0]) if r.endswith("ms") else float("inf"))
    print("leak: %d streams x %d pulls (a clock that never gets ready, timeout 2^32-1 ms), "
          "then cancelled: RSS %+d KiB parked, %+d KiB after cancel; idle CPU %.1f%% of a "
          "core; good step median %.1f ms before, %.1f ms after" %
          (streams_n, pulls_per_stream, rss_parked - rss0, sh.rss_kib() - rss0, cpu * 100, base,
           sorted(steps)[5]))
    sh.stop()


CASES = [
    case_clock_advance_far_future,
    case_pull_and_push_far_future,
    case_overflow_async,
    case_far_push_then_normal,
    case_parked_pulls,
    case_impersonation,
    case_leave_then_push,
    case_not_protobuf,
    case_malformed_classes,
    case_malformed_buckets,
    case_sigterm,  # last: stops the shard
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shard", required=True)
    ap.add_argument("--proto_dir", required=True)
    ap.add_argument("--work_dir", required=True)
    ap.add_argument("-k", default="", help="run only cases whose name contains this")
    ap.add_argument("--job_token_only", action="store_true",
                    help="members present the job token, as before worker tokens (to measure "
                         "an older gs_shard)")
    ap.add_argument("--measure", action="store_true",
                    help="print the wedge and leak figures instead of running the cases")
    args = ap.parse_args()
    global JOB_TOKEN_ONLY
    JOB_TOKEN_ONLY = args.job_token_only
    generate_stubs(args.proto_dir, os.path.join(args.work_dir, "stubs"))
    if args.measure:
        measure_wedge(args.shard, args.work_dir)
        measure_leak(args.shard, args.work_dir)
        return 0
    sh = Shard(args.shard, args.work_dir)
    failed = []
    try:
        good = GoodClient(sh)
        steps = [good.step() for _ in range(20)]
        print("good client step: median %.1f ms before any case" %
              (sorted(steps)[len(steps) // 2] * 1e3))
        for case in CASES:
            if args.k not in case.__name__:
                continue
            t0 = time.time()
            try:
                case(sh, good)
                check(sh.alive() or case is case_sigterm, "the shard alive")
                print("PASS %s (%.2f s)" % (case.__name__, time.time() - t0))
            except Exception:  # pylint: disable=broad-except
                failed.append(case.__name__)
                print("FAIL %s\n%s" % (case.__name__, traceback.format_exc()))
                if not sh.alive():
                    print("gs_shard died; log: " + sh.log.name)
                    break
    finally:
        sh.stop()
    if failed:
        print("FAILED: " + ", ".join(failed) + " (shard log: " + sh.log.name + ")")
        return 1
    print("all hostile-client cases passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
