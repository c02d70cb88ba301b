"""What the project's Python test scripts share: the built binary, a free loopback port, a
test-mode server started on it, the CLI, and HTTP calls to the API (stdlib only)."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "debug", "appliance")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(data_dir, port, log, env_extra=None):
    """`appliance --test` on 127.0.0.1:`port` with `data_dir`, its output to `log`; returns
    the process once the port accepts connections (60 s at most)."""
    env = dict(os.environ)
    env.update(env_extra or {})
    proc = subprocess.Popen(
        [BIN, "--test", "--data-dir", data_dir, "--listen", f"127.0.0.1:{port}"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit("the server exited during start; see its log")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    sys.exit("the server did not start in 60 s")


def cli(data_dir, *args):
    """Runs `appliance ARGS --data-dir DATA_DIR`; its standard output, or exits on failure."""
    out = subprocess.run(
        [BIN, *args, "--data-dir", data_dir], capture_output=True, text=True, timeout=60
    )
    if out.returncode != 0:
        sys.exit(f"appliance {' '.join(args)} failed: {out.stderr}")
    return out.stdout


def request(base, method, path, token=None, body=None, headers=None):
    """One HTTP call: (status, raw body bytes). A JSON `body` is sent as such."""
    req = urllib.request.Request(base + path, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, data, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Launched:
    """A test-mode server on a fresh data dir in a temporary work dir."""

    def __init__(self, prefix, env_extra=None):
        if not os.access(BIN, os.X_OK):
            subprocess.run(["cargo", "build", "-q", "--bin", "appliance"], cwd=ROOT, check=True)
        self.work = tempfile.mkdtemp(prefix=prefix)
        self.data_dir = os.path.join(self.work, "data")
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.log_path = os.path.join(self.work, "server.log")
        with open(self.log_path, "w") as log:
            self.proc = start_server(self.data_dir, port, log, env_extra)
        time.sleep(0.5)

    def output(self):
        with open(self.log_path) as f:
            return f.read()

    def printed_keys(self):
        """The checkout, payout and wallet keys the first start printed."""
        keys = {}
        for kind in ("checkout", "payout", "wallet"):
            m = re.search(rf"^{kind} key: (apktest[0-9a-f]{{64}})$", self.output(), re.M)
            if not m:
                sys.exit(f"no {kind} key printed at first start")
            keys[kind] = m.group(1)
        return keys

    def stop(self, keep):
        """Stops the server; removes the work dir unless `keep` (then says where it is)."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if keep:
            print(f"kept: {self.work} (server log: {self.log_path})")
        else:
            shutil.rmtree(self.work, ignore_errors=True)
