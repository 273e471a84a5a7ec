"""The SDK tests' federation: fedcore.local.Federation with this build's server, the
source tree's PKI tool, and this folder's site scripts."""

import os
import time

from fedcore import local

SOURCE_DIR = os.environ["FEDCORE_SOURCE_DIR"]
BUILD_DIR = os.environ["FEDCORE_BUILD_DIR"]
HERE = os.path.dirname(os.path.abspath(__file__))
# scripts/pip_test.sh runs these tests against the package pip installed into a venv: the
# sites then import fedcore from there, not from the build tree.
SDK_PATH = [] if os.environ.get("FEDCORE_SDK_INSTALLED") == "1" else [
    os.path.join(BUILD_DIR, "python")]

wait_for = local.wait_for


class Federation(local.Federation):
    def __init__(self, workdir, sites, server_options=None):
        super().__init__(workdir, sites, server_options=server_options,
                         server_binary=os.path.join(BUILD_DIR, "server", "fedcore-server"),
                         pki_tool=os.path.join(SOURCE_DIR, "certs", "fedcore-pki"),
                         python_path=SDK_PATH + [HERE])

    def start_site(self, site, script, *args, config_extra=None):
        return super().start_site(site, os.path.join(HERE, script), *args,
                                  config_extra=config_extra)
