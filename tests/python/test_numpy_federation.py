"""Python sites against the real fedcore-server over mutual TLS: a NumPy model trained
through fedcore.run_client, driven by fedcore.Admin; a Python exception in fit; a
Python site killed mid-round."""

import json
import os
import signal
import tempfile
import unittest

import numpy as np

import fedcore
import numpy_site
from fedcore.parameters import model_spec
from rig import Federation, wait_for

SITES = ["site-1", "site-2", "site-3"]


def run_config(rounds: int, **extra):
    config = {"name": "python-sdk", "model": model_spec(numpy_site.LAYOUT, [30], 2),
              "rounds": rounds, "clients_per_round": 3, "min_clients": 3,
              "local_epochs": 2, "batch_size": 16, "optimizer": {"kind": "sgd", "lr": 0.1},
              "round_timeout_s": 30, "wait_for_clients_s": 30, "seed": 3}
    config.update(extra)
    return config


class NumpySitesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="fedcore-py-")
        # Sessions silent for 4 s are cut: a site must heartbeat while Python trains.
        self.fed = Federation(self.tmp.name, SITES, server_options={"idle_timeout_s": 4})

    def tearDown(self):
        self.fed.close()
        self.tmp.cleanup()

    def start_sites(self, extra=None, policies=None):
        for i, site in enumerate(SITES):
            policy = (policies or {}).get(site)
            self.fed.start_site(site, "numpy_site.py", "--index", str(i),
                                *((extra or {}).get(site, [])),
                                config_extra={"policy": policy} if policy else None)
        self.fed.wait_online(len(SITES))

    def test_numpy_sites_train_a_model_the_server_only_aggregates(self):
        self.start_sites()
        admin = self.fed.admin
        run = admin.start_run(run_config(4))
        ended = admin.wait(run["id"], poll_seconds=0.2, timeout=120)
        self.assertEqual(ended["state"], "finished", self.fed.log("server"))
        rounds = admin.rounds(run["id"])
        self.assertEqual([r["state"] for r in rounds], ["committed"] * 4)
        self.assertEqual([r["accepted"] for r in rounds], [3] * 4)
        # The sites' own metrics travel: training accuracy of a separable table climbs.
        self.assertGreater(rounds[-1]["train_accuracy"], 0.93)
        self.assertGreater(rounds[-1]["fed_eval_accuracy"], 0.9)
        self.assertLess(rounds[-1]["train_loss"], rounds[0]["train_loss"])
        # The global model, downloaded, is the layout the run named.
        path = admin.download_model(run["id"], os.path.join(self.tmp.name, "final.fcp"))
        layout, arrays, _ = fedcore.load_parameters(path)
        self.assertEqual(layout, numpy_site.LAYOUT)
        self.assertTrue(np.all(np.isfinite(arrays[0])))
        # ... and it is as good on the sites' test splits as the federation says.
        losses = []
        for i in range(3):
            _, test = numpy_site.load_share(numpy_site_data(), i, 3)
            losses.append(numpy_site.loss_and_accuracy(arrays[0], arrays[1], *test)[1])
        self.assertGreater(min(losses), 0.85)

    def test_an_exception_in_fit_is_the_sites_failure_for_that_round_only(self):
        self.start_sites({"site-2": ["--raise-in-round", "2"]})
        admin = self.fed.admin
        run = admin.start_run(run_config(3, min_clients=2))
        ended = admin.wait(run["id"], poll_seconds=0.2, timeout=120)
        self.assertEqual(ended["state"], "finished", self.fed.log("server"))
        second = {r["client_id"]: r for r in admin.results(run["id"], 2)}
        self.assertEqual(second["site-2"]["status"], "dropped")
        self.assertIn("fit raised ValueError: boom in round 2", second["site-2"]["reason"])
        third = {r["client_id"]: r for r in admin.results(run["id"], 3)}
        self.assertEqual(third["site-2"]["status"], "ok")  # the daemon carried on
        self.assertIsNone(self.fed.sites["site-2"].poll())

    def test_a_site_killed_mid_round_is_dropped_and_the_round_commits_without_it(self):
        flag = os.path.join(self.tmp.name, "site-3.training")
        self.start_sites({"site-3": ["--hang-in-round", "2", "--hang-flag", flag]})
        admin = self.fed.admin
        run = admin.start_run(run_config(3, min_clients=2))
        wait_for(lambda: os.path.exists(flag), 60, "site-3 training round 2")
        self.fed.sites["site-3"].send_signal(signal.SIGKILL)
        self.fed.sites["site-3"].wait(timeout=10)
        ended = admin.wait(run["id"], poll_seconds=0.2, timeout=120)
        self.assertEqual(ended["state"], "finished", self.fed.log("server"))
        second = {r["client_id"]: r for r in admin.results(run["id"], 2)}
        self.assertEqual(second["site-3"]["status"], "dropped")
        self.assertEqual(sorted(c for c, r in second.items() if r["status"] == "ok"),
                         ["site-1", "site-2"])

    def test_heartbeats_go_on_while_python_trains_longer_than_the_idle_timeout(self):
        self.start_sites({"site-1": ["--busy-seconds", "6"]})
        run = self.fed.admin.start_run(run_config(1))
        ended = self.fed.admin.wait(run["id"], poll_seconds=0.2, timeout=60)
        self.assertEqual(ended["state"], "finished", self.fed.log("server"))
        first = {r["client_id"]: r for r in self.fed.admin.results(run["id"], 1)}
        self.assertEqual(first["site-1"]["status"], "ok")
        self.assertGreater(first["site-1"]["duration_s"], 6)
        self.assertEqual(self.fed.admin.rounds(run["id"])[0]["accepted"], 3)

    def test_the_site_policy_holds_for_python_sites(self):
        self.start_sites(policies={"site-3": {"max_local_epochs": 1,
                                              "allowed_model_types": ["external"]}})
        run = self.fed.admin.start_run(run_config(1, min_clients=2))  # 2 local epochs
        ended = self.fed.admin.wait(run["id"], poll_seconds=0.2, timeout=60)
        self.assertEqual(ended["state"], "finished", self.fed.log("server"))
        first = {r["client_id"]: r for r in self.fed.admin.results(run["id"], 1)}
        self.assertEqual(first["site-3"]["status"], "dropped")
        self.assertIn("site policy", first["site-3"]["reason"])
        self.assertIn("local epochs", first["site-3"]["reason"])
        self.assertEqual(first["site-1"]["status"], "ok")

    def test_sigterm_says_goodbye_and_returns_the_rounds_trained(self):
        self.start_sites()
        run = self.fed.admin.start_run(run_config(2))
        self.fed.admin.wait(run["id"], poll_seconds=0.2, timeout=60)
        site = self.fed.sites["site-1"]
        site.send_signal(signal.SIGTERM)
        self.assertEqual(site.wait(timeout=30), 0)
        wait_for(lambda: "client 'site-1' offline: client said goodbye" in
                 self.fed.log("server"), 10, "the server seeing site-1's GOODBYE")
        self.assertIn("trained 2 round(s)", self.fed.log("site-1"))

    def test_python_sites_reconnect_after_a_server_restart_and_audit_what_left(self):
        audit = os.path.join(self.tmp.name, "site-1.audit.jsonl")
        self.fed.start_site("site-1", "numpy_site.py", "--index", "0",
                            config_extra={"audit_log": audit})
        for i, site in enumerate(SITES[1:], start=1):
            self.fed.start_site(site, "numpy_site.py", "--index", str(i))
        self.fed.wait_online(3)
        self.fed.restart_server()
        self.fed.wait_online(3, timeout=60)  # the daemons' backoff brings them back
        run = self.fed.admin.start_run(run_config(1))
        ended = self.fed.admin.wait(run["id"], poll_seconds=0.2, timeout=60)
        self.assertEqual(ended["state"], "finished", self.fed.log("server"))
        self.assertEqual(self.fed.admin.rounds(run["id"])[0]["accepted"], 3)
        with open(audit) as f:
            entries = [json.loads(line) for line in f]
        self.assertTrue(any(e.get("event") == "update_sent" for e in entries), entries)

    def test_python_sites_take_part_in_secure_aggregation(self):
        self.start_sites()
        run = self.fed.admin.start_run(run_config(2, privacy={"secure_aggregation": {
            "stage_timeout_s": 30, "bind_keys": True}}))
        ended = self.fed.admin.wait(run["id"], poll_seconds=0.2, timeout=120)
        self.assertEqual(ended["state"], "finished", self.fed.log("server"))
        rounds = self.fed.admin.rounds(run["id"])
        self.assertEqual([r["secure_aggregation"] for r in rounds], [True, True])
        self.assertEqual([r["accepted"] for r in rounds], [3, 3])
        # The server learnt only the sum, and the unmasked aggregate still learns the table.
        path = self.fed.admin.download_model(run["id"], os.path.join(self.tmp.name, "s.fcp"))
        _, arrays, _ = fedcore.load_parameters(path)
        _, test = numpy_site.load_share(numpy_site_data(), 0, 3)
        self.assertGreater(numpy_site.loss_and_accuracy(arrays[0], arrays[1], *test)[1], 0.85)

    def test_python_sites_take_part_in_a_client_level_dp_run(self):
        self.start_sites()
        run = self.fed.admin.start_run(run_config(2, federated_evaluation=False, privacy={
            "dp": {"mode": "client_central", "epsilon": 8, "delta": 1e-5, "clip_norm": 1}}))
        ended = self.fed.admin.wait(run["id"], poll_seconds=0.2, timeout=120)
        self.assertEqual(ended["state"], "finished", self.fed.log("server"))
        rounds = self.fed.admin.rounds(run["id"])
        self.assertEqual([r["accepted"] for r in rounds], [3, 3])
        self.assertTrue(all(r["epsilon"] and 0 < r["epsilon"] <= 8 for r in rounds), rounds)

    def test_python_sites_send_compressed_updates_and_take_an_f16_model(self):
        self.start_sites()
        run = self.fed.admin.start_run(run_config(3, compression={"up": "int8", "down": "f16"}))
        ended = self.fed.admin.wait(run["id"], poll_seconds=0.2, timeout=120)
        self.assertEqual(ended["state"], "finished", self.fed.log("server"))
        rounds = self.fed.admin.rounds(run["id"])
        self.assertEqual([r["accepted"] for r in rounds], [3, 3, 3])
        # The sites speak protocol 3 or later (older ones would not have been selected), and
        # their int8 steps against the f16 model they received still make a model that learns.
        self.assertRegex(self.fed.log("server"), r"online from .*protocol ([3-9]|[1-9][0-9])\)")
        path = self.fed.admin.download_model(run["id"], os.path.join(self.tmp.name, "c.fcp"))
        _, arrays, _ = fedcore.load_parameters(path)
        _, test = numpy_site.load_share(numpy_site_data(), 0, 3)
        self.assertGreater(numpy_site.loss_and_accuracy(arrays[0], arrays[1], *test)[1], 0.85)

    def test_a_run_for_another_model_is_refused_naming_the_tensor(self):
        self.start_sites()
        other = [("weight", (1, 30)), ("bias", (2,))]
        config = run_config(1, min_clients=1)
        config["model"] = model_spec(other, [30], 2)
        run = self.fed.admin.start_run(config)
        # Every site refuses: the round fails and the run pauses (on_failed_round).
        rounds = wait_for(lambda: self.fed.admin.rounds(run["id"]), 60, "a failed round")
        self.assertEqual(rounds[0]["state"], "failed")
        self.assertEqual(self.fed.admin.run(run["id"])["state"], "paused")
        results = self.fed.admin.results(run["id"], 1)
        self.assertTrue(results)
        for r in results:
            self.assertEqual(r["status"], "dropped")
            self.assertIn("tensor 1: the site has 'bias' [1], the run 'bias' [2]", r["reason"])


def numpy_site_data():
    return os.path.join(os.environ["FEDCORE_SOURCE_DIR"], "data", "breast_cancer_wisconsin.csv")


if __name__ == "__main__":
    unittest.main()
