// `--check-config` of fedcore-server and fedcore-client (issue 19): a good config passes,
// each broken one names its problem on the right line. The PKIs are made by the real
// certs/fedcore-pki script in temporary folders; expiry is judged at an injected time
// (CheckOptions::now), never by waiting or by back-dated certificates.
#include "client/check_config.hpp"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/check_config.hpp"
#include "shared/tls/check_config.hpp"
#include "tests/support/build_outputs.hpp"
#include "tests/temp_dir.hpp"
#include "tests/tls/tls_support.hpp"

namespace fedcore::tls::testing {
namespace {

using fedcore::testing::TempDir;
using json = nlohmann::json;

void write(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

void copy(const std::string& from, const std::string& to) {
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
}

// The suite's PKI (made once per process: the script is the slow part, and ctest runs each
// test in its own process, so the parts only some tests need are made when first asked for).
struct World {
  Federation main{Federation::Ids{"hospital-a"}};
  TempDir files;
  std::string csv = files.path("cohort.csv");
  std::string stale_crl = files.path("stale-crl.pem");
  std::string soon_crl = files.path("soon-crl.pem");
  std::string good_crl = files.path("good-crl.pem");
  std::unique_ptr<Federation> other;
  bool aged = false;

  World() {
    std::string rows = "age,size,benign\n";
    for (int i = 0; i < 40; ++i) {
      rows +=
          std::to_string(30 + i) + "," + std::to_string(i % 7) + "," + std::to_string(i % 2) + "\n";
    }
    write(csv, rows);
  }

  // A federation of another CA (init and a server certificate).
  Federation& another_ca() {
    if (!other) {
      other = std::make_unique<Federation>(Federation::Ids{});
    }
    return *other;
  }

  // Adds to `main` a server ("short") and a client ("soon") certificate that end within the
  // 30-day warning, and CRLs of every age; main's own CRL stays a fresh one. False on failure.
  bool make_aged() {
    if (!aged) {
      aged = true;
      main.step("server short --days 10");
      main.step("client soon --days 10");
      copy(main.pki.crl(), good_crl);
      main.step("crl --expired");
      copy(main.pki.crl(), stale_crl);
      main.step("crl --crl-days 3");
      copy(main.pki.crl(), soon_crl);
      main.step("crl");
    }
    return main.ok;
  }
};

class CheckConfig : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { world_ = new World(); }
  static void TearDownTestSuite() {
    delete world_;
    world_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(world_->main.ok) << world_->main.log; }

  const Pki& pki() const { return world_->main.pki; }
  // Another CA's PKI; fails the test when the script did.
  const Pki& other() const {
    Federation& other = world_->another_ca();
    EXPECT_TRUE(other.ok) << other.log;
    return other.pki;
  }
  // See World::make_aged.
  static bool aged() {
    const bool ok = world_->make_aged();
    EXPECT_TRUE(ok) << world_->main.log;
    return ok;
  }

  json server_json() const {
    std::filesystem::create_directory(temp_.path("db"));
    return {
        {"listen", "127.0.0.1"},
        {"port", 7443},
        {"database", temp_.path("db/fedcore.db")},
        {"checkpoint_dir", temp_.path("checkpoints")},
        {"tls",
         {{"ca", pki().ca()},
          {"cert", pki().server_cert()},
          {"key", pki().server_key()},
          {"crl", pki().crl()}}},
        {"api",
         {{"port", 8443},
          {"web_root", temp_.path()},
          {"tokens", {{{"name", "alice"}, {"sha256", std::string(64, 'a')}, {"created_ms", 1}}}}}}};
  }
  json client_json(const std::string& id = "hospital-a") const {
    return {{"server", "127.0.0.1"},
            {"server_name", "localhost"},
            {"tls",
             {{"ca", pki().ca()}, {"cert", pki().client_cert(id)}, {"key", pki().client_key(id)}}},
            {"data", {{"format", "csv"}, {"path", world_->csv}, {"label_column", "benign"}}}};
  }

  CheckReport check_server(const json& config, const CheckOptions& options = {}) {
    const std::string path = temp_.path("server.json");
    write(path, config.dump(2));
    return fedcore::server::check_server_config(path, options);
  }
  CheckReport check_client(const json& config, const CheckOptions& options = {}) {
    const std::string path = temp_.path("client.json");
    write(path, config.dump(2));
    return fedcore::client::check_client_config(path, options);
  }

  // The line of `subject` has `status` and its reason contains `words`.
  static void expect_line(const CheckReport& report, const std::string& subject, CheckStatus status,
                          const std::string& words) {
    const CheckLine* line = report.find(subject);
    ASSERT_NE(line, nullptr) << "no line '" << subject << "' in\n" << report.to_text();
    EXPECT_EQ(line->status, status) << report.to_text();
    EXPECT_NE(line->reason.find(words), std::string::npos)
        << "'" << words << "' not in: " << line->reason;
  }
  static void expect_no_warnings(const CheckReport& report) {
    for (const auto& line : report.lines()) {
      EXPECT_EQ(line.status, CheckStatus::ok) << report.to_text();
    }
  }

  static World* world_;
  TempDir temp_;
};

World* CheckConfig::world_ = nullptr;

TEST_F(CheckConfig, GoodServerConfigPasses) {
  const auto report = check_server(server_json());
  EXPECT_FALSE(report.has_failures());
  expect_no_warnings(report);
  for (const char* subject : {"config", "tls.ca", "tls.cert", "tls.cert expiry", "tls.cert chain",
                              "tls.key", "tls.crl", "tls.crl freshness", "tls.cert revoked",
                              "tls context", "database", "checkpoint_dir", "listen", "api"}) {
    EXPECT_NE(report.find(subject), nullptr) << subject << " missing in\n" << report.to_text();
  }
  const std::string text = report.to_text();
  EXPECT_NE(text.find("\nok    tls.key "), std::string::npos) << text;
  EXPECT_NE(text.find(std::to_string(report.lines().size()) + " ok, 0 warn, 0 FAIL\n"),
            std::string::npos)
      << text;
  EXPECT_FALSE(std::filesystem::exists(temp_.path("checkpoints"))) << "the check created it";
  EXPECT_FALSE(std::filesystem::exists(temp_.path("db/fedcore.db"))) << "the check created it";
}

TEST_F(CheckConfig, MissingFileFailsItsLine) {
  auto config = server_json();
  config["tls"]["key"] = temp_.path("nowhere/server.key");
  const auto report = check_server(config);
  EXPECT_TRUE(report.has_failures());
  expect_line(report, "tls.key", CheckStatus::fail, "does not exist");
  expect_line(report, "tls.cert", CheckStatus::ok, "fedcore-server");
  EXPECT_EQ(report.find("tls context"), nullptr) << "reported twice for one cause";
}

TEST_F(CheckConfig, KeyOfAnotherCertificateFails) {
  auto config = server_json();
  config["tls"]["key"] = pki().client_key("hospital-a");
  const auto report = check_server(config);
  expect_line(report, "tls.key", CheckStatus::fail, "does not belong to the certificate");
}

TEST_F(CheckConfig, CertificateFromAnotherCaFails) {
  auto config = server_json();
  config["tls"]["cert"] = other().server_cert();
  config["tls"]["key"] = other().server_key();
  const auto report = check_server(config);
  expect_line(report, "tls.cert chain", CheckStatus::fail, "does not verify against");
  expect_line(report, "tls.key", CheckStatus::ok, "matches");
}

TEST_F(CheckConfig, ExpiredCertificateFails) {
  CheckOptions later;
  later.now = std::chrono::system_clock::now() + std::chrono::hours(24 * 400);
  const auto report = check_server(server_json(), later);
  expect_line(report, "tls.cert expiry", CheckStatus::fail, "expired");
  expect_line(report, "tls.ca", CheckStatus::ok, "valid until");  // 10 years
  CheckOptions earlier;
  earlier.now = std::chrono::system_clock::now() - std::chrono::hours(24 * 2);
  expect_line(check_server(server_json(), earlier), "tls.cert expiry", CheckStatus::fail,
              "not valid before");
}

TEST_F(CheckConfig, CertificateExpiringWithin30DaysWarns) {
  ASSERT_TRUE(aged());
  auto config = server_json();
  config["tls"]["cert"] = pki().server_cert("short");
  config["tls"]["key"] = pki().server_key("short");
  const auto report = check_server(config);
  EXPECT_FALSE(report.has_failures()) << report.to_text();
  expect_line(report, "tls.cert expiry", CheckStatus::warn, "in 9 days");
}

TEST_F(CheckConfig, StaleCrlFailsAndAgeingCrlWarns) {
  ASSERT_TRUE(aged());
  auto config = server_json();
  config["tls"]["crl"] = world_->stale_crl;
  expect_line(check_server(config), "tls.crl freshness", CheckStatus::fail,
              "the server refuses every client");
  config["tls"]["crl"] = world_->soon_crl;
  const auto soon = check_server(config);
  EXPECT_FALSE(soon.has_failures()) << soon.to_text();
  expect_line(soon, "tls.crl freshness", CheckStatus::warn, "fedcore-pki crl");
  config["tls"]["crl"] = world_->good_crl;
  expect_line(check_server(config), "tls.crl freshness", CheckStatus::ok, "next update");
}

TEST_F(CheckConfig, CrlOfAnotherCaOrNoneFails) {
  auto config = server_json();
  config["tls"]["crl"] = other().crl();
  expect_line(check_server(config), "tls.crl", CheckStatus::fail, "is not signed by the CA");
  // The server config requires one; the shared check states why, for any caller.
  config["tls"].erase("crl");
  expect_line(check_server(config), "config", CheckStatus::fail, "'tls.crl' is required");
  CheckReport direct;
  check_tls_files(
      {pki().ca(), pki().server_cert(), pki().server_key(), "", CertificateRole::server, true}, {},
      direct);
  expect_line(direct, "tls.crl", CheckStatus::fail, "every client would be refused");
}

TEST_F(CheckConfig, RevokedCertificateFails) {
  // A revoked client certificate presented as the server's own: a CRL listing it.
  Federation revoked{Federation::Ids{"gone"}};
  ASSERT_TRUE(revoked.ok) << revoked.log;
  ASSERT_EQ(revoked.step("revoke gone"), 0) << revoked.log;
  TlsFiles files{revoked.pki.ca(),  revoked.pki.client_cert("gone"), revoked.pki.client_key("gone"),
                 revoked.pki.crl(), CertificateRole::client,         true};
  CheckReport direct;
  check_tls_files(files, {}, direct);
  expect_line(direct, "tls.cert revoked", CheckStatus::fail, "is revoked");
}

TEST_F(CheckConfig, BrokenConfigIsOneFailLine) {
  const std::string path = temp_.path("server.json");
  write(path, R"({"databse": "x.db"})");
  const auto report = fedcore::server::check_server_config(path);
  ASSERT_EQ(report.lines().size(), 1u) << report.to_text();
  expect_line(report, "config", CheckStatus::fail, "did you mean 'database'?");
  expect_line(fedcore::server::check_server_config(temp_.path("none.json")), "config",
              CheckStatus::fail, "cannot read");
}

TEST_F(CheckConfig, UnwritableDatabaseFolderAndPortClashFail) {
  auto config = server_json();
  config["database"] = temp_.path("missing/fedcore.db");
  config["api"]["port"] = 7443;
  const auto report = check_server(config);
  expect_line(report, "database", CheckStatus::fail, "missing or not writable");
  expect_line(report, "listen", CheckStatus::fail, "both claim port 7443");
}

TEST_F(CheckConfig, GoodClientConfigPasses) {
  const auto report = check_client(client_json());
  EXPECT_FALSE(report.has_failures()) << report.to_text();
  expect_no_warnings(report);
  expect_line(report, "tls.cert id", CheckStatus::ok, "client 'hospital-a'");
  expect_line(report, "tls.cert chain", CheckStatus::ok, "a TLS client");
  expect_line(report, "data", CheckStatus::ok, "32 training and 8 test samples");
  expect_line(report, "policy", CheckStatus::ok, "no limits");
  EXPECT_EQ(report.find("tls.crl"), nullptr) << "a client has no CRL";
}

TEST_F(CheckConfig, ClientProblemsAreNamed) {
  ASSERT_TRUE(aged());
  auto server_cert = client_json();
  server_cert["tls"]["cert"] = pki().server_cert();
  server_cert["tls"]["key"] = pki().server_key();
  expect_line(check_client(server_cert), "tls.cert chain", CheckStatus::fail, "a TLS client");

  expect_line(check_client(client_json("soon")), "tls.cert expiry", CheckStatus::warn, "days");

  auto no_data = client_json();
  no_data["data"]["path"] = temp_.path("absent.csv");
  expect_line(check_client(no_data), "data", CheckStatus::fail, "absent.csv");

  auto weak = client_json();
  weak["policy"] = {{"max_epsilon", 50}, {"max_local_epochs", 3}};
  expect_line(check_client(weak), "policy", CheckStatus::warn, "above 10");

  auto audit = client_json();
  audit["audit_log"] = temp_.path("audit.jsonl");
  write(temp_.path("audit.jsonl"), "not an audit line\n");
  expect_line(check_client(audit), "audit_log", CheckStatus::fail, "line 1");

  auto state = client_json();
  state["site_state"] = temp_.path("site");
  expect_line(check_client(state), "site_state", CheckStatus::ok, "will be created");
  std::filesystem::create_directories(temp_.path("site"));
  write(temp_.path("site") + "/site-batch-norm.fcp", "not a parameter file");
  expect_line(check_client(state), "site_state", CheckStatus::fail, "site-batch-norm.fcp");
}

// The flags end to end: the report on stdout, exit 0 without FAIL lines and 1 with them.
TEST_F(CheckConfig, BinariesExitWithTheVerdict) {
  write(temp_.path("good.json"), server_json().dump());
  auto bad = server_json();
  bad["tls"]["key"] = pki().client_key("hospital-a");
  write(temp_.path("bad.json"), bad.dump());
  write(temp_.path("client.json"), client_json().dump());
  const auto good = run_command(shell_quote(fedcore::testing::server_binary()) +
                                " --check-config " + shell_quote(temp_.path("good.json")));
  EXPECT_EQ(good.status, 0) << good.output;
  EXPECT_NE(good.output.find(" 0 FAIL"), std::string::npos) << good.output;
  const auto failed = run_command(shell_quote(fedcore::testing::server_binary()) +
                                  " --check-config " + shell_quote(temp_.path("bad.json")));
  EXPECT_EQ(failed.status, 1) << failed.output;
  EXPECT_NE(failed.output.find("FAIL  tls.key"), std::string::npos) << failed.output;
  const auto client = run_command(shell_quote(fedcore::testing::client_binary()) +
                                  " --check-config " + shell_quote(temp_.path("client.json")));
  EXPECT_EQ(client.status, 0) << client.output;
}

}  // namespace
}  // namespace fedcore::tls::testing
