// What the site controls, over real mutual TLS: a site policy that refuses a run (the
// server stores the site's words), a pinned server certificate, and a rogue whose
// sample count exceeds its HELLO.
#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "client/audit_log.hpp"
#include "client/server_identity.hpp"
#include "shared/util/source_tree.hpp"
#include "tests/federation/federation_fixture.hpp"
#include "tests/federation/rogue_client.hpp"

namespace fedcore {
namespace {

using testing::Federation;
using testing::Misbehaviour;
using testing::RogueClient;
using testing::TempDir;

client::DataSource breast_cancer() {
  client::DataSource source;
  source.format = "csv";
  source.path = fedcore::source_path("data/breast_cancer_wisconsin.csv");
  source.label_column = "benign";
  return source;
}

std::map<std::string, store::ClientResult> results_by_client(store::HistoryStore& history,
                                                             std::int64_t run, std::int64_t round) {
  std::map<std::string, store::ClientResult> out;
  auto results = history.list_client_results(run, round);
  EXPECT_TRUE(results);
  for (auto& r : *results) {
    out[r.client_id] = r;
  }
  return out;
}

std::string fingerprint_of(const std::string& pem_path) {
  std::FILE* file = std::fopen(pem_path.c_str(), "r");
  EXPECT_NE(file, nullptr) << pem_path;
  if (file == nullptr) {
    return {};
  }
  X509* cert = PEM_read_X509(file, nullptr, nullptr, nullptr);
  std::fclose(file);
  EXPECT_NE(cert, nullptr);
  auto hex = client::certificate_sha256(cert);
  X509_free(cert);
  EXPECT_TRUE(hex);
  return hex ? *hex : std::string();
}

bool audit_has(const std::string& path, const std::string& event, const std::string& reason) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.value("event", "") == event && j.value("reason", "") == reason) {
      return true;
    }
  }
  return false;
}

TEST(SiteControl, APolicyRefusalIsAnsweredAndStoredInTheSitesWords) {
  TempDir dir;
  Federation federation(dir);
  for (const char* id : {"good-1", "good-2", "strict"}) {
    federation.add_client_certificate(id);
  }
  federation.start_server();
  federation.start_client("good-1", breast_cancer());
  federation.start_client("good-2", breast_cancer());
  client::SitePolicy strict;
  strict.allowed_model_types = {"mlp"};
  federation.start_client("strict", breast_cancer(), strict, dir.path("strict-audit.jsonl"));
  ASSERT_TRUE(
      federation.wait_until([&] { return federation.online() == 3; }, std::chrono::seconds(30)));
  auto run = federation.start_run(
      R"({"model":{"type":"logreg"},"rounds":1,"clients_per_round":3,"min_clients":2,
      "round_timeout_s":600,"seed":3,"optimizer":{"kind":"sgd","lr":0.1}})");
  ASSERT_TRUE(run) << run.error().to_string();
  ASSERT_TRUE(federation.wait_until([&] { return federation.ended().has_value(); },
                                    std::chrono::seconds(60)));
  EXPECT_EQ(*federation.ended(), store::RunState::finished);
  federation.stop();

  auto history = federation.open_store();
  auto results = results_by_client(history, *run, 1);
  EXPECT_EQ(results["good-1"].status, store::ResultStatus::ok);
  EXPECT_EQ(results["strict"].status, store::ResultStatus::dropped);
  EXPECT_EQ(results["strict"].reason,
            "could not train: site policy: model type 'logreg' is not allowed (allowed: mlp)");
  EXPECT_TRUE(audit_has(dir.path("strict-audit.jsonl"), "refused", "model_type"));
  EXPECT_TRUE(client::verify_audit_log(dir.path("strict-audit.jsonl")));
}

TEST(SiteControl, OnlyThePinnedServerCertificateIsAccepted) {
  TempDir dir;
  Federation federation(dir);
  for (const char* id : {"pinned", "wrong-key", "wrong-name"}) {
    federation.add_client_certificate(id);
  }
  federation.start_server();
  const auto fingerprint = fingerprint_of(federation.pki().server_cert());
  ASSERT_EQ(fingerprint.size(), 64u);
  client::SitePolicy wrong_key;
  wrong_key.server.sha256 = {std::string(64, 'a')};
  federation.start_client("wrong-key", breast_cancer(), wrong_key, dir.path("key-audit.jsonl"));
  client::SitePolicy wrong_name;
  wrong_name.server.common_name = "another-server";
  federation.start_client("wrong-name", breast_cancer(), wrong_name, dir.path("name-audit.jsonl"));
  client::SitePolicy pinned;
  pinned.server.sha256 = {fingerprint};
  pinned.server.common_name = "fedcore-server";
  federation.start_client("pinned", breast_cancer(), pinned);
  ASSERT_TRUE(
      federation.wait_until([&] { return federation.online() >= 1; }, std::chrono::seconds(30)));
  // Both refusals are on record at their sites (bounded polling, as the fixture does).
  ASSERT_TRUE(federation.poll_server(
      [&](auto&) {
        return audit_has(dir.path("key-audit.jsonl"), "server_refused", "server_fingerprint") &&
               audit_has(dir.path("name-audit.jsonl"), "server_refused", "server_name");
      },
      std::chrono::seconds(30)));
  EXPECT_EQ(federation.online(), 1);  // only the pinned client ever said HELLO
  federation.stop();
  EXPECT_TRUE(client::verify_audit_log(dir.path("key-audit.jsonl")));
}

TEST(SiteControl, ARogueClaimingMoreSamplesThanItsHelloIsRejected) {
  TempDir dir;
  Federation federation(dir);
  for (const char* id : {"good-1", "good-2", "inflated"}) {
    federation.add_client_certificate(id);
  }
  const auto port = federation.start_server();
  federation.start_client("good-1", breast_cancer());
  federation.start_client("good-2", breast_cancer());
  RogueClient rogue(Misbehaviour::inflated_samples, federation.pki().client_config("inflated"),
                    port);
  ASSERT_TRUE(
      federation.wait_until([&] { return federation.online() == 3; }, std::chrono::seconds(30)));
  auto run = federation.start_run(
      R"({"model":{"type":"logreg"},"rounds":1,"clients_per_round":3,"min_clients":2,
      "round_timeout_s":600,"seed":3,"optimizer":{"kind":"sgd","lr":0.1}})");
  ASSERT_TRUE(run) << run.error().to_string();
  ASSERT_TRUE(federation.wait_until([&] { return federation.ended().has_value(); },
                                    std::chrono::seconds(60)));
  EXPECT_EQ(*federation.ended(), store::RunState::finished);
  federation.stop();
  auto history = federation.open_store();
  auto results = results_by_client(history, *run, 1);
  EXPECT_EQ(results["inflated"].status, store::ResultStatus::rejected);
  EXPECT_EQ(results["inflated"].reason,
            "update claims 4000000000 samples; the client declared 100 at HELLO");
  EXPECT_EQ(results["good-1"].status, store::ResultStatus::ok);
}

}  // namespace
}  // namespace fedcore
