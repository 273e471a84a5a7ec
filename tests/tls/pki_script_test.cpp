// certs/fedcore-pki itself: refusals, file permissions, silence about keys, the CSR flow.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/tls/context.hpp"
#include "tests/support/build_outputs.hpp"
#include "tests/tls/tls_support.hpp"

namespace fedcore::tls::testing {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

fs::perms permissions(const std::string& path) {
  return fs::status(path).permissions() & fs::perms::all;
}

TEST(PkiScript, HelpDescribesEveryCommand) {
  const CommandResult help = run_command(shell_quote(fedcore::testing::pki_script()) + " --help");
  ASSERT_EQ(help.status, 0) << help.output;
  for (const char* command : {"init", "server", "client", "sign-csr", "revoke", "crl", "list"}) {
    EXPECT_NE(help.output.find(std::string("\n  ") + command), std::string::npos) << command;
  }
  const CommandResult crl_help =
      run_command(shell_quote(fedcore::testing::pki_script()) + " crl --help");
  EXPECT_NE(crl_help.output.find("--expired"), std::string::npos) << crl_help.output;
  EXPECT_EQ(run_command(shell_quote(fedcore::testing::pki_script()) + " no-such-command").status,
            2);
}

TEST(PkiScript, InitRefusesAnExistingCaUnlessForced) {
  Federation federation(Federation::Ids{});
  ASSERT_TRUE(federation.ok) << federation.log;
  const std::string first_ca = slurp(federation.pki.ca());
  ASSERT_FALSE(first_ca.empty());
  const CommandResult again = federation.pki.run("init");
  EXPECT_EQ(again.status, 1);
  EXPECT_NE(again.output.find("already holds a federation CA"), std::string::npos) << again.output;
  EXPECT_EQ(slurp(federation.pki.ca()), first_ca);
  const CommandResult forced = federation.pki.run("init --force");
  EXPECT_EQ(forced.status, 0) << forced.output;
  EXPECT_NE(slurp(federation.pki.ca()), first_ca);
}

TEST(PkiScript, KeysArePrivateAndNeverPrinted) {
  Federation federation;
  ASSERT_TRUE(federation.ok) << federation.log;
  const Pki& pki = federation.pki;
  federation.step("revoke hospital-b");
  federation.step("crl");
  federation.step("list");
  ASSERT_TRUE(federation.ok) << federation.log;
  EXPECT_EQ(federation.log.find("PRIVATE"), std::string::npos) << federation.log;
  EXPECT_EQ(federation.log.find("-----BEGIN"), std::string::npos) << federation.log;
  for (const std::string& key : {pki.ca_key(), pki.server_key(), pki.client_key("hospital-a")}) {
    EXPECT_EQ(permissions(key), fs::perms::owner_read | fs::perms::owner_write) << key;
  }
  // Certificates and the CRL are public.
  for (const std::string& cert : {pki.ca(), pki.crl(), pki.client_cert("hospital-a")}) {
    EXPECT_NE(permissions(cert) & fs::perms::others_read, fs::perms::none) << cert;
  }
}

TEST(PkiScript, ClientIdsAreValidated) {
  Federation federation(Federation::Ids{});
  ASSERT_TRUE(federation.ok) << federation.log;
  for (const std::string& bad :
       std::vector<std::string>{"'bad id'", "'semi;colon'", std::string(65, 'a')}) {
    const CommandResult r = federation.pki.run("client " + bad);
    EXPECT_EQ(r.status, 2) << bad << ": " << r.output;
    EXPECT_NE(r.output.find("invalid client id"), std::string::npos) << r.output;
  }
  EXPECT_EQ(federation.step("client " + std::string(64, 'a')), 0) << federation.log;
  EXPECT_EQ(federation.step("client A.b_c-9"), 0) << federation.log;
}

TEST(PkiScript, ReissuingAValidClientNeedsForceAndRevokesTheOldCertificate) {
  Federation federation(Federation::Ids{"hospital-a"});
  ASSERT_TRUE(federation.ok) << federation.log;
  const CommandResult again = federation.pki.run("client hospital-a");
  EXPECT_EQ(again.status, 1) << again.output;
  EXPECT_NE(again.output.find("--force"), std::string::npos) << again.output;
  ASSERT_EQ(federation.step("client hospital-a --force"), 0) << federation.log;
  const CommandResult list = federation.pki.run("list");
  ASSERT_EQ(list.status, 0) << list.output;
  EXPECT_NE(list.output.find("revoked  client"), std::string::npos) << list.output;
  EXPECT_NE(list.output.find("valid    client"), std::string::npos) << list.output;
  EXPECT_NE(list.output.find("valid    server"), std::string::npos) << list.output;
}

TEST(PkiScript, RevokeMarksTheClientAndRefusesTwice) {
  Federation federation(Federation::Ids{"hospital-a"});
  ASSERT_TRUE(federation.ok) << federation.log;
  ASSERT_EQ(federation.step("revoke hospital-a"), 0) << federation.log;
  const CommandResult twice = federation.pki.run("revoke hospital-a");
  EXPECT_EQ(twice.status, 1);
  EXPECT_NE(twice.output.find("already revoked"), std::string::npos) << twice.output;
  EXPECT_EQ(federation.pki.run("revoke nobody").status, 1);
  const CommandResult crl =
      run_command("openssl crl -in " + shell_quote(federation.pki.crl()) + " -noout -text");
  EXPECT_NE(crl.output.find("Revoked Certificates:"), std::string::npos) << crl.output;
}

TEST(PkiScript, ServerCertificateCarriesLoopbackAndExtraNames) {
  Federation federation(Federation::Ids{});
  ASSERT_TRUE(federation.ok) << federation.log;
  ASSERT_EQ(federation.step("server edge --san DNS:fedcore.example.org --san IP:10.1.2.3"), 0)
      << federation.log;
  const CommandResult text =
      run_command("openssl x509 -in " + shell_quote(federation.pki.server_cert("edge")) +
                  " -noout -ext subjectAltName,extendedKeyUsage");
  for (const char* name : {"DNS:localhost", "IP Address:127.0.0.1", "DNS:fedcore.example.org",
                           "IP Address:10.1.2.3", "TLS Web Server Authentication"}) {
    EXPECT_NE(text.output.find(name), std::string::npos) << text.output;
  }
  EXPECT_EQ(federation.pki.run("server edge2 --san 'DNS:a,IP:1.2.3.4'").status, 2);
}

TEST(PkiScript, DirectoryComesFromTheEnvironmentWhenNotGiven) {
  fedcore::testing::TempDir temp;
  const std::string dir = temp.path("from-env");
  const CommandResult r = run_command("FEDCORE_PKI_DIR=" + shell_quote(dir) + " " +
                                      shell_quote(fedcore::testing::pki_script()) + " init");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir + "/ca.pem"));
  EXPECT_TRUE(fs::exists(dir + "/crl.pem"));
  EXPECT_TRUE(fs::exists(dir + "/index.txt"));
}

