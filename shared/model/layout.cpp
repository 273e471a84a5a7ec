#include "shared/model/layout.hpp"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "shared/util/assert.hpp"

namespace fedcore::model {
namespace {

constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr std::uint64_t kFnvPrime = 0x100000001b3ULL;

void fnv_bytes(std::uint64_t& h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
}

// Integers are hashed as 8 little-endian bytes whatever the host, so the fingerprint is
// the same on every platform.
void fnv_u64(std::uint64_t& h, std::uint64_t v) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i) {
    bytes[i] = static_cast<unsigned char>(v >> (8 * i));
  }
  fnv_bytes(h, bytes, 8);
}

}  // namespace

std::size_t element_count(const Shape& shape) noexcept {
  std::size_t n = 1;
  for (auto d : shape) {
    n *= static_cast<std::size_t>(d);
  }
  return n;
}

std::string shape_to_string(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + "]";
}

void ParamLayout::append(std::string name, Shape shape) {
  FEDCORE_ASSERT(find(name) == nullptr, "duplicate parameter name");
  for (auto d : shape) {
    FEDCORE_ASSERT(d > 0, "parameter dimensions must be positive");
  }
  const std::size_t size = element_count(shape);
  entries_.push_back(ParamEntry{std::move(name), std::move(shape), total_, size});
  total_ += size;
}

std::uint64_t ParamLayout::fingerprint() const noexcept {
  std::uint64_t h = kFnvOffset;
  fnv_u64(h, entries_.size());
  for (const auto& e : entries_) {
    fnv_u64(h, e.name.size());
    fnv_bytes(h, e.name.data(), e.name.size());
    fnv_u64(h, e.shape.size());
    for (auto d : e.shape) {
      fnv_u64(h, static_cast<std::uint64_t>(d));
    }
    fnv_u64(h, e.offset);
  }
  return h;
}

std::string ParamLayout::fingerprint_hex() const {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fingerprint()));
  return buf;
}

const ParamEntry* ParamLayout::find(std::string_view name) const noexcept {
  for (const auto& e : entries_) {
    if (e.name == name) {
      return &e;
    }
  }
  return nullptr;
}

void to_json(nlohmann::json& j, const ParamLayout& layout) {
  auto tensors = nlohmann::json::array();
  for (const auto& e : layout.entries()) {
    tensors.push_back({{"name", e.name}, {"shape", e.shape}, {"offset", e.offset}});
  }
  j = {{"total", layout.total()}, {"fingerprint", layout.fingerprint_hex()}, {"tensors", tensors}};
}

result<ParamLayout> layout_from_json(const nlohmann::json& j) {
  constexpr std::size_t kMaxTensors = 4096;
  constexpr std::size_t kMaxRank = 8;
  constexpr std::int64_t kMaxDim = std::int64_t{1} << 31;
  if (!j.is_object() || !j.contains("tensors") || !j["tensors"].is_array()) {
    return fail(errc::invalid_argument, "layout: expected an object with a 'tensors' array");
  }
  const auto& tensors = j["tensors"];
  if (tensors.size() > kMaxTensors) {
    return fail(errc::resource_exhausted, "layout: more than 4096 tensors");
  }
  ParamLayout layout;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const std::string where = "layout: tensor " + std::to_string(i);
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("shape") ||
        !t["shape"].is_array()) {
      return fail(errc::invalid_argument, where + ": needs a string 'name' and an array 'shape'");
    }
    const auto name = t["name"].get<std::string>();
    if (name.empty() || name.size() > 256 || layout.find(name) != nullptr) {
      return fail(errc::invalid_argument, where + ": empty, too long or duplicate name");
    }
    if (t["shape"].size() > kMaxRank) {
      return fail(errc::invalid_argument, where + " ('" + name + "'): rank above 8");
    }
    Shape shape;
    for (const auto& d : t["shape"]) {
      if (!d.is_number_integer() || d.get<std::int64_t>() <= 0 || d.get<std::int64_t>() > kMaxDim) {
        return fail(errc::invalid_argument,
                    where + " ('" + name + "'): dimensions must be positive integers");
      }
      shape.push_back(d.get<std::int64_t>());
    }
    if (t.contains("offset") &&
        (!t["offset"].is_number_unsigned() || t["offset"].get<std::size_t>() != layout.total())) {
      return fail(errc::invalid_argument, where + " ('" + name + "'): offset is not contiguous");
    }
    layout.append(name, std::move(shape));
  }
  if (j.contains("total") &&
      (!j["total"].is_number_unsigned() || j["total"].get<std::size_t>() != layout.total())) {
    return fail(errc::invalid_argument, "layout: 'total' does not match the tensors");
  }
  if (j.contains("fingerprint") &&
      (!j["fingerprint"].is_string() ||
       j["fingerprint"].get<std::string>() != layout.fingerprint_hex())) {
    return fail(errc::data_loss, "layout: fingerprint does not match the tensors");
  }
  return layout;
}

}  // namespace fedcore::model
