#include "shared/secagg/wire.hpp"

#include <nlohmann/json.hpp>

namespace fedcore::secagg {
namespace {

using nlohmann::json;

constexpr std::size_t kMaxItems = 1024;
constexpr std::size_t kMaxCertificate = 8192;
constexpr std::size_t kMaxId = 128;
constexpr std::size_t kMaxSignature = 1024;  // RSA-4096 is 512 bytes, ECDSA P-256 at most 72

// Reading throws nlohmann's exceptions or Bad; each parse_* turns them into one
// invalid_argument at its edge, so the field functions stay one line each.
struct Bad {
  std::string what;
};

const json& field(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) {
    throw Bad{std::string("missing '") + key + "'"};
  }
  return j.at(key);
}

std::string text(const json& j, const char* key, std::size_t max) {
  const auto& v = field(j, key);
  if (!v.is_string() || v.get_ref<const std::string&>().size() > max) {
    throw Bad{std::string("'") + key + "' must be a string of at most " + std::to_string(max) +
              " bytes"};
  }
  return v.get<std::string>();
}

Bytes hex(const json& j, const char* key, std::size_t max_bytes) {
  auto s = text(j, key, 2 * max_bytes);
  auto bytes = from_hex(s, key);
  if (!bytes) {
    throw Bad{bytes.error().message};
  }
  return std::move(*bytes);
}

const json& array(const json& j, const char* key) {
  const auto& v = field(j, key);
  if (!v.is_array() || v.size() > kMaxItems) {
    throw Bad{std::string("'") + key + "' must be an array of at most 1024 items"};
  }
  return v;
}

std::uint32_t u32(const json& j, const char* key) {
  const auto& v = field(j, key);
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() > 0xffffffffu) {
    throw Bad{std::string("'") + key + "' must be a 32-bit unsigned integer"};
  }
  return v.get<std::uint32_t>();
}

json envelope_json(const Envelope& e) {
  return json{{"run", e.run}, {"round", e.round}, {"nonce", e.nonce}};
}

Envelope read_envelope(const json& j) {
  Envelope e;
  const auto& run = field(j, "run");
  const auto& round = field(j, "round");
  if (!run.is_number_integer() || !round.is_number_integer() || run.get<std::int64_t>() < 1 ||
      round.get<std::int64_t>() < 1) {
    throw Bad{"'run' and 'round' must be positive integers"};
  }
  e.run = run.get<std::int64_t>();
  e.round = round.get<std::int64_t>();
  e.nonce = text(j, "nonce", 32);
  if (e.nonce.size() != 32 || e.nonce.find_first_not_of("0123456789abcdef") != std::string::npos) {
    throw Bad{"'nonce' must be 32 lowercase hex digits"};
  }
  return e;
}

json keys_json(const AdvertisedKeys& k) {
  return json{{"client_id", k.client_id},
              {"cipher_public", to_hex(k.cipher_public)},
              {"mask_public", to_hex(k.mask_public)},
              {"signature", to_hex(k.signature)},
              {"certificate", k.certificate_pem}};
}

AdvertisedKeys read_keys(const json& j) {
  AdvertisedKeys k;
  k.client_id = text(j, "client_id", kMaxId);
  k.cipher_public = hex(j, "cipher_public", kPublicKeySize);
  k.mask_public = hex(j, "mask_public", kPublicKeySize);
  k.signature = hex(j, "signature", kMaxSignature);
  k.certificate_pem = text(j, "certificate", kMaxCertificate);
  return k;
}

json sealed_json(const std::vector<SealedShare>& shares) {
  json out = json::array();
  for (const auto& s : shares) {
    out.push_back({{"peer", s.peer}, {"sealed", to_hex(s.sealed)}});
  }
  return out;
}

std::vector<SealedShare> read_sealed(const json& j) {
  std::vector<SealedShare> out;
  for (const auto& item : array(j, "shares")) {
    out.push_back({text(item, "peer", kMaxId), hex(item, "sealed", 1024)});
  }
  return out;
}

