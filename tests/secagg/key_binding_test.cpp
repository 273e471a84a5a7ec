// Key binding against a real PKI (certs/fedcore-pki): a server that swaps a client's keys
// or relays them under another certificate is caught by the receiving client.
#include "shared/secagg/key_binding.hpp"

#include <gtest/gtest.h>

#include "shared/secagg/client.hpp"
#include "shared/secagg/server.hpp"
#include "tests/temp_dir.hpp"
#include "tests/tls/tls_support.hpp"

namespace fedcore::secagg {
namespace {

class KeyBinding : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    pki_ = new tls::testing::Pki(dir_->path("pki"));
    ASSERT_EQ(pki_->run("init").status, 0);
    for (const char* id : {"site-a", "site-b", "site-c", "site-d"}) {
      ASSERT_EQ(pki_->run(std::string("client ") + id).status, 0);
    }
    // A second CA, whose certificates the federation must not accept.
    rogue_ = new tls::testing::Pki(dir_->path("rogue"));
    ASSERT_EQ(rogue_->run("init").status, 0);
    ASSERT_EQ(rogue_->run("client site-b").status, 0);
  }
  static void TearDownTestSuite() {
    delete rogue_;
    delete pki_;
    delete dir_;
  }

  static ClientRound bound(const std::string& id, const tls::testing::Pki& pki = *pki_) {
    return {3, 9, id, Signer::from_files(pki.client_key(id), pki.client_cert(id)).value(),
            TrustAnchor::from_file(pki_->ca()).value()};
  }

  static inline testing::TempDir* dir_ = nullptr;
  static inline tls::testing::Pki* pki_ = nullptr;
  static inline tls::testing::Pki* rogue_ = nullptr;
};

// Runs the advertise stage for four bound clients; returns site-a's neighbour message.
NeighbourKeys neighbour_keys_for_a(std::vector<SecAggClient>& clients) {
  std::vector<std::string> ids{"site-a", "site-b", "site-c", "site-d"};
  auto plan = plan_round(4, {}).value();
  plan.bind_keys = true;
  SecAggServer server(3, 9, plan, ids, 4);
  for (std::size_t i = 0; i < clients.size(); ++i) {
    EXPECT_TRUE(server.on_advertise(ids[i], clients[i].advertise()));
  }
  Rng rng(1);
  return server.close_advertising(rng).value().at("site-a");
}

TEST_F(KeyBinding, SignedKeysFromFederationCertificatesAreAccepted) {
  std::vector<SecAggClient> clients;
  for (const char* id : {"site-a", "site-b", "site-c", "site-d"}) {
    clients.push_back(SecAggClient::start(bound(id)).value());
  }
  auto keys = neighbour_keys_for_a(clients);
  ASSERT_EQ(keys.neighbours.size(), 3u);
  auto upload = clients[0].share_keys(keys);
  ASSERT_TRUE(upload) << upload.error().message;
  EXPECT_EQ(upload->shares.size(), 3u);
}

TEST_F(KeyBinding, ASwappedKeyIsRefused) {
  std::vector<SecAggClient> clients;
  for (const char* id : {"site-a", "site-b", "site-c", "site-d"}) {
    clients.push_back(SecAggClient::start(bound(id)).value());
  }
  auto keys = neighbour_keys_for_a(clients);
  // The server puts its own mask key in site-b's place.
  auto server_key = AgreementKey::generate().value();
  for (auto& n : keys.neighbours) {
    if (n.client_id == "site-b") {
      n.mask_public = server_key.public_key();
    }
  }
  auto refused = clients[0].share_keys(keys);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::permission_denied);
  EXPECT_NE(refused.error().message.find("does not verify"), std::string::npos)
      << refused.error().message;
}

TEST_F(KeyBinding, KeysUnderAnotherIdentityOrCaOrUnsignedAreRefused) {
  std::vector<SecAggClient> clients;
  for (const char* id : {"site-a", "site-b", "site-c", "site-d"}) {
    clients.push_back(SecAggClient::start(bound(id)).value());
  }
  const auto original = neighbour_keys_for_a(clients);
  auto find_b = [](NeighbourKeys& k) -> AdvertisedKeys& {
    for (auto& n : k.neighbours) {
      if (n.client_id == "site-b") {
        return n;
      }
    }
    throw std::runtime_error("site-b is not a neighbour");
  };
  {
    // site-c's certificate presented for site-b's keys.
    auto keys = original;
    find_b(keys).certificate_pem = find_b(keys).certificate_pem.empty() ? "" : [&] {
      for (const auto& n : original.neighbours) {
        if (n.client_id == "site-c") {
          return n.certificate_pem;
        }
      }
      return std::string();
    }();
    auto fresh = SecAggClient::start(bound("site-a")).value();
    (void)fresh.advertise();
    EXPECT_EQ(fresh.share_keys(keys).error().code, errc::permission_denied);
  }
  {
    // A certificate for "site-b" from another CA, keys signed with its key.
    auto rogue_signer =
        Signer::from_files(rogue_->client_key("site-b"), rogue_->client_cert("site-b")).value();
    auto keys = original;
    auto& b = find_b(keys);
    b.certificate_pem = rogue_signer->certificate_pem();
    b.signature =
        rogue_signer->sign(binding_message(3, 9, "site-b", b.cipher_public, b.mask_public));
    auto fresh = SecAggClient::start(bound("site-a")).value();
    (void)fresh.advertise();
    auto refused = fresh.share_keys(keys);
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.error().message.find("does not chain"), std::string::npos)
        << refused.error().message;
  }
  {
    auto keys = original;
    find_b(keys).signature.clear();
    auto fresh = SecAggClient::start(bound("site-a")).value();
    (void)fresh.advertise();
    EXPECT_EQ(fresh.share_keys(keys).error().code, errc::permission_denied);
  }
}

TEST_F(KeyBinding, ABindingRoundRefusesUnsignedKeysAndSitesWithoutTheCa) {
  auto plan = plan_round(4, {}).value();
  plan.bind_keys = true;
  SecAggServer server(3, 9, plan, {"site-a", "site-b", "site-c", "site-d"}, 4);
  auto unsigned_site = SecAggClient::start({3, 9, "site-a", nullptr, nullptr}).value();
  auto refused = server.on_advertise("site-a", unsigned_site.advertise());
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::permission_denied);
  // A site without the CA cannot check its neighbours: it does not join.
  std::vector<SecAggClient> clients;
  for (const char* id : {"site-a", "site-b", "site-c", "site-d"}) {
    clients.push_back(SecAggClient::start(bound(id)).value());
  }
  auto keys = neighbour_keys_for_a(clients);
  (void)unsigned_site.advertise();
  EXPECT_EQ(unsigned_site.share_keys(keys).error().code, errc::failed_precondition);
}

}  // namespace
}  // namespace fedcore::secagg
