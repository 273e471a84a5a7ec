#!/usr/bin/env python3
"""A server of this tree with a fedcore-client binary of the previous version (built from
scripts/older_client_test.sh's pinned commit, before protocol versions existed): the older
client is welcomed in protocol 1, trains built-in models beside a current client, and is
not selected for an external model. Exits 0 when all holds.

    older_client_check.py --build build/dev --older-client /tmp/prev/build/client/fedcore-client
"""

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True)
    parser.add_argument("--older-client", required=True)
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    from fedcore import local
    from fedcore.parameters import model_spec

    data = {"format": "csv", "path": os.path.join(ROOT, "data", "breast_cancer_wisconsin.csv"),
            "partition": "iid", "partition_clients": 2}
    with tempfile.TemporaryDirectory(prefix="fedcore-older-") as tmp:
        with local.Federation(tmp, ["current", "older"],
                              server_binary=os.path.join(args.build, "server", "fedcore-server"),
                              pki_tool=os.path.join(ROOT, "certs", "fedcore-pki")) as fed:
            fed.start_process("current", [
                os.path.join(args.build, "client", "fedcore-client"), "--config",
                fed.client_config("current", {"data": dict(data, partition_index=0)})])
            fed.start_process("older", [
                args.older_client, "--config",
                fed.client_config("older", {"data": dict(data, partition_index=1)})])
            fed.wait_online(2, timeout=60)
            run = fed.admin.start_run({"model": {"type": "logreg"}, "rounds": 2,
                                       "clients_per_round": 2, "min_clients": 2,
                                       "round_timeout_s": 60})
            ended = fed.admin.wait(run["id"], poll_seconds=0.2, timeout=120)
            problems = []
            if ended["state"] != "finished":
                problems.append(f"the built-in run ended {ended['state']}: {ended.get('reason')}")
            for r in (1, 2):
                statuses = {x["client_id"]: x["status"] for x in fed.admin.results(run["id"], r)}
                if statuses != {"current": "ok", "older": "ok"}:
                    problems.append(f"round {r}: {statuses}")
            if "client 'older' online" not in fed.log("server") or \
                    "protocol 1, an older client" not in fed.log("server"):
                problems.append("the server did not see the older client as protocol 1")
            external = fed.admin.start_run({
                "model": model_spec([("w", (1, 30)), ("b", (1,))], [30], 2), "rounds": 1,
                "clients_per_round": 2, "min_clients": 1, "round_timeout_s": 30,
                "wait_for_clients_s": 1})
            rounds = local.wait_for(lambda: fed.admin.rounds(external["id"]), 60,
                                    "the external run's round")
            selected = {x["client_id"] for x in fed.admin.results(external["id"],
                                                                  rounds[0]["round"])}
            if "older" in selected:
                problems.append("the older client was selected for an external model")
            if problems:
                print("older_client_check: FAIL\n  " + "\n  ".join(problems))
                print(fed.log("server"))
                return 1
    print("older_client_check: ok (protocol 1 client: 2 built-in rounds, left out of the "
          "external run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