std::vector<std::string> read_ids(const json& j, const char* key) {
  std::vector<std::string> out;
  for (const auto& item : array(j, key)) {
    if (!item.is_string() || item.get_ref<const std::string&>().size() > kMaxId) {
      throw Bad{std::string("'") + key + "' must list client ids"};
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

template <class Body, class ReadBody>
result<Wire<Body>> parse(std::string_view what, std::string_view metadata, ReadBody read_body) {
  try {
    const json j = json::parse(metadata);
    Wire<Body> out;
    out.envelope = read_envelope(j);
    out.body = read_body(j);
    return out;
  } catch (const Bad& bad) {
    return fail(errc::invalid_argument, std::string(what) + ": " + bad.what);
  } catch (const json::exception& e) {
    return fail(errc::invalid_argument, std::string(what) + ": malformed JSON (" + e.what() + ")");
  }
}

}  // namespace

std::string to_metadata(const Envelope& e, const AdvertisedKeys& m) {
  auto j = envelope_json(e);
  j["keys"] = keys_json(m);
  return j.dump();
}

std::string to_metadata(const Envelope& e, const NeighbourKeys& m) {
  auto j = envelope_json(e);
  j["plan"] = {{"clients", m.plan.clients},         {"degree", m.plan.degree},
               {"threshold", m.plan.threshold},     {"clip_range", m.plan.clip_range},
               {"quant_range", m.plan.quant_range}, {"weight_cap", m.plan.weight_cap},
               {"bind_keys", m.plan.bind_keys},     {"metric_slots", m.plan.metric_slots}};
  if (m.plan.min_survivors != 0) {
    j["plan"]["min_survivors"] = m.plan.min_survivors;
  }
  j["neighbours"] = json::array();
  for (const auto& n : m.neighbours) {
    j["neighbours"].push_back(keys_json(n));
  }
  return j.dump();
}

std::string to_metadata(const Envelope& e, const SharesUpload& m) {
  auto j = envelope_json(e);
  j["shares"] = sealed_json(m.shares);
  return j.dump();
}

std::string to_metadata(const Envelope& e, const RelayedShares& m) {
  auto j = envelope_json(e);
  j["shares"] = sealed_json(m.shares);
  return j.dump();
}

std::string to_metadata(const Envelope& e) {
  return envelope_json(e).dump();
}

std::string to_metadata(const Envelope& e, const SurvivorList& m) {
  auto j = envelope_json(e);
  j["survivors"] = m.survivors;
  return j.dump();
}

std::string to_metadata(const Envelope& e, const SurvivorSignature& m) {
  auto j = envelope_json(e);
  j["signature"] = to_hex(m.signature);
  return j.dump();
}

std::string to_metadata(const Envelope& e, const UnmaskRequest& m) {
  auto j = envelope_json(e);
  j["survivors"] = m.survivors;
  j["dropped"] = m.dropped;
  j["signatures"] = json::array();
  for (const auto& a : m.signatures) {
    j["signatures"].push_back({{"client_id", a.client_id}, {"signature", to_hex(a.signature)}});
  }
  return j.dump();
}

std::string to_metadata(const Envelope& e, const UnmaskResponse& m) {
  auto j = envelope_json(e);
  j["shares"] = json::array();
  for (const auto& s : m.shares) {
    j["shares"].push_back({{"owner", s.owner},
                           {"kind", s.kind == SecretKind::self_mask ? "self_mask" : "mask_key"},
                           {"x", s.share.x},
                           {"y", to_hex(s.share.y)}});
  }
  return j.dump();
}

result<Wire<AdvertisedKeys>> parse_advertised_keys(std::string_view metadata) {
  return parse<AdvertisedKeys>("secagg_keys", metadata,
                               [](const json& j) { return read_keys(field(j, "keys")); });
}

result<Wire<NeighbourKeys>> parse_neighbour_keys(std::string_view metadata) {
  return parse<NeighbourKeys>("secagg_neighbours", metadata, [](const json& j) {
    NeighbourKeys m;
    const auto& p = field(j, "plan");
    m.plan.clients = u32(p, "clients");
    m.plan.degree = u32(p, "degree");
    m.plan.threshold = u32(p, "threshold");
    m.plan.quant_range = u32(p, "quant_range");
    const auto& cap = field(p, "weight_cap");
    if (!cap.is_number_unsigned() || cap.get<std::uint64_t>() < 1) {
      throw Bad{"'weight_cap' must be a positive integer"};
    }
    m.plan.weight_cap = cap.get<std::uint64_t>();
    const auto& bind = field(p, "bind_keys");
    if (!bind.is_boolean()) {
      throw Bad{"'bind_keys' must be true or false"};
    }
    m.plan.bind_keys = bind.get<bool>();
    m.plan.metric_slots = u32(p, "metric_slots");
    if (m.plan.metric_slots > 16) {
      throw Bad{"'metric_slots' must be at most 16"};
    }
    if (p.contains("min_survivors")) {
      m.plan.min_survivors = u32(p, "min_survivors");
      if (m.plan.min_survivors > m.plan.clients) {
        throw Bad{"'min_survivors' must be at most 'clients'"};
      }
    }
    const auto& clip = field(p, "clip_range");
    if (!clip.is_number() || !(clip.get<double>() > 0) || clip.get<double>() > 1e6) {
      throw Bad{"'clip_range' must be a positive number"};
    }
    m.plan.clip_range = clip.get<double>();
    if (m.plan.quant_range < 2 ||
        std::uint64_t{m.plan.clients} * m.plan.quant_range >= (std::uint64_t{1} << 32)) {
      throw Bad{"'quant_range' lets the sum wrap"};
    }
    for (const auto& n : array(j, "neighbours")) {
      m.neighbours.push_back(read_keys(n));
    }
    return m;
  });
}

result<Wire<SharesUpload>> parse_shares_upload(std::string_view metadata) {
  return parse<SharesUpload>("secagg_shares", metadata,
                             [](const json& j) { return SharesUpload{read_sealed(j)}; });
}

result<Wire<RelayedShares>> parse_relayed_shares(std::string_view metadata) {
  return parse<RelayedShares>("secagg_relay", metadata,
                              [](const json& j) { return RelayedShares{read_sealed(j)}; });
}

result<Envelope> parse_masked_input(std::string_view metadata) {
  auto parsed = parse<int>("secagg_masked", metadata, [](const json&) { return 0; });
  if (!parsed) {
    return parsed.error();
  }
  return parsed->envelope;
}

result<Wire<UnmaskRequest>> parse_unmask_request(std::string_view metadata) {
  return parse<UnmaskRequest>("secagg_unmask", metadata, [](const json& j) {
    UnmaskRequest m{read_ids(j, "survivors"), read_ids(j, "dropped"), {}};
    for (const auto& item : array(j, "signatures")) {
      m.signatures.push_back(
          {text(item, "client_id", kMaxId), hex(item, "signature", kMaxSignature)});
    }
    return m;
  });
}

result<Wire<SurvivorList>> parse_survivor_list(std::string_view metadata) {
  return parse<SurvivorList>("secagg_survivors", metadata,
                             [](const json& j) { return SurvivorList{read_ids(j, "survivors")}; });
}

result<Wire<SurvivorSignature>> parse_survivor_signature(std::string_view metadata) {
  return parse<SurvivorSignature>("secagg_signed", metadata, [](const json& j) {
    return SurvivorSignature{hex(j, "signature", kMaxSignature)};
  });
}

result<Wire<UnmaskResponse>> parse_unmask_response(std::string_view metadata) {
  return parse<UnmaskResponse>("secagg_revealed", metadata, [](const json& j) {
    UnmaskResponse m;
    for (const auto& item : array(j, "shares")) {
      RevealedShare s;
      s.owner = text(item, "owner", kMaxId);
      const auto kind = text(item, "kind", 16);
      if (kind != "self_mask" && kind != "mask_key") {
        throw Bad{"'kind' must be self_mask or mask_key"};
      }
      s.kind = kind == "self_mask" ? SecretKind::self_mask : SecretKind::mask_key;
      s.share.x = u32(item, "x");
      s.share.y = hex(item, "y", kShareValueSize);
      m.shares.push_back(std::move(s));
    }
    return m;
  });
}

}  // namespace fedcore::secagg
