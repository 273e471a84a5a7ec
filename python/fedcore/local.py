"""A federation on this machine, for trying the SDK out and for tests: a throwaway PKI
(fedcore-pki), the real fedcore-server over mutual TLS with its REST API, and Python sites
as processes of their own.

    with fedcore.local.Federation(workdir, ["site-1", "site-2"], server_binary=...,
                                  pki_tool=...) as fed:
        fed.start_site("site-1", "my_site.py", "--index", "0")
        fed.wait_online(2)
        run = fed.admin.start_run({...})

Every wait is bounded; close() (or leaving the with block) terminates and reaps every
process it started. All files (certificates, configs, logs, history) stay in `workdir`.
Not for production: the CA key sits next to everything else.
"""

import hashlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

from fedcore.admin import Admin


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, timeout: float, what: str, poll: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(poll)
    raise TimeoutError(f"{what}: not within {timeout} s")


class Federation:
    """`server_binary`: fedcore-server; `pki_tool`: certs/fedcore-pki; `python_path`:
    folders the sites import from (the fedcore package's among them);
    `server_options`: extra keys of the server config."""

    def __init__(self, workdir: str, sites: Sequence[str], server_binary: str, pki_tool: str,
                 python_path: Sequence[str] = (), server_options: Optional[Dict] = None):
        self.workdir = workdir
        self.python_path = list(python_path)
        self.pki = os.path.join(workdir, "pki")
        for args in (["init"], ["server", "fl"], *[["client", s] for s in sites]):
            subprocess.run([pki_tool, "--dir", self.pki, *args], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
        self.port = free_port()
        self.api_port = free_port()
        token = secrets.token_hex(24)
        config = {
            "listen": "127.0.0.1", "port": self.port,
            "database": os.path.join(workdir, "history.db"),
            "checkpoint_dir": os.path.join(workdir, "checkpoints"),
            "heartbeat_seconds": 1,
            "tls": {"ca": self.ca, "cert": os.path.join(self.pki, "server", "fl.pem"),
                    "key": os.path.join(self.pki, "server", "fl.key"),
                    "crl": os.path.join(self.pki, "crl.pem")},
            "api": {"enabled": True, "listen": "127.0.0.1", "port": self.api_port,
                    "tokens": [{"name": "tests", "role": "admin", "created_ms": 1,
                                "sha256": hashlib.sha256(token.encode()).hexdigest()}]},
        }
        config.update(server_options or {})
        self.server_config = os.path.join(workdir, "server.json")
        with open(self.server_config, "w") as f:
            json.dump(config, f)
        self.server_binary = server_binary
        self.server_log = open(os.path.join(workdir, "server.log"), "w")
        self.server = self._start_server()
        self.sites: Dict[str, subprocess.Popen] = {}
        self.admin = Admin(f"https://127.0.0.1:{self.api_port}", token, ca=self.ca, timeout=10)
        self._wait_healthy()

    def _start_server(self) -> subprocess.Popen:
        return subprocess.Popen([self.server_binary, "--config", self.server_config],
                                stdout=self.server_log, stderr=subprocess.STDOUT)

    def _wait_healthy(self):
        def healthy():
            if self.server.poll() is not None:
                raise RuntimeError(f"fedcore-server exited: {self.log('server')}")
            try:
                return self.admin.health()["status"] == "ok"
            except OSError:
                return False
        wait_for(healthy, 30, "fedcore-server's API")

    def restart_server(self):
        """Stops the server (SIGTERM) and starts it again on the same ports and history,
        as an operator's restart would; the sites reconnect by themselves."""
        _stop([self.server], 15)
        self.server = self._start_server()
        self._wait_healthy()

    @property
    def ca(self) -> str:
        return os.path.join(self.pki, "ca.pem")

    def client_config(self, site: str, extra: Optional[Dict] = None) -> str:
        """Writes the site's client config (mutual TLS to this server, no "data"), with the
        keys of `extra` (e.g. {"policy": {...}}); returns its path."""
        path = os.path.join(self.workdir, f"{site}.json")
        config = {"server": "127.0.0.1", "port": self.port, "server_name": "localhost",
                  "tls": {"ca": self.ca,
                          "cert": os.path.join(self.pki, "clients", f"{site}.pem"),
                          "key": os.path.join(self.pki, "clients", f"{site}.key")}}
        config.update(extra or {})
        with open(path, "w") as f:
            json.dump(config, f)
        return path

    def start_site(self, site: str, script: str, *args: str,
                   config_extra: Optional[Dict] = None) -> subprocess.Popen:
        """Runs `python3 script --config <site's client config> args...`; `config_extra`
        adds keys to the client config (client_config)."""
        return self.start_process(
            site, [sys.executable, script, "--config", self.client_config(site, config_extra),
                   *args])

    def start_process(self, site: str, argv: List[str]) -> subprocess.Popen:
        """Runs any site program (e.g. fedcore-client), output to <workdir>/<site>.log, with
        the sites' PYTHONPATH."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(self.python_path + [env.get("PYTHONPATH", "")])
        with open(os.path.join(self.workdir, f"{site}.log"), "a") as log:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.sites[site] = process
        return process

    def stop_sites(self, timeout: float = 15):
        """Stops every site (SIGTERM: a graceful GOODBYE) and reaps it."""
        _stop(list(self.sites.values()), timeout)
        self.sites.clear()

    def wait_online(self, count: int, timeout: float = 30, exactly: bool = False):
        """Waits until `count` clients are online (exactly that many with `exactly`)."""
        def reached():
            for site, process in self.sites.items():
                if process.poll() is not None:
                    raise RuntimeError(f"site {site} exited with {process.returncode}:\n"
                                       f"{self.log(site)}")
            online = self.admin.info()["online_clients"]
            return online == count if exactly else online >= count
        wait_for(reached, timeout, f"{count} clients online")

    def log(self, name: str) -> str:
        path = os.path.join(self.workdir, f"{name}.log")
        with open(path) as f:
            return f.read()[-4000:]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        _stop(list(self.sites.values()) + [self.server], 15)
        self.server_log.close()


def _stop(processes: List[subprocess.Popen], timeout: float):
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)
