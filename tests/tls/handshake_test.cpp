// Real TLS handshakes over loopback between contexts made by make_server_context and
// make_client_context, with certificates made by certs/fedcore-pki.
#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include "shared/tls/context.hpp"
#include "tests/tls/tls_support.hpp"

namespace fedcore::tls::testing {
namespace {

namespace ssl = boost::asio::ssl;

ssl::context server_context(const ServerTlsConfig& config) {
  auto ctx = make_server_context(config);
  EXPECT_TRUE(ctx) << ctx.error().to_string();
  return std::move(ctx).value();
}

ssl::context client_context(const ClientTlsConfig& config) {
  auto ctx = make_client_context(config);
  EXPECT_TRUE(ctx) << ctx.error().to_string();
  return std::move(ctx).value();
}

// The server refused the client's certificate during verification, with `verify_error`.
void expect_refused_by_verification(const Attempt& a, long verify_error) {
  EXPECT_FALSE(a.timed_out) << a.describe();
  EXPECT_FALSE(a.connected()) << a.describe();
  EXPECT_EQ(ssl_reason(a.server_handshake), SSL_R_CERTIFICATE_VERIFY_FAILED) << a.describe();
  EXPECT_EQ(a.server_verify, verify_error) << a.describe();
  EXPECT_FALSE(a.peer_cn.has_value());
}

class Handshake : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { federation_ = new Federation(); }
  static void TearDownTestSuite() {
    delete federation_;
    federation_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(federation_->ok) << federation_->log; }

  static const Pki& pki() { return federation_->pki; }

