#include "shared/model/param_io.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "shared/model/federated_vector.hpp"
#include "shared/model/model.hpp"
#include "shared/util/assert.hpp"
#include "shared/util/byte_codec.hpp"
#include "shared/util/checksum.hpp"
#include "shared/util/file_contents.hpp"
#include "shared/util/test_point.hpp"

namespace fedcore::model {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the parameter format is little-endian and is written with memcpy");

constexpr char kMagic[8] = {'F', 'C', 'P', 'A', 'R', 'A', 'M', 'S'};
constexpr std::size_t kFixedHeader = 8 + 4 + 4 + 8 + 8;

std::string os_error(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

}  // namespace

EncodedParams encode_params_in_parts(const ParamLayout& layout, std::span<const float> params,
                                     std::string_view metadata_json) {
  FEDCORE_ASSERT(params.size() == layout.total(), "encode_params: params differ from the layout");
  nlohmann::json header = {{"layout", layout}};
  auto metadata = nlohmann::json::parse(metadata_json, nullptr, false);
  FEDCORE_ASSERT(!metadata.is_discarded() && metadata.is_object(),
                 "encode_params: metadata must be a JSON object");
  header["metadata"] = std::move(metadata);
  const std::string text = header.dump();
  FEDCORE_ASSERT(text.size() <= kMaxParamHeaderBytes, "encode_params: header too large");

  EncodedParams out;
  out.head.reserve(kFixedHeader + text.size());
  const auto* magic = reinterpret_cast<const std::byte*>(kMagic);
  out.head.insert(out.head.end(), magic, magic + sizeof kMagic);
  put(out.head, kParamFormatVersion);
  put(out.head, static_cast<std::uint32_t>(text.size()));
  put(out.head, static_cast<std::uint64_t>(params.size()));
  put(out.head, layout.fingerprint());
  const auto* t = reinterpret_cast<const std::byte*>(text.data());
  out.head.insert(out.head.end(), t, t + text.size());
  out.body = std::as_bytes(params);
  out.crc = crc32(out.body, crc32(out.head));
  std::vector<std::byte> trailer;
  put(trailer, out.crc);
  std::copy(trailer.begin(), trailer.end(), out.trailer.begin());
  return out;
}

std::vector<std::byte> encode_params(const ParamLayout& layout, std::span<const float> params,
                                     std::string_view metadata_json) {
  const auto encoded = encode_params_in_parts(layout, params, metadata_json);
  std::vector<std::byte> out;
  out.reserve(encoded.size());
  for (const auto part : encoded.parts()) {
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

result<ParamBundle> decode_params(std::span<const std::byte> bytes, std::string_view what) {
  const std::string where = "parameter file '" + std::string(what) + "'";
  if (bytes.size() < kFixedHeader + 4) {
    return fail(errc::out_of_range, where + ": truncated: " + std::to_string(bytes.size()) +
                                        " bytes is shorter than the fixed header");
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    return fail(errc::data_loss, where + ": wrong magic, not a Fedcore parameter file");
  }
  const auto version = get<std::uint32_t>(bytes.data() + 8);
  if (version != kParamFormatVersion) {
    return fail(errc::unimplemented, where + ": format version " + std::to_string(version) +
                                         " is not supported (this build reads version 1)");
  }
  const auto header_len = get<std::uint32_t>(bytes.data() + 12);
  const auto count = get<std::uint64_t>(bytes.data() + 16);
  const auto fingerprint = get<std::uint64_t>(bytes.data() + 24);
  if (header_len > kMaxParamHeaderBytes || count > kMaxParamCount) {
    return fail(errc::resource_exhausted, where + ": header or parameter count above the limits");
  }
  const std::size_t expected = kFixedHeader + header_len + count * sizeof(float) + 4;
  if (bytes.size() < expected) {
    return fail(errc::out_of_range, where + ": truncated: " + std::to_string(bytes.size()) +
                                        " bytes, the header announces " + std::to_string(expected));
  }
  if (bytes.size() > expected) {
    return fail(errc::data_loss, where + ": " + std::to_string(bytes.size() - expected) +
                                     " unexpected bytes after the checksum");
  }
  const auto stored_crc = get<std::uint32_t>(bytes.data() + expected - 4);
  if (crc32(bytes.first(expected - 4)) != stored_crc) {
    return fail(errc::data_loss, where + ": checksum mismatch, the file is corrupt");
  }
  const auto* text = reinterpret_cast<const char*>(bytes.data() + kFixedHeader);
  auto header = nlohmann::json::parse(text, text + header_len, nullptr, false);
  if (header.is_discarded() || !header.is_object() || !header.contains("layout")) {
    return fail(errc::data_loss, where + ": header is not the expected JSON");
  }
  auto layout = layout_from_json(header["layout"]);
  if (!layout) {
    return fail(errc::data_loss, where + ": " + layout.error().message);
  }
  if (layout->total() != count || layout->fingerprint() != fingerprint) {
    return fail(errc::data_loss, where + ": layout disagrees with the fixed header");
  }
  ParamBundle bundle;
  bundle.layout = std::move(*layout);
  bundle.params.resize(count);
  if (count > 0) {  // an empty section (an optimizer without state) has no data pointer
    std::memcpy(bundle.params.data(), bytes.data() + kFixedHeader + header_len,
                count * sizeof(float));
  }
  if (header.contains("metadata") && header["metadata"].is_object()) {
    bundle.metadata_json = header["metadata"].dump();
  }
  return bundle;
}

result<void> write_file_atomically(const std::string& path, std::span<const std::byte> bytes) {
  const std::span<const std::byte> one[] = {bytes};
  return write_file_atomically(path, std::span<const std::span<const std::byte>>(one));
}

result<void> write_file_atomically(const std::string& path,
                                   std::span<const std::span<const std::byte>> parts) {
  const std::string temp = path + ".tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return fail(errno == ENOENT ? errc::not_found : errc::io_error,
                os_error("cannot create", temp));
  }
  result<void> written;
  if (auto contents = write_new_file_contents(fd, parts, temp); !contents) {
    written = contents.error();
  }
  if (written && ::fsync(fd) != 0) {
    written = fail(errc::io_error, os_error("cannot fsync", temp));
  }
  if (::close(fd) != 0 && written) {
    // NFS and some FUSE file systems report a full disk only when the file is closed.
    written = fail(errc::io_error, os_error("cannot close", temp));
  }
  if (!written) {
    ::unlink(temp.c_str());
    return written;
  }
  test_point("atomic_write.temp_synced", path);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const auto message = os_error("cannot rename onto", path);
    ::unlink(temp.c_str());
    return fail(errc::io_error, message);
  }
  // The rename is durable only once the directory entry is.
  auto dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) {
    dir = ".";
  }
  // A failure here is reported: the caller must not reference a file whose name may not
  // survive a crash (the file stays, unreferenced, for the orphan sweep or the next
  // write). EINVAL only says the file system does not sync directories.
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    const bool synced = ::fsync(dir_fd) == 0 || errno == EINVAL;
    const auto message = synced ? std::string() : os_error("cannot sync the directory of", path);
    ::close(dir_fd);
    if (!synced) {
      return fail(errc::io_error, message);
    }
  }
  return {};
}

