// make_server_context / make_client_context on bad configurations: the specific error code,
// and a message that names the file.
#include "shared/tls/context.hpp"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "tests/tls/tls_support.hpp"

namespace fedcore::tls::testing {
namespace {

namespace ssl = boost::asio::ssl;

class ContextConfig : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    federation_ = new Federation(Federation::Ids{"hospital-a"});
    other_ = new Federation(Federation::Ids{});
  }
  static void TearDownTestSuite() {
    delete federation_;
    delete other_;
  }
  void SetUp() override {
    ASSERT_TRUE(federation_->ok) << federation_->log;
    ASSERT_TRUE(other_->ok) << other_->log;
  }

  static const Pki& pki() { return federation_->pki; }
  static const Pki& other_pki() { return other_->pki; }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = temp_.path(name);
    std::ofstream(path) << text;
    return path;
  }

  // Expects `code` and a message mentioning every string in `mentions`.
  static void expect_error(const result<ssl::context>& ctx, errc code,
                           std::initializer_list<std::string> mentions) {
    ASSERT_FALSE(ctx) << "expected " << errc_name(code);
    EXPECT_EQ(ctx.error().code, code) << ctx.error().to_string();
    for (const auto& text : mentions) {
      EXPECT_NE(ctx.error().message.find(text), std::string::npos)
          << "'" << ctx.error().message << "' does not mention '" << text << "'";
    }
  }

  fedcore::testing::TempDir temp_;

 private:
  static Federation* federation_;
  static Federation* other_;
};

Federation* ContextConfig::federation_ = nullptr;
Federation* ContextConfig::other_ = nullptr;

TEST_F(ContextConfig, GoodConfigurationsBuild) {
  auto server = make_server_context(pki().server_config());
  EXPECT_TRUE(server) << server.error().to_string();
  auto client = make_client_context(pki().client_config("hospital-a"));
  EXPECT_TRUE(client) << client.error().to_string();
  ASSERT_TRUE(server && client);
  EXPECT_EQ(SSL_CTX_get_min_proto_version(server->native_handle()), TLS1_3_VERSION);
  EXPECT_EQ(SSL_CTX_get_min_proto_version(client->native_handle()), TLS1_3_VERSION);
  EXPECT_EQ(SSL_CTX_get_verify_mode(server->native_handle()),
            SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT);
  EXPECT_EQ(SSL_CTX_get_verify_mode(client->native_handle()), SSL_VERIFY_PEER);
}

TEST_F(ContextConfig, MissingFilesAreNotFoundAndNamed) {
  const std::string missing = temp_.path("no-such.pem");
  for (int field = 0; field < 4; ++field) {
    ServerTlsConfig config = pki().server_config();
    std::string* target[] = {&config.ca_file, &config.cert_file, &config.key_file,
                             &config.crl_file};
    *target[field] = missing;
    expect_error(make_server_context(config), errc::not_found, {missing, "does not exist"});
  }
  for (int field = 0; field < 3; ++field) {
    ClientTlsConfig config = pki().client_config("hospital-a");
    std::string* target[] = {&config.ca_file, &config.cert_file, &config.key_file};
    *target[field] = missing;
    expect_error(make_client_context(config), errc::not_found, {missing});
  }
}

TEST_F(ContextConfig, KeyNotMatchingTheCertificateIsInvalid) {
  ServerTlsConfig config = pki().server_config();
  config.key_file = pki().client_key("hospital-a");
  expect_error(make_server_context(config), errc::invalid_argument,
               {config.key_file, config.cert_file, "does not match", "key values mismatch"});

  ClientTlsConfig client = pki().client_config("hospital-a");
  client.key_file = pki().server_key();
  expect_error(make_client_context(client), errc::invalid_argument,
               {client.key_file, "does not match"});
}

TEST_F(ContextConfig, BadPemIsInvalidAndCarriesTheOpenSslReason) {
  const std::string garbage = write("garbage.pem", "this is not PEM\n");
  const std::string torn = write(
      "torn.pem", "-----BEGIN CERTIFICATE-----\nMIIB!!!notbase64\n-----END CERTIFICATE-----\n");
  for (const std::string& bad : {garbage, torn}) {
    ServerTlsConfig config = pki().server_config();
    config.cert_file = bad;
    expect_error(make_server_context(config), errc::invalid_argument, {bad, "error:"});
    config = pki().server_config();
    config.ca_file = bad;
    expect_error(make_server_context(config), errc::invalid_argument, {bad});
    config = pki().server_config();
    config.key_file = bad;
    expect_error(make_server_context(config), errc::invalid_argument, {bad, "error:"});
    config = pki().server_config();
    config.crl_file = bad;
    expect_error(make_server_context(config), errc::invalid_argument, {bad});
  }
}

TEST_F(ContextConfig, EncryptedKeyIsRefusedWithoutPrompting) {
  const std::string encrypted = temp_.path("encrypted.key");
  const CommandResult made =
      run_command("openssl pkey -in " + shell_quote(pki().server_key()) +
                  " -aes256 -passout pass:secret -out " + shell_quote(encrypted) + " </dev/null");
  ASSERT_EQ(made.status, 0) << made.output;
  ServerTlsConfig config = pki().server_config();
  config.key_file = encrypted;
  expect_error(make_server_context(config), errc::invalid_argument,
               {encrypted, "unencrypted PEM private key"});
}

TEST_F(ContextConfig, CrlIsRequiredWhenClientsAreVerified) {
  ServerTlsConfig config = pki().server_config();
  config.crl_file.clear();
  expect_error(make_server_context(config), errc::invalid_argument, {"CRL"});
  config.require_client_cert = false;  // a CA still means presented certificates are checked
  expect_error(make_server_context(config), errc::invalid_argument, {"CRL"});
  config = pki().server_config();
  config.ca_file.clear();
  expect_error(make_server_context(config), errc::invalid_argument, {"CA file"});
}