 private:
  static Federation* federation_;
};

Federation* Handshake::federation_ = nullptr;

TEST_F(Handshake, GoodClientConnectsAndTheServerReadsItsClientId) {
  auto server = server_context(pki().server_config());
  for (const std::string id : {"hospital-a", "hospital-b"}) {
    auto client = client_context(pki().client_config(id));
    const Attempt a = attempt(server, client);
    ASSERT_TRUE(a.connected()) << a.describe();
    ASSERT_TRUE(a.peer_cn.has_value());
    ASSERT_TRUE(*a.peer_cn) << a.peer_cn->error().to_string();
    EXPECT_EQ(**a.peer_cn, id);
    EXPECT_EQ(a.server_verify, X509_V_OK);
    EXPECT_EQ(a.client_verify, X509_V_OK);
  }
}

TEST_F(Handshake, ConnectionIsTls13WithAnAllowedCipherSuite) {
  auto server = server_context(pki().server_config());
  auto client = client_context(pki().client_config("hospital-a"));
  // Pin the client to the last suite on the list, so the check is not a default.
  ASSERT_EQ(SSL_CTX_set_ciphersuites(client.native_handle(), "TLS_CHACHA20_POLY1305_SHA256"), 1);
  const Attempt a = attempt(server, client);
  ASSERT_TRUE(a.connected()) << a.describe();
  // The client's TLS 1.3 only configuration does not even offer AES-CCM suites.
  auto ccm_only = client_context(pki().client_config("hospital-a"));
  ASSERT_EQ(SSL_CTX_set_ciphersuites(ccm_only.native_handle(), "TLS_AES_128_CCM_SHA256"), 1);
  const Attempt refused = attempt(server, ccm_only);
  EXPECT_FALSE(refused.connected()) << refused.describe();
  EXPECT_EQ(ssl_reason(refused.server_handshake), SSL_R_NO_SHARED_CIPHER) << refused.describe();
}

TEST_F(Handshake, ClientWithoutCertificateIsRefused) {
  auto server = server_context(pki().server_config());
  auto client = anonymous_client_context(pki().ca());
  const Attempt a = attempt(server, client);
  EXPECT_FALSE(a.timed_out) << a.describe();
  EXPECT_FALSE(a.connected()) << a.describe();
  EXPECT_EQ(ssl_reason(a.server_handshake), SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE)
      << a.describe();
  // In TLS 1.3 the client finishes its side first and learns of the refusal from the alert.
  EXPECT_EQ(ssl_reason(a.client_handshake ? a.client_handshake : a.client_read),
            SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED)
      << a.describe();
}

TEST_F(Handshake, CertificateFromAnotherCaIsRefusedEvenWithAKnownClientId) {
  Federation other(Federation::Ids{"hospital-a"});
  ASSERT_TRUE(other.ok) << other.log;
  auto server = server_context(pki().server_config());
  // Same CN as a legitimate client, issued by a CA the server does not trust; the client
  // trusts the real CA, so only the server's check can stop it.
  ClientTlsConfig config = pki().client_config("hospital-a");
  config.cert_file = other.pki.client_cert("hospital-a");
  config.key_file = other.pki.client_key("hospital-a");
  auto client = client_context(config);
  const Attempt a = attempt(server, client);
  expect_refused_by_verification(a, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY);
  EXPECT_EQ(ssl_reason(a.client_handshake ? a.client_handshake : a.client_read),
            SSL_R_TLSV1_ALERT_UNKNOWN_CA)
      << a.describe();
}

TEST_F(Handshake, ServerCertificateCannotBeUsedAsAClientCertificate) {
  auto server = server_context(pki().server_config());
  // make_client_context refuses a server certificate, so swap it in afterwards.
  auto client = client_context(pki().client_config("hospital-a"));
  ASSERT_EQ(SSL_CTX_use_certificate_chain_file(client.native_handle(), pki().server_cert().c_str()),
            1);
  ASSERT_EQ(SSL_CTX_use_PrivateKey_file(client.native_handle(), pki().server_key().c_str(),
                                        SSL_FILETYPE_PEM),
            1);
  const Attempt a = attempt(server, client);
  expect_refused_by_verification(a, X509_V_ERR_INVALID_PURPOSE);
}

TEST_F(Handshake, Tls12OnlyClientIsRefused) {
  auto server = server_context(pki().server_config());
  auto client = client_context(pki().client_config("hospital-a"));
  ASSERT_EQ(SSL_CTX_set_min_proto_version(client.native_handle(), TLS1_2_VERSION), 1);
  ASSERT_EQ(SSL_CTX_set_max_proto_version(client.native_handle(), TLS1_2_VERSION), 1);
  const Attempt a = attempt(server, client);
  EXPECT_FALSE(a.timed_out) << a.describe();
  EXPECT_FALSE(a.connected()) << a.describe();
  EXPECT_EQ(ssl_reason(a.server_handshake), SSL_R_UNSUPPORTED_PROTOCOL) << a.describe();
  EXPECT_EQ(ssl_reason(a.client_handshake), SSL_R_TLSV1_ALERT_PROTOCOL_VERSION) << a.describe();
}

TEST_F(Handshake, ClientAcceptsLocalhostAndLoopbackIp) {
  auto server = server_context(pki().server_config());
  for (const std::string name : {"localhost", "127.0.0.1"}) {
    auto client = client_context(pki().client_config("hospital-a", name));
    const Attempt a = attempt(server, client, {.server_name = name});
    EXPECT_TRUE(a.connected()) << name << ": " << a.describe();
  }
}

TEST_F(Handshake, ClientRefusesServerWhoseCertificateDoesNotMatchTheName) {
  auto server = server_context(pki().server_config());
  struct Case {
    std::string name;
    long verify_error;
  };
  for (const Case& c : {Case{"wrong.example", X509_V_ERR_HOSTNAME_MISMATCH},
                        Case{"127.0.0.2", X509_V_ERR_IP_ADDRESS_MISMATCH}}) {
    auto client = client_context(pki().client_config("hospital-a", c.name));
    const Attempt a = attempt(server, client, {.server_name = c.name});
    EXPECT_FALSE(a.timed_out) << c.name << ": " << a.describe();
    EXPECT_FALSE(a.connected()) << c.name << ": " << a.describe();
    EXPECT_EQ(ssl_reason(a.client_handshake), SSL_R_CERTIFICATE_VERIFY_FAILED)
        << c.name << ": " << a.describe();
    EXPECT_EQ(a.client_verify, c.verify_error) << c.name << ": " << a.describe();
    EXPECT_TRUE(a.server_handshake) << c.name << ": " << a.describe();
  }
}

TEST_F(Handshake, PrepareClientStreamOverridesTheContextName) {
  auto server = server_context(pki().server_config());
  // The context expects localhost; this stream asks for another name.
  auto client = client_context(pki().client_config("hospital-a", "localhost"));
  const Attempt wrong = attempt(server, client, {.server_name = "wrong.example"});
  EXPECT_EQ(wrong.client_verify, X509_V_ERR_HOSTNAME_MISMATCH) << wrong.describe();
  // ... and an IP literal replaces the context's DNS name rather than adding to it.
  const Attempt ip = attempt(server, client, {.server_name = "127.0.0.1"});
  EXPECT_TRUE(ip.connected()) << ip.describe();
}

TEST_F(Handshake, ClientContextChecksTheServerNameEvenWithoutPrepareClientStream) {
  auto server = server_context(pki().server_config());
  auto client = client_context(pki().client_config("hospital-a", "wrong.example"));
  const Attempt a = attempt(server, client, {.server_name = std::nullopt});
  EXPECT_FALSE(a.connected()) << a.describe();
  EXPECT_EQ(a.client_verify, X509_V_ERR_HOSTNAME_MISMATCH) << a.describe();

  auto good = client_context(pki().client_config("hospital-a", "localhost"));
  const Attempt b = attempt(server, good, {.server_name = std::nullopt});
  EXPECT_TRUE(b.connected()) << b.describe();
}

TEST_F(Handshake, ClientRefusesServerFromAnotherCa) {
  Federation other(Federation::Ids{});
  ASSERT_TRUE(other.ok) << other.log;
  ServerTlsConfig config = pki().server_config();
  config.cert_file = other.pki.server_cert();
  config.key_file = other.pki.server_key();
  auto server = server_context(config);
  auto client = client_context(pki().client_config("hospital-a"));
  const Attempt a = attempt(server, client);
  EXPECT_FALSE(a.connected()) << a.describe();
  EXPECT_EQ(ssl_reason(a.client_handshake), SSL_R_CERTIFICATE_VERIFY_FAILED) << a.describe();
  EXPECT_EQ(a.client_verify, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY) << a.describe();
}

TEST_F(Handshake, ServerIssuesNoSessionTickets) {
  auto server = server_context(pki().server_config());
  EXPECT_EQ(SSL_CTX_get_num_tickets(server.native_handle()), 0u);
  EXPECT_NE(SSL_CTX_get_options(server.native_handle()) & SSL_OP_NO_TICKET, 0u);
  EXPECT_EQ(SSL_CTX_get_session_cache_mode(server.native_handle()), SSL_SESS_CACHE_OFF);
  EXPECT_EQ(SSL_CTX_get_max_early_data(server.native_handle()), 0u);
  auto client = client_context(pki().client_config("hospital-a"));
  const Attempt a = attempt(server, client);
  ASSERT_TRUE(a.connected()) << a.describe();
  EXPECT_EQ(a.server_num_tickets, 0u);
  EXPECT_FALSE(a.client_session_resumable);
}

// Shows the resumability check above can fail: a server that does send tickets makes the
// client's session resumable.
TEST_F(Handshake, ResumabilityCheckDetectsTicketsWhenEnabled) {
  auto server = server_context(pki().server_config());
  SSL_CTX* native = server.native_handle();
  SSL_CTX_clear_options(native, SSL_OP_NO_TICKET);
  ASSERT_EQ(SSL_CTX_set_num_tickets(native, 2), 1);
  SSL_CTX_set_session_cache_mode(native, SSL_SESS_CACHE_SERVER);
  const unsigned char id_context[] = "fedcore-test";
  ASSERT_EQ(SSL_CTX_set_session_id_context(native, id_context, sizeof id_context - 1), 1);
  auto client = client_context(pki().client_config("hospital-a"));
  const Attempt a = attempt(server, client);
  ASSERT_TRUE(a.connected()) << a.describe();
  EXPECT_TRUE(a.client_session_resumable);
}

TEST_F(Handshake, OptionalClientCertificates) {
  // No CA: no certificate is asked for, and the peer is anonymous.
  ServerTlsConfig open = pki().server_config();
  open.require_client_cert = false;
  open.ca_file.clear();
  open.crl_file.clear();
  auto open_server = server_context(open);
  auto client = client_context(pki().client_config("hospital-a"));
  const Attempt a = attempt(open_server, client);
  ASSERT_TRUE(a.connected()) << a.describe();
  ASSERT_TRUE(a.peer_cn.has_value());
  ASSERT_FALSE(*a.peer_cn);
  EXPECT_EQ(a.peer_cn->error().code, errc::unauthenticated);

  // With a CA: anonymous clients pass, a presented certificate is verified and named.
  ServerTlsConfig optional = pki().server_config();
  optional.require_client_cert = false;
  auto optional_server = server_context(optional);
  auto anonymous = anonymous_client_context(pki().ca());
  const Attempt b = attempt(optional_server, anonymous);
  ASSERT_TRUE(b.connected()) << b.describe();
  ASSERT_TRUE(b.peer_cn.has_value());
  EXPECT_EQ(b.peer_cn->error().code, errc::unauthenticated);
  const Attempt c = attempt(optional_server, client);
  ASSERT_TRUE(c.connected()) << c.describe();
  ASSERT_TRUE(c.peer_cn.has_value() && *c.peer_cn) << c.describe();
  EXPECT_EQ(**c.peer_cn, "hospital-a");
}

TEST(Revocation, RevokedClientIsRefusedOnceTheServerContextIsRebuilt) {
  Federation federation;
  ASSERT_TRUE(federation.ok) << federation.log;
  const Pki& pki = federation.pki;
  auto before = server_context(pki.server_config());
  auto client_a = client_context(pki.client_config("hospital-a"));
  auto client_b = client_context(pki.client_config("hospital-b"));
  ASSERT_TRUE(attempt(before, client_a).connected());

  ASSERT_EQ(federation.step("revoke hospital-a --reason keyCompromise"), 0) << federation.log;
  // A context holds the CRL it was made with.
  EXPECT_TRUE(attempt(before, client_a).connected());

  auto after = server_context(pki.server_config());
  const Attempt a = attempt(after, client_a);
  expect_refused_by_verification(a, X509_V_ERR_CERT_REVOKED);
  EXPECT_EQ(ssl_reason(a.client_handshake ? a.client_handshake : a.client_read),
            SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED)
      << a.describe();
  const Attempt b = attempt(after, client_b);
  EXPECT_TRUE(b.connected()) << b.describe();
}

TEST(Revocation, ExpiredCrlFailsClosedForEveryClient) {
  Federation federation;
  ASSERT_TRUE(federation.ok) << federation.log;
  const Pki& pki = federation.pki;
  // `crl --expired` signs a CRL whose nextUpdate is a day in the past (see the script).
  ASSERT_EQ(federation.step("crl --expired"), 0) << federation.log;
  // Loading it succeeds: a CRL can also expire while the server runs, so the refusal must
  // come from the handshake.
  auto server = server_context(pki.server_config());
  for (const std::string id : {"hospital-a", "hospital-b"}) {
    auto client = client_context(pki.client_config(id));
    const Attempt a = attempt(server, client);
    expect_refused_by_verification(a, X509_V_ERR_CRL_HAS_EXPIRED);
  }
  // A fresh CRL repairs it.
  ASSERT_EQ(federation.step("crl"), 0) << federation.log;
  auto repaired = server_context(pki.server_config());
  auto client = client_context(pki.client_config("hospital-a"));
  const Attempt a = attempt(repaired, client);
  EXPECT_TRUE(a.connected()) << a.describe();
}

TEST(Revocation, MissingCrlForTheIssuerFailsClosed) {
  // The CRL is checked at load time against the CA file, so the only way to lose it is a
  // second trusted CA whose CRL is absent: its clients must be refused.
  Federation main_ca;
  Federation second(Federation::Ids{"hospital-z"});
  ASSERT_TRUE(main_ca.ok && second.ok) << main_ca.log << second.log;
  const std::string both = main_ca.temp.path("both-cas.pem");
  ASSERT_EQ(run_command("cat " + shell_quote(main_ca.pki.ca()) + " " +
                        shell_quote(second.pki.ca()) + " > " + shell_quote(both))
                .status,
            0);
  ServerTlsConfig config = main_ca.pki.server_config();
  config.ca_file = both;
  auto server = server_context(config);
  ClientTlsConfig client_config = main_ca.pki.client_config("hospital-z");
  client_config.cert_file = second.pki.client_cert("hospital-z");
  client_config.key_file = second.pki.client_key("hospital-z");
  auto client = client_context(client_config);
  expect_refused_by_verification(attempt(server, client), X509_V_ERR_UNABLE_TO_GET_CRL);
}

// Certificates the script would never issue, made with the openssl CLI and the real CA key,
// to reach peer_common_name's checks after a successful handshake.
class OddClientCertificate : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(federation_.ok) << federation_.log; }

  // Issues a client certificate with `subject` and returns the context presenting it.
  ssl::context client_with_subject(const std::string& subject) {
    const std::string dir = federation_.temp.path();
    const std::string ext = dir + "/client.ext";
    const std::string key = dir + "/odd.key";
    const std::string cert = dir + "/odd.pem";
    const std::string script =
        "set -e; cd " + shell_quote(dir) +
        "; printf '%s\\n' 'basicConstraints=critical,CA:false' "
        "'keyUsage=critical,digitalSignature' 'extendedKeyUsage=clientAuth' "
        "'subjectKeyIdentifier=hash' 'authorityKeyIdentifier=keyid:always' > client.ext"
        "; openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out odd.key"
        "; openssl req -utf8 -new -key odd.key -subj " +
        shell_quote(subject) +
        " -out odd.csr"
        "; openssl x509 -req -in odd.csr -CA " +
        shell_quote(federation_.pki.ca()) + " -CAkey " + shell_quote(federation_.pki.ca_key()) +
        " -set_serial 0x7777 -days 1 -extfile client.ext -out odd.pem";
    const CommandResult made = run_command("sh -c " + shell_quote(script));
    EXPECT_EQ(made.status, 0) << made.output;
    ClientTlsConfig config = federation_.pki.client_config("unused");
    config.cert_file = cert;
    config.key_file = key;
    return client_context(config);
  }

  Federation federation_{Federation::Ids{}};
};