// The hospital keeps its key; only the CSR travels, and the certificate it gets back works.
TEST(PkiScript, SignCsrIssuesACertificateForAKeyThatNeverLeavesTheClient) {
  Federation federation(Federation::Ids{});
  ASSERT_TRUE(federation.ok) << federation.log;
  const std::string hospital = federation.temp.path("hospital");
  fs::create_directories(hospital);
  const std::string key = hospital + "/hospital-c.key";
  const std::string csr = hospital + "/hospital-c.csr";
  const CommandResult made = run_command(
      "umask 077 && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out " +
      shell_quote(key) + " && openssl req -new -key " + shell_quote(key) +
      " -subj /CN=hospital-c -out " + shell_quote(csr));
  ASSERT_EQ(made.status, 0) << made.output;

  const CommandResult wrong_id = federation.pki.run("sign-csr hospital-d " + shell_quote(csr));
  EXPECT_EQ(wrong_id.status, 1);
  EXPECT_NE(wrong_id.output.find("CN must be 'hospital-d'"), std::string::npos) << wrong_id.output;

  ASSERT_EQ(federation.step("sign-csr hospital-c " + shell_quote(csr)), 0) << federation.log;
  EXPECT_FALSE(fs::exists(federation.pki.client_key("hospital-c")));

  auto server = make_server_context(federation.pki.server_config());
  ASSERT_TRUE(server) << server.error().to_string();
  ClientTlsConfig config = federation.pki.client_config("hospital-c");
  config.key_file = key;
  auto client = make_client_context(config);
  ASSERT_TRUE(client) << client.error().to_string();
  const Attempt a = attempt(*server, *client);
  ASSERT_TRUE(a.connected()) << a.describe();
  ASSERT_TRUE(a.peer_cn.has_value() && *a.peer_cn);
  EXPECT_EQ(**a.peer_cn, "hospital-c");
}

TEST(PkiScript, SignCsrRefusesWeakKeys) {
  Federation federation(Federation::Ids{});
  ASSERT_TRUE(federation.ok) << federation.log;
  const std::string key = federation.temp.path("weak.key");
  const std::string csr = federation.temp.path("weak.csr");
  const CommandResult made =
      run_command("openssl genpkey -quiet -algorithm RSA -pkeyopt rsa_keygen_bits:1024 -out " +
                  shell_quote(key) + " && openssl req -new -key " + shell_quote(key) +
                  " -subj /CN=weak -out " + shell_quote(csr));
  ASSERT_EQ(made.status, 0) << made.output;
  const CommandResult r = federation.pki.run("sign-csr weak " + shell_quote(csr));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("at least 2048"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace fedcore::tls::testing