result<void> save_params(const std::string& path, const ParamLayout& layout,
                         std::span<const float> params, std::string_view metadata_json) {
  return write_file_atomically(path, encode_params(layout, params, metadata_json));
}

result<ParamBundle> load_params(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    return fail(errc::not_found, "parameter file '" + path + "': " + ec.message());
  }
  if (size > kFixedHeader + kMaxParamHeaderBytes + kMaxParamCount * sizeof(float) + 4) {
    return fail(errc::resource_exhausted, "parameter file '" + path + "': too large");
  }
  std::vector<std::byte> bytes(size);
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size))) {
    return fail(errc::io_error, "parameter file '" + path + "': read failed");
  }
  return decode_params(bytes, path);
}

result<void> load_params_into(const std::string& path, Model& model) {
  auto bundle = load_params(path);
  if (!bundle) {
    return bundle.error();
  }
  // A federated checkpoint of a model with state holds the parameters and the state.
  const auto federated = federated_layout(model);
  if (bundle->layout.fingerprint() == federated.fingerprint()) {
    load_federated(model, bundle->params);
    return {};
  }
  if (bundle->layout.fingerprint() != model.layout().fingerprint()) {
    return fail(errc::failed_precondition,
                "parameter file '" + path + "' has layout " + bundle->layout.fingerprint_hex() +
                    " but the model's is " + federated.fingerprint_hex());
  }
  std::copy(bundle->params.begin(), bundle->params.end(), model.params().begin());
  return {};
}

result<void> export_npy(const std::string& dir, const ParamLayout& layout,
                        std::span<const float> params) {
  FEDCORE_ASSERT(params.size() == layout.total(), "export_npy: params differ from the layout");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return fail(errc::io_error, "cannot create directory '" + dir + "': " + ec.message());
  }
  for (const auto& entry : layout.entries()) {
    std::string shape = "(";
    for (auto d : entry.shape) {
      shape += std::to_string(d) + ", ";
    }
    if (entry.shape.size() > 1) {
      shape.erase(shape.size() - 2);
    }
    shape += ")";
    // NPY 1.0: the magic, version, a little-endian u16 header length, then a Python dict
    // literal padded with spaces so the data starts on a 64-byte boundary.
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
    const std::size_t unpadded = 10 + header.size() + 1;
    header.append((64 - unpadded % 64) % 64, ' ');
    header += '\n';
    std::vector<std::byte> bytes;
    const char magic[] = "\x93NUMPY\x01\x00";
    const auto* m = reinterpret_cast<const std::byte*>(magic);
    bytes.insert(bytes.end(), m, m + 8);
    put(bytes, static_cast<std::uint16_t>(header.size()));
    const auto* h = reinterpret_cast<const std::byte*>(header.data());
    bytes.insert(bytes.end(), h, h + header.size());
    const auto tensor = params.subspan(entry.offset, entry.size);
    const auto* p = reinterpret_cast<const std::byte*>(tensor.data());
    bytes.insert(bytes.end(), p, p + tensor.size_bytes());
    auto written = write_file_atomically(dir + "/" + entry.name + ".npy", bytes);
    if (!written) {
      return written;
    }
  }
  return {};
}

}  // namespace fedcore::model