TEST_F(OddClientCertificate, CnThatIsNotAClientIdIsRejectedAfterTheHandshake) {
  auto server = server_context(federation_.pki.server_config());
  for (const std::string subject : {"/CN=has space", "/CN=semi;colon", "/CN=caf\xc3\xa9"}) {
    auto client = client_with_subject(subject);
    const Attempt a = attempt(server, client);
    ASSERT_TRUE(a.connected()) << subject << ": " << a.describe();
    ASSERT_TRUE(a.peer_cn.has_value());
    ASSERT_FALSE(*a.peer_cn) << subject;
    EXPECT_EQ(a.peer_cn->error().code, errc::invalid_argument) << subject;
    EXPECT_NE(a.peer_cn->error().message.find("is not a client id"), std::string::npos)
        << a.peer_cn->error().message;
  }
}

TEST_F(OddClientCertificate, MissingOrRepeatedCnIsRejected) {
  auto server = server_context(federation_.pki.server_config());
  struct Case {
    std::string subject;
    std::string reason;
  };
  for (const Case& c : {Case{"/O=Hospital without CN", "has no CN"},
                        Case{"/CN=hospital-a/CN=hospital-b", "more than one CN"}}) {
    auto client = client_with_subject(c.subject);
    const Attempt a = attempt(server, client);
    ASSERT_TRUE(a.connected()) << c.subject << ": " << a.describe();
    ASSERT_TRUE(a.peer_cn.has_value());
    ASSERT_FALSE(*a.peer_cn) << c.subject;
    EXPECT_EQ(a.peer_cn->error().code, errc::invalid_argument) << c.subject;
    EXPECT_NE(a.peer_cn->error().message.find(c.reason), std::string::npos)
        << a.peer_cn->error().message;
  }
}

}  // namespace
}  // namespace fedcore::tls::testing
