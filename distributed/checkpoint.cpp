#include "distributed/checkpoint.hpp"

#include <array>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "shared/collective/collectives.hpp"
#include "shared/util/assert.hpp"
#include "shared/util/byte_codec.hpp"
#include "shared/util/checksum.hpp"

namespace fedcore::distributed {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the checkpoint format is little-endian and is written with memcpy");

constexpr char kMagic[8] = {'F', 'C', 'D', 'I', 'S', 'T', 'C', 'K'};
constexpr char kParamMagic[8] = {'F', 'C', 'P', 'A', 'R', 'A', 'M', 'S'};
constexpr std::size_t kFixedHeader = 8 + 4 + 4;
// Three sections of at most one maximal parameter file each, plus lengths and checksum.
constexpr std::size_t kMaxSection =
    32 + model::kMaxParamHeaderBytes + model::kMaxParamCount * sizeof(float) + 4;
constexpr std::size_t kMaxCheckpointBytes = kFixedHeader + 3 * (8 + kMaxSection) + 4;

void put_bytes(std::vector<std::byte>& out, std::span<const std::byte> bytes) {
  put(out, static_cast<std::uint64_t>(bytes.size()));
  out.insert(out.end(), bytes.begin(), bytes.end());
}

// The optimizer section's metadata: {"kind": "sgd"|"adam", "steps": t}.
result<model::OptimizerState> optimizer_from_bundle(const model::ParamBundle& bundle,
                                                    const std::string& where) {
  auto meta = nlohmann::json::parse(bundle.metadata_json, nullptr, false);
  if (!meta.is_object() || !meta.contains("kind") || !meta["kind"].is_string() ||
      !meta.contains("steps") || !meta["steps"].is_number_integer()) {
    return fail(errc::data_loss, where + ": optimizer section lacks its kind or step count");
  }
  model::OptimizerState state;
  const auto kind = meta["kind"].get<std::string>();
  if (kind == "sgd") {
    state.kind = model::OptimizerKind::sgd;
  } else if (kind == "adam") {
    state.kind = model::OptimizerKind::adam;
  } else {
    return fail(errc::data_loss, where + ": unknown optimizer kind '" + kind + "'");
  }
  state.steps = meta["steps"].get<std::int64_t>();
  for (const auto& entry : bundle.layout.entries()) {
    const auto first = bundle.params.begin() + static_cast<std::ptrdiff_t>(entry.offset);
    state.buffers.push_back(
        {entry.name, std::vector<float>(first, first + static_cast<std::ptrdiff_t>(entry.size))});
  }
  return state;
}

}  // namespace

std::string checkpoint_path(const std::string& dir) {
  return dir + "/dist-checkpoint.fcp";
}

std::vector<std::byte> encode_checkpoint(const model::ParamLayout& layout,
                                         std::span<const float> params,
                                         const model::OptimizerState& optimizer, std::size_t step,
                                         int world, const model::ParamLayout& state_layout,
                                         std::span<const float> state) {
  FEDCORE_ASSERT(state.size() == state_layout.total(),
                 "encode_checkpoint: state differs from its layout");
  const auto model_section =
      model::encode_params(layout, params, nlohmann::json{{"step", step}, {"world", world}}.dump());
  model::ParamLayout buffers;
  std::vector<float> values;
  values.reserve(optimizer.buffers.size() * params.size());
  for (const auto& b : optimizer.buffers) {
    FEDCORE_ASSERT(b.values.size() == params.size(),
                   "encode_checkpoint: optimizer buffer differs from the parameters");
    buffers.append(b.name, {static_cast<std::int64_t>(b.values.size())});
    values.insert(values.end(), b.values.begin(), b.values.end());
  }
  const auto optimizer_section =
      model::encode_params(buffers, values,
                           nlohmann::json{{"kind", model::optimizer_kind_name(optimizer.kind)},
                                          {"steps", optimizer.steps}}
                               .dump());

  const auto state_section = model::encode_params(state_layout, state, "{}");
  std::vector<std::byte> out;
  out.reserve(kFixedHeader + 24 + model_section.size() + optimizer_section.size() +
              state_section.size() + 4);
  const auto* magic = reinterpret_cast<const std::byte*>(kMagic);
  out.insert(out.end(), magic, magic + sizeof kMagic);
  put(out, kCheckpointFormatVersion);
  put(out, std::uint32_t{0});
  put_bytes(out, model_section);
  put_bytes(out, optimizer_section);
  put_bytes(out, state_section);
  put(out, crc32(out));
  return out;
}

