// Key binding and the consistency check against a real PKI (certs/fedcore-pki): a server
// that swaps a client's keys or relays them under another certificate is caught by the
// receiving client, and so is one that shows clients different survivor lists or relays
// signatures that are not its neighbours' over the list the client signed.
#include "shared/secagg/key_binding.hpp"

#include <functional>

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
    for (const char* id : {"site-a", "site-b", "site-c", "site-d", "site-e"}) {
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

// Five bound sites (k = 4, t = 3: each neighbours every other) driven up to the
// consistency check; site i's update is i + 1 in every coordinate.
class BoundRound {
 public:
  static constexpr std::size_t kDimension = 8;

  explicit BoundRound(const std::function<ClientRound(const std::string&)>& bound,
                      std::uint32_t min_survivors = 0)
      : server_(3, 9, bound_plan(min_survivors), ids_, kDimension) {
    for (const auto& id : ids_) {
      clients_.push_back(SecAggClient::start(bound(id)).value());
    }
    for (std::size_t i = 0; i < ids_.size(); ++i) {
      EXPECT_TRUE(server_.on_advertise(ids_[i], clients_[i].advertise()));
    }
    Rng rng(2);
    auto keys = server_.close_advertising(rng).value();
    for (std::size_t i = 0; i < ids_.size(); ++i) {
      EXPECT_TRUE(server_.on_shares(ids_[i], clients_[i].share_keys(keys.at(ids_[i])).value()));
    }
    auto relayed = server_.close_sharing().value();
    Rng rounding(3);
    for (std::size_t i = 0; i < ids_.size(); ++i) {
      const std::vector<float> delta(kDimension, float(i + 1));
      EXPECT_TRUE(server_.on_masked(
          ids_[i], clients_[i].masked_input(relayed.at(ids_[i]), delta, 1.0, rounding).value()));
    }
  }

  SecAggClient& client(std::size_t i) { return clients_[i]; }
  const std::string& id(std::size_t i) const { return ids_[i]; }
  SecAggServer& server() { return server_; }
  // `signer`'s signature over `list`, as the server would relay it.
  Attestation attestation(std::size_t signer, const SurvivorList& list) {
    return {ids_[signer], clients_[signer].sign_survivors(list).value().signature};
  }

 private:
  static RoundPlan bound_plan(std::uint32_t min_survivors) {
    auto plan = plan_round(5, {}).value();
    plan.bind_keys = true;
    plan.min_survivors = min_survivors;
    return plan;
  }
  std::vector<std::string> ids_{"site-a", "site-b", "site-c", "site-d", "site-e"};
  SecAggServer server_;
  std::vector<SecAggClient> clients_;
};

TEST_F(KeyBinding, TheConsistencyCheckCompletesARoundWithBoundKeys) {
  BoundRound round([](const std::string& id) { return bound(id); });
  auto& server = round.server();
  const auto list = server.close_masking().value();
  ASSERT_EQ(list.survivors.size(), 5u);
  EXPECT_EQ(server.stage(), ServerStage::consistency);
  EXPECT_EQ(server.on_signature(round.id(0), {}).error().code, errc::permission_denied)
      << "a round that binds keys refuses an unsigned survivor list";
  for (std::size_t i = 0; i < 5; ++i) {
    auto signature = round.client(i).sign_survivors(list);
    ASSERT_TRUE(signature) << signature.error().message;
    EXPECT_FALSE(signature->signature.empty());
    ASSERT_TRUE(server.on_signature(round.id(i), *signature));
  }
  auto requests = server.close_consistency().value();
  ASSERT_EQ(requests.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    const auto& request = requests.at(round.id(i));
    EXPECT_EQ(request.signatures.size(), 4u);  // its four neighbours', not its own
    auto response = round.client(i).unmask(request);
    ASSERT_TRUE(response) << response.error().message;
    ASSERT_TRUE(server.on_unmask(round.id(i), *response));
  }
  auto result = server.finish();
  ASSERT_TRUE(result) << result.error().message;
  for (float v : result->mean_delta) {
    EXPECT_NEAR(v, 3.0, 1e-4);  // (1 + 2 + 3 + 4 + 5) / 5
  }
}

TEST_F(KeyBinding, ASplitViewOfTheSurvivorsGetsNoShareFromAnyone) {
  // The attack the check exists for: site-e sent its masked input, but the server tells
  // site-c and site-d that it dropped (to get shares of its mask key) while site-a,
  // site-b and site-e see it as a survivor (to get shares of its self mask).
  BoundRound round([](const std::string& id) { return bound(id); });
  const auto all = round.server().close_masking().value();
  const SurvivorList without_e{{"site-a", "site-b", "site-c", "site-d"}};
  std::vector<Attestation> on_all;
  std::vector<Attestation> on_without_e;
  for (std::size_t i : {0, 1, 4}) {
    on_all.push_back(round.attestation(i, all));
  }
  for (std::size_t i : {2, 3}) {
    on_without_e.push_back(round.attestation(i, without_e));
  }
  // Each side holds fewer than t = 3 neighbours' signatures over its list: no one reveals.
  auto a = round.client(0).unmask({all.survivors, {}, on_all});
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code, errc::permission_denied);
  EXPECT_NE(a.error().message.find("fewer than the threshold 3"), std::string::npos)
      << a.error().message;
  auto c = round.client(2).unmask({without_e.survivors, {"site-e"}, on_without_e});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, errc::permission_denied);
  // Signatures over the other list do not count for this one either.
  std::vector<Attestation> mixed = on_all;
  mixed.insert(mixed.end(), on_without_e.begin(), on_without_e.end());
  EXPECT_EQ(round.client(1).unmask({all.survivors, {}, mixed}).error().code,
            errc::permission_denied);
}