TEST_F(ContextConfig, CrlFromAnotherCaIsInvalid) {
  ServerTlsConfig config = pki().server_config();
  config.crl_file = other_pki().crl();
  expect_error(make_server_context(config), errc::invalid_argument,
               {config.crl_file, config.ca_file, "not signed"});
}

TEST_F(ContextConfig, LeafCertificateAsCaIsInvalid) {
  ServerTlsConfig config = pki().server_config();
  config.ca_file = pki().client_cert("hospital-a");
  expect_error(make_server_context(config), errc::invalid_argument,
               {config.ca_file, "not a CA certificate"});
}

TEST_F(ContextConfig, CertificateForTheWrongSideIsInvalid) {
  ServerTlsConfig server = pki().server_config();
  server.cert_file = pki().client_cert("hospital-a");
  server.key_file = pki().client_key("hospital-a");
  expect_error(make_server_context(server), errc::invalid_argument,
               {server.cert_file, "TLS server authentication"});

  ClientTlsConfig client = pki().client_config("hospital-a");
  client.cert_file = pki().server_cert();
  client.key_file = pki().server_key();
  expect_error(make_client_context(client), errc::invalid_argument,
               {client.cert_file, "TLS client authentication"});
}

TEST_F(ContextConfig, DirectoryOrEmptyPathIsInvalid) {
  ServerTlsConfig config = pki().server_config();
  config.cert_file = pki().dir();
  expect_error(make_server_context(config), errc::invalid_argument,
               {pki().dir(), "not a regular file"});
  config = pki().server_config();
  config.key_file.clear();
  expect_error(make_server_context(config), errc::invalid_argument, {"private key"});
}

TEST_F(ContextConfig, ClientNeedsAWellFormedServerName) {
  for (const std::string& name : std::vector<std::string>{
           "", "has space", "a..b", ".leading", std::string(254, 'a'), "under_score_is.fine"}) {
    ClientTlsConfig config = pki().client_config("hospital-a", name);
    auto ctx = make_client_context(config);
    if (name == "under_score_is.fine") {
      EXPECT_TRUE(ctx) << ctx.error().to_string();
    } else {
      ASSERT_FALSE(ctx) << "'" << name << "'";
      EXPECT_EQ(ctx.error().code, errc::invalid_argument) << ctx.error().to_string();
    }
  }
  for (const std::string ip : {"127.0.0.1", "::1", "fe80::1"}) {
    EXPECT_TRUE(make_client_context(pki().client_config("hospital-a", ip))) << ip;
  }
}

TEST_F(ContextConfig, PrepareClientStreamRejectsBadNames) {
  auto ctx = make_client_context(pki().client_config("hospital-a"));
  ASSERT_TRUE(ctx) << ctx.error().to_string();
  boost::asio::io_context io;
  ssl::stream<boost::asio::ip::tcp::socket> stream(io, *ctx);
  for (const std::string name : {"", "bad name", "x\ny"}) {
    auto prepared = prepare_client_stream(stream, name);
    ASSERT_FALSE(prepared) << name;
    EXPECT_EQ(prepared.error().code, errc::invalid_argument);
  }
  EXPECT_TRUE(prepare_client_stream(stream, "fedcore.example.org"));
  EXPECT_STREQ(SSL_get_servername(stream.native_handle(), TLSEXT_NAMETYPE_host_name),
               "fedcore.example.org");
}

TEST_F(ContextConfig, NoSniForIpLiterals) {
  auto ctx = make_client_context(pki().client_config("hospital-a", "127.0.0.1"));
  ASSERT_TRUE(ctx) << ctx.error().to_string();
  boost::asio::io_context io;
  ssl::stream<boost::asio::ip::tcp::socket> stream(io, *ctx);
  ASSERT_TRUE(prepare_client_stream(stream, "127.0.0.1"));
  EXPECT_EQ(SSL_get_servername(stream.native_handle(), TLSEXT_NAMETYPE_host_name), nullptr);
}

TEST_F(ContextConfig, PeerCommonNameBeforeAHandshakeIsUnauthenticated) {
  auto ctx = make_server_context(pki().server_config());
  ASSERT_TRUE(ctx) << ctx.error().to_string();
  boost::asio::io_context io;
  ssl::stream<boost::asio::ip::tcp::socket> stream(io, *ctx);
  auto cn = peer_common_name(stream.native_handle());
  ASSERT_FALSE(cn);
  EXPECT_EQ(cn.error().code, errc::unauthenticated);
}

TEST_F(ContextConfig, OpenSslErrorQueueIsLeftEmpty) {
  ServerTlsConfig config = pki().server_config();
  config.key_file = pki().client_key("hospital-a");
  ASSERT_FALSE(make_server_context(config));
  EXPECT_EQ(ERR_peek_error(), 0ul);
}

TEST(ClientId, Rule) {
  EXPECT_TRUE(is_valid_client_id("hospital-a"));
  EXPECT_TRUE(is_valid_client_id("H0.s_p-1"));
  EXPECT_TRUE(is_valid_client_id(std::string(64, 'x')));
  EXPECT_FALSE(is_valid_client_id(""));
  EXPECT_FALSE(is_valid_client_id(std::string(65, 'x')));
  EXPECT_FALSE(is_valid_client_id("a b"));
  EXPECT_FALSE(is_valid_client_id("a/b"));
  EXPECT_FALSE(is_valid_client_id("caf\xc3\xa9"));
  EXPECT_FALSE(is_valid_client_id(std::string_view("a\0b", 3)));
}

}  // namespace
}  // namespace fedcore::tls::testing
