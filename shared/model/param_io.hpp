// Parameter files: Fedcore's own binary format (layout + payload + checksum) and NumPy
// export. The byte layout is specified in docs/formats.md ("Parameter file").
//
//   magic "FCPARAMS" | u32 version | u32 header length | u64 parameter count |
//   u64 layout fingerprint | header JSON (layout, metadata) | float32 LE payload | u32 CRC-32
//
// Files are written atomically: to "<path>.tmp", fsync'ed, renamed over `path`, and the
// directory fsync'ed, so a crash leaves either the old file or the new one, never a torn
// one (docs/engineering.md R2).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shared/model/layout.hpp"
#include "shared/util/error.hpp"

namespace fedcore::model {

class Model;  // shared/model/model.hpp

inline constexpr std::uint32_t kParamFormatVersion = 1;
inline constexpr std::size_t kMaxParamHeaderBytes = 1 << 20;
inline constexpr std::size_t kMaxParamCount = std::size_t{1} << 28;

struct ParamBundle {
  ParamLayout layout;
  std::vector<float> params;
  std::string metadata_json = "{}";  // free-form JSON object (spec, run, round, ...)
};

// Serialises to bytes. REQUIRES: params.size() == layout.total(); metadata_json is a JSON
// object of at most kMaxParamHeaderBytes / 2 bytes.
std::vector<std::byte> encode_params(const ParamLayout& layout, std::span<const float> params,
                                     std::string_view metadata_json = "{}");

// The same file as three pieces, without a copy of the parameters: `head` (the fixed
// header and the header JSON), `body` (a view of `params`' bytes: valid while they are)
// and the CRC-32 trailer. A 10M-parameter checkpoint is written without a second 40 MB
// buffer.
struct EncodedParams {
  std::vector<std::byte> head;
  std::span<const std::byte> body;
  std::array<std::byte, 4> trailer{};
  std::uint32_t crc = 0;  // the trailer's value: the CRC-32 of head and body

  std::array<std::span<const std::byte>, 3> parts() const noexcept {
    return {std::span<const std::byte>(head), body, std::span<const std::byte>(trailer)};
  }
  std::size_t size() const noexcept { return head.size() + body.size() + trailer.size(); }
};
EncodedParams encode_params_in_parts(const ParamLayout& layout, std::span<const float> params,
                                     std::string_view metadata_json = "{}");
// Parses and verifies bytes. Errors: errc::data_loss (magic, checksum, fingerprint,
// inconsistent lengths), errc::out_of_range (truncated), errc::unimplemented (a future
// version), errc::resource_exhausted (lengths over the limits). `what` names the source
// in messages (a file path).
result<ParamBundle> decode_params(std::span<const std::byte> bytes,
                                  std::string_view what = "buffer");

result<void> save_params(const std::string& path, const ParamLayout& layout,
                         std::span<const float> params, std::string_view metadata_json = "{}");
result<ParamBundle> load_params(const std::string& path);
// Loads into a model after checking that the file's layout is the model's layout, or its
// federated layout (parameters then state, federated_vector.hpp: a federated run's
// checkpoint of a model with BatchNorm), errc::failed_precondition naming both fingerprints
// otherwise.
result<void> load_params_into(const std::string& path, Model& model);

// Writes one NumPy .npy file per tensor, "<dir>/<tensor name>.npy" (created if needed),
// in C order with the layout's shapes, so `np.load("dir/conv1.weight.npy")` just works.
result<void> export_npy(const std::string& dir, const ParamLayout& layout,
                        std::span<const float> params);

// Writes `bytes` to `path` atomically (temp file, fsync, rename, fsync of the directory).
// Errors: not_found (no such directory); io_error for every other refusal (ENOSPC, EROFS,
// EIO at create, write, fsync, close or rename), naming the file and the system's words.
// A failure before the rename removes the temp file and leaves `path` as it was; a failed
// directory sync leaves the complete new file at `path`, which the caller then must not
// reference (it may not survive a crash).
result<void> write_file_atomically(const std::string& path, std::span<const std::byte> bytes);
// The same for a file given in pieces, written one after the other.
result<void> write_file_atomically(const std::string& path,
                                   std::span<const std::span<const std::byte>> parts);

}  // namespace fedcore::model