// Distributed DP sized its noise shares for the plan's min_survivors (here all 5): a server
// that tells sites one of them dropped gets no signature, so the under-noised sum of 4 can
// never be unmasked; the full list is signed.
TEST_F(KeyBinding, NoSiteSignsASurvivorListShorterThanItsNoiseWasSizedFor) {
  BoundRound round([](const std::string& id) { return bound(id); }, 5);
  const auto all = round.server().close_masking().value();
  ASSERT_EQ(all.survivors.size(), 5u);
  const SurvivorList four{{"site-a", "site-b", "site-c", "site-d"}};
  auto refused = round.client(0).sign_survivors(four);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::failed_precondition);
  EXPECT_NE(refused.error().message.find("4 survivors (5 needed)"), std::string::npos)
      << refused.error().message;
  EXPECT_TRUE(round.client(1).sign_survivors(all));
}

TEST_F(KeyBinding, ForgedMisattributedOrRepeatedSignaturesAreNotCounted) {
  BoundRound round([](const std::string& id) { return bound(id); });
  const auto all = round.server().close_masking().value();
  std::vector<Attestation> honest;
  for (std::size_t i = 0; i < 5; ++i) {
    honest.push_back(round.attestation(i, all));
  }
  // site-a's view: b's signature presented as c's, d's twice, e's with a flipped bit.
  auto as_c = honest[1];
  as_c.client_id = "site-c";
  auto flipped = honest[4];
  flipped.signature.back() ^= 1;
  auto refused = round.client(0).unmask({all.survivors, {}, {as_c, honest[3], honest[3], flipped}});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("1 of our neighbours' signatures"), std::string::npos)
      << refused.error().message;
  // A signature by a client that is not on the list (or ourselves) does not count either;
  // the honest relay of the same list then opens the shares.
  auto response =
      round.client(0).unmask({all.survivors, {}, {honest[0], honest[1], honest[2], honest[3]}});
  ASSERT_TRUE(response) << response.error().message;
  EXPECT_EQ(response->shares.size(), 4u);
}

}  // namespace
}  // namespace fedcore::secagg