result<Checkpoint> decode_checkpoint(std::span<const std::byte> bytes, std::string_view what) {
  const std::string where = "checkpoint '" + std::string(what) + "'";
  if (bytes.size() >= sizeof kParamMagic &&
      std::memcmp(bytes.data(), kParamMagic, sizeof kParamMagic) == 0) {
    return fail(errc::failed_precondition,
                where +
                    " is a bare parameter file without optimizer state (written by an "
                    "older fedcore-dist); it cannot resume the job exactly: remove it to "
                    "start afresh, or load its parameters with model::load_params");
  }
  if (bytes.size() < kFixedHeader + 8) {
    return fail(errc::out_of_range, where + ": truncated: " + std::to_string(bytes.size()) +
                                        " bytes is shorter than the fixed header");
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    return fail(errc::data_loss, where + ": wrong magic, not a fedcore-dist checkpoint");
  }
  const auto version = get<std::uint32_t>(bytes.data() + 8);
  if (version != 1 && version != kCheckpointFormatVersion) {
    return fail(errc::unimplemented, where + ": format version " + std::to_string(version) +
                                         " is not supported (this build reads versions 1 and 2)");
  }
  // Walk the length-prefixed sections (two in version 1, three in 2), checking each length
  // against what is left.
  std::array<std::span<const std::byte>, 3> sections;
  const std::size_t section_count = version == 1 ? 2 : 3;
  std::size_t at = kFixedHeader;
  for (std::size_t k = 0; k < section_count; ++k) {
    auto& section = sections[k];
    if (bytes.size() < at + 8) {
      return fail(errc::out_of_range, where + ": truncated before a section length");
    }
    const auto length = get<std::uint64_t>(bytes.data() + at);
    at += 8;
    if (length > kMaxSection) {
      return fail(errc::resource_exhausted, where + ": a section is larger than the limit");
    }
    if (bytes.size() < at + length) {
      return fail(errc::out_of_range, where + ": truncated inside a section");
    }
    section = bytes.subspan(at, length);
    at += length;
  }
  if (bytes.size() < at + 4) {
    return fail(errc::out_of_range, where + ": truncated before the checksum");
  }
  if (bytes.size() > at + 4) {
    return fail(errc::data_loss, where + ": " + std::to_string(bytes.size() - at - 4) +
                                     " unexpected bytes after the checksum");
  }
  if (crc32(bytes.first(at)) != get<std::uint32_t>(bytes.data() + at)) {
    return fail(errc::data_loss, where + ": checksum mismatch, the file is corrupt");
  }

  auto model_bundle = model::decode_params(sections[0], std::string(what) + " (model section)");
  if (!model_bundle)
    return model_bundle.error();
  auto buffers = model::decode_params(sections[1], std::string(what) + " (optimizer section)");
  if (!buffers)
    return buffers.error();
  auto meta = nlohmann::json::parse(model_bundle->metadata_json, nullptr, false);
  if (!meta.is_object() || !meta.contains("step") || !meta["step"].is_number_unsigned()) {
    return fail(errc::data_loss, where + " has no step");
  }
  auto optimizer = optimizer_from_bundle(*buffers, where);
  if (!optimizer)
    return optimizer.error();
  Checkpoint out;
  if (section_count == 3) {
    auto state = model::decode_params(sections[2], std::string(what) + " (state section)");
    if (!state)
      return state.error();
    out.state = std::move(*state);
  }
  out.step = meta["step"].get<std::size_t>();
  out.model = std::move(*model_bundle);
  out.optimizer = std::move(*optimizer);
  return out;
}

result<void> save_checkpoint(const std::string& path, const model::ParamLayout& layout,
                             std::span<const float> params, const model::OptimizerState& optimizer,
                             std::size_t step, int world, const model::ParamLayout& state_layout,
                             std::span<const float> state) {
  return model::write_file_atomically(
      path, encode_checkpoint(layout, params, optimizer, step, world, state_layout, state));
}

