"""fedcore.Admin: the server's REST API (docs/api.md) for notebooks and scripts.

    admin = fedcore.Admin("https://fl.example.org:8443", token, ca="ca.pem")
    run = admin.start_run({"name": "cnn", "model": {...}, "rounds": 10, ...})
    for r in admin.follow(run["id"]):
        print(r["round"], r["state"])
    admin.download_model(run["id"], "final.fcp")

Only the standard library: urllib over TLS, verifying the server against `ca`. The token
travels in the Authorization header, never in a URL.
"""

import json
import ssl
import time
import urllib.error
import urllib.request
from typing import Dict, Iterator, List, Optional


class AdminError(RuntimeError):
    """An API call the server refused: `status` is the HTTP status, the message its words."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class Admin:
    def __init__(self, url: str, token: str, ca: Optional[str] = None, timeout: float = 30.0):
        if not url.startswith("https://"):
            raise ValueError("the API is served over HTTPS only: give an https:// URL")
        self._url = url.rstrip("/")
        self._token = token
        self._timeout = timeout
        self._tls = ssl.create_default_context(cafile=ca)
        self._tls.minimum_version = ssl.TLSVersion.TLSv1_2

    def _call(self, method: str, path: str, body: Optional[Dict] = None) -> bytes:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self._url + path, data=data, method=method)
        request.add_header("Authorization", "Bearer " + self._token)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, context=self._tls, timeout=self._timeout) as r:
                return r.read()
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                text = json.loads(text).get("error", {}).get("message", text)
            except (ValueError, AttributeError):
                pass
            raise AdminError(e.code, text) from None

    def _json(self, method: str, path: str, body: Optional[Dict] = None):
        return json.loads(self._call(method, path, body))

    def health(self) -> Dict:
        return self._json("GET", "/api/v1/health")

    def info(self) -> Dict:
        return self._json("GET", "/api/v1/info")

    def start_run(self, config: Dict) -> Dict:
        """Starts a run (the run config of docs/config.md); returns the Run."""
        return self._json("POST", "/api/v1/runs", config)

    def run(self, run_id: int) -> Dict:
        return self._json("GET", f"/api/v1/runs/{int(run_id)}")

    def stop_run(self, run_id: int) -> Dict:
        return self._json("POST", f"/api/v1/runs/{int(run_id)}/stop")

    def _all_pages(self, path: str) -> List[Dict]:
        items: List[Dict] = []
        while True:
            page = self._json("GET", f"{path}?limit=500&offset={len(items)}")
            items += page["items"]
            if not page["items"] or len(items) >= page["total"]:
                return items

    def clients(self) -> List[Dict]:
        return self._all_pages("/api/v1/clients")

    def rounds(self, run_id: int) -> List[Dict]:
        """Every ended round attempt of the run (committed or failed), oldest first."""
        return self._all_pages(f"/api/v1/runs/{int(run_id)}/rounds")

    def results(self, run_id: int, round_number: int) -> List[Dict]:
        """The per-client results of one round."""
        return self._json("GET", f"/api/v1/runs/{int(run_id)}/rounds/{int(round_number)}/results")["items"]

    def evaluation(self, run_id: int) -> Dict:
        """The run's federated evaluation, one item per evaluated round."""
        return self._json("GET", f"/api/v1/runs/{int(run_id)}/evaluation")

    def follow(self, run_id: int, poll_seconds: float = 0.5,
               timeout: float = 24 * 3600.0) -> Iterator[Dict]:
        """Yields each round of the run as it ends (committed or failed), until the run
        ends; raises TimeoutError after `timeout` seconds."""
        seen = 0
        deadline = time.monotonic() + timeout
        while True:
            ended = self.run(run_id).get("state") not in ("pending", "running", "paused")
            rounds = self.rounds(run_id)  # read after the state: nothing is missed at the end
            for r in rounds[seen:]:
                yield r
            seen = len(rounds)
            if ended:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} still running after {timeout} s")
            time.sleep(poll_seconds)

    def wait(self, run_id: int, poll_seconds: float = 0.5, timeout: float = 24 * 3600.0) -> Dict:
        """Waits for the run to end; returns the Run."""
        for _ in self.follow(run_id, poll_seconds, timeout):
            pass
        return self.run(run_id)

    def download_model(self, run_id: int, path: str, round_number: Optional[int] = None,
                       fmt: str = "fcp") -> str:
        """Saves the global model (after `round_number`, default the latest committed) to
        `path`: "fcp" (Fedcore's parameter file: fedcore.load_parameters) or "npy"."""
        query = f"?format={fmt}" + (f"&round={int(round_number)}" if round_number else "")
        data = self._call("GET", f"/api/v1/runs/{int(run_id)}/model{query}")
        with open(path, "wb") as f:
            f.write(data)
        return path
