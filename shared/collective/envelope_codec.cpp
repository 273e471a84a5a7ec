#include "shared/collective/envelope_codec.hpp"

#include <charconv>
#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

namespace fedcore::collective {
namespace {

// Whether `s` can go into a JSON string as it is (what dump() would not escape).
bool plain_string(std::string_view s) noexcept {
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\' || u < 0x20 || u >= 0x80)
      return false;
  }
  return true;
}

void append_number(std::string& out, std::uint64_t value) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof(digits), value).ptr;
  out.append(digits, end);
}

std::string encode_with_library(const Envelope& e, std::uint64_t n) {
  const nlohmann::json j = {
      {"job", e.job},     {"seq", e.seq},         {"op", static_cast<int>(e.op)}, {"tag", e.tag},
      {"bytes", e.bytes}, {"segment", e.segment}, {"length", e.length},           {"n", n}};
  return j.dump();
}

// Reads the exact form encode_envelope writes; nullopt for anything else.
class FastReader {
 public:
  explicit FastReader(std::string_view text) : text_(text) {}

  bool literal(std::string_view expected) {
    if (text_.substr(at_, expected.size()) != expected)
      return false;
    at_ += expected.size();
    return true;
  }
  std::optional<std::uint64_t> number() {
    std::uint64_t value = 0;
    const char* begin = text_.data() + at_;
    const char* end = text_.data() + text_.size();
    // A leading zero is JSON only as "0" itself; from_chars would accept "007".
    if (begin < end && *begin == '0' && begin + 1 < end && begin[1] >= '0' && begin[1] <= '9')
      return std::nullopt;
    const auto [ptr, ec] = std::from_chars(begin, end, value);
    if (ec != std::errc() || ptr == begin)
      return std::nullopt;
    at_ += static_cast<std::size_t>(ptr - begin);
    return value;
  }
  std::optional<std::string> plain_string() {
    const auto close = text_.find('"', at_);
    if (close == std::string_view::npos)
      return std::nullopt;
    std::string_view s = text_.substr(at_, close - at_);
    if (!collective::plain_string(s))
      return std::nullopt;
    at_ = close + 1;
    return std::string(s);
  }
  bool at_end() const noexcept { return at_ == text_.size(); }
  // `key` (the literal before a number, e.g. `,"seq":`), then the number into `out`.
  bool number_after(std::string_view key, std::uint64_t& out) {
    if (!literal(key))
      return false;
    const auto value = number();
    if (value)
      out = *value;
    return value.has_value();
  }

 private:
  std::string_view text_;
  std::size_t at_ = 0;
};

std::optional<DecodedMetadata> decode_fast(std::string_view metadata) {
  FastReader r(metadata);
  DecodedMetadata d;
  Envelope& e = d.envelope;
  std::uint64_t bytes = 0, length = 0, n = 0, op = 0, segment = 0, seq = 0, tag = 0;
  std::optional<std::string> job;
  const bool read = r.number_after(R"({"bytes":)", bytes) && r.literal(R"(,"job":")") &&
                    (job = r.plain_string()) && r.number_after(R"(,"length":)", length) &&
                    r.number_after(R"(,"n":)", n) && r.number_after(R"(,"op":)", op) &&
                    r.number_after(R"(,"segment":)", segment) &&
                    r.number_after(R"(,"seq":)", seq) && r.number_after(R"(,"tag":)", tag) &&
                    r.literal("}") && r.at_end();
  if (!read)
    return std::nullopt;
  // Out of range for its field: let the library path give the precise error.
  if (op > 255 || segment > UINT32_MAX || tag > UINT32_MAX)
    return std::nullopt;
  e.job = std::move(*job);
  e.seq = seq;
  e.op = static_cast<OpType>(op);
  e.tag = static_cast<std::uint32_t>(tag);
  e.bytes = bytes;
  e.segment = static_cast<std::uint32_t>(segment);
  e.length = length;
  d.n = n;
  return d;
}

// An unsigned integer field of at most `max`; anything else is data_loss.
result<std::uint64_t> unsigned_field(const nlohmann::json& j, const char* key, std::uint64_t max) {
  const auto it = j.find(key);
  if (it == j.end())
    return fail(errc::data_loss, std::string("collective metadata lacks \"") + key + "\"");
  if (!it->is_number_unsigned() || it->get<std::uint64_t>() > max) {
    return fail(errc::data_loss, std::string("collective metadata: \"") + key +
                                     "\" is not an integer from 0 to " + std::to_string(max));
  }
  return it->get<std::uint64_t>();
}

result<DecodedMetadata> decode_with_library(std::string_view metadata) {
  auto j = nlohmann::json::parse(metadata, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return fail(errc::data_loss, "collective metadata is not JSON");
  const auto job = j.find("job");
  if (job == j.end() || !job->is_string())
    return fail(errc::data_loss, "collective metadata: \"job\" is not a string");
  constexpr std::uint64_t kU32 = UINT32_MAX, kU64 = UINT64_MAX;
  auto seq = unsigned_field(j, "seq", kU64);
  auto op = unsigned_field(j, "op", 255);
  auto tag = unsigned_field(j, "tag", kU32);
  auto bytes = unsigned_field(j, "bytes", kU64);
  auto segment = unsigned_field(j, "segment", kU32);
  auto length = unsigned_field(j, "length", kU64);
  auto n = unsigned_field(j, "n", kU64);
  for (const auto* field : {&seq, &op, &tag, &bytes, &segment, &length, &n}) {
    if (!*field)
      return field->error();
  }
  DecodedMetadata d;
  d.envelope = {job->get<std::string>(),
                *seq,
                static_cast<OpType>(*op),
                static_cast<std::uint32_t>(*tag),
                *bytes,
                static_cast<std::uint32_t>(*segment),
                *length};
  d.n = *n;
  return d;
}

}  // namespace

std::string encode_envelope(const Envelope& e, std::uint64_t n) {
  if (!plain_string(e.job))
    return encode_with_library(e, n);
  std::string out;
  out.reserve(112 + e.job.size());
  out += R"({"bytes":)";
  append_number(out, e.bytes);
  out += R"(,"job":")";
  out += e.job;
  out += R"(","length":)";
  append_number(out, e.length);
  out += R"(,"n":)";
  append_number(out, n);
  out += R"(,"op":)";
  append_number(out, static_cast<std::uint64_t>(e.op));
  out += R"(,"segment":)";
  append_number(out, e.segment);
  out += R"(,"seq":)";
  append_number(out, e.seq);
  out += R"(,"tag":)";
  append_number(out, e.tag);
  out += '}';
  return out;
}

result<DecodedMetadata> decode_envelope(std::string_view metadata) {
  if (metadata == kDoorbellMetadata) {
    DecodedMetadata d;
    d.doorbell = true;
    return d;
  }
  if (auto fast = decode_fast(metadata))
    return std::move(*fast);
  return decode_with_library(metadata);
}

}  // namespace fedcore::collective