result<Checkpoint> load_checkpoint(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    return fail(errc::not_found, "checkpoint '" + path + "': " + ec.message());
  }
  if (size > kMaxCheckpointBytes) {
    return fail(errc::resource_exhausted, "checkpoint '" + path + "': too large");
  }
  std::vector<std::byte> bytes(size);
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size))) {
    return fail(errc::io_error, "checkpoint '" + path + "': read failed");
  }
  return decode_checkpoint(bytes, path);
}

result<std::size_t> restore_checkpoint(collective::Communicator& comm, const std::string& dir,
                                       const model::ParamLayout& layout, std::span<float> params,
                                       model::Optimizer& optimizer,
                                       const model::ParamLayout& state_layout,
                                       std::span<float> state_values) {
  FEDCORE_ASSERT(params.size() == layout.total(), "restore_checkpoint: params differ from layout");
  FEDCORE_ASSERT(state_values.size() == state_layout.total(),
                 "restore_checkpoint: state differs from its layout");
  // Every rank has the same options: without a directory nobody communicates.
  if (dir.empty())
    return std::size_t{0};
  // Rank 0 announces {status, step, optimizer steps} first, so that the other ranks learn
  // whether data follows, or that rank 0 gave up, instead of waiting for its deadline.
  enum : std::uint64_t { kNone = 0, kLoaded = 1, kFailed = 2 };
  std::array<std::uint64_t, 3> header{kNone, 0, 0};
  model::OptimizerState state = optimizer.state();  // names and sizes, filled below
  std::optional<error> problem;
  if (comm.rank() == 0 && std::filesystem::exists(checkpoint_path(dir))) {
    const std::string path = checkpoint_path(dir);
    auto loaded = load_checkpoint(path);
    if (!loaded) {
      problem = loaded.error();
    } else if (loaded->model.layout.fingerprint() != layout.fingerprint()) {
      problem = fail(errc::failed_precondition,
                     "checkpoint '" + path + "' is for another model (layout " +
                         loaded->model.layout.fingerprint_hex() + ", this model's is " +
                         layout.fingerprint_hex() + ")");
    } else if (loaded->state.layout.fingerprint() != state_layout.fingerprint()) {
      problem =
          fail(errc::failed_precondition,
               "checkpoint '" + path + "' holds " + std::to_string(loaded->state.layout.total()) +
                   " state values (BatchNorm running statistics) where this model has " +
                   std::to_string(state_layout.total()));
    } else if (auto ok = optimizer.load_state(loaded->optimizer); !ok) {
      problem = fail(ok.error().code, "checkpoint '" + path + "': " + ok.error().message);
    } else {
      std::copy(loaded->model.params.begin(), loaded->model.params.end(), params.begin());
      std::copy(loaded->state.params.begin(), loaded->state.params.end(), state_values.begin());
      state = std::move(loaded->optimizer);
      header = {kLoaded, loaded->step, static_cast<std::uint64_t>(state.steps)};
    }
    if (problem)
      header[0] = kFailed;
  }
  auto header_bytes = std::as_writable_bytes(std::span<std::uint64_t>(header));
  if (auto ok = collective::broadcast(comm, {.data = header_bytes, .root = 0}); !ok)
    return ok.error();
  if (header[0] == kFailed) {
    if (problem)
      return *problem;
    return fail(errc::failed_precondition,
                "rank 0 could not load the checkpoint in '" + dir + "' (its log says why)");
  }
  if (header[0] == kNone)
    return std::size_t{0};
  if (auto ok = collective::broadcast(comm, {.data = std::as_writable_bytes(params), .root = 0});
      !ok) {
    return ok.error();
  }
  if (!state_values.empty()) {
    auto ok =
        collective::broadcast(comm, {.data = std::as_writable_bytes(state_values), .root = 0});
    if (!ok)
      return ok.error();
  }
  for (auto& buffer : state.buffers) {
    auto data = std::as_writable_bytes(std::span<float>(buffer.values));
    if (auto ok = collective::broadcast(comm, {.data = data, .root = 0}); !ok)
      return ok.error();
  }
  if (comm.rank() != 0) {
    state.steps = static_cast<std::int64_t>(header[2]);
    if (auto ok = optimizer.load_state(state); !ok)
      return ok.error();
  }
  return static_cast<std::size_t>(header[1]);
}

}  // namespace fedcore::distributed
