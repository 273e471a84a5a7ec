// GET /api/v1/runs/{id}/model: the checkpoint of a committed round, as the parameter
// file the server wrote (format=fcp, docs/formats.md) or as one NumPy array (format=npy):
// the flat float32 parameter vector, shape (N,), in layout order — the layout itself is
// in the fcp file's header.
#include <bit>
#include <cstring>
#include <fstream>

#include "server/api/handlers.hpp"
#include "shared/model/param_io.hpp"

namespace fedcore::api::detail {
namespace {

// Checkpoints larger than this are refused rather than read into memory.
constexpr std::uintmax_t kMaxCheckpointBytes = std::uintmax_t{1} << 30;

std::string npy_bytes(const std::vector<float>& params) {
  static_assert(std::endian::native == std::endian::little, "npy export writes '<f4' as is");
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(params.size()) + ",), }";
  // Magic (6) + version (2) + length (2) + header, padded with spaces to a multiple of
  // 64 bytes and ended by a newline (the .npy format, version 1.0).
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  const auto offset = out.size();
  out.resize(offset + params.size() * sizeof(float));
  std::memcpy(out.data() + offset, params.data(), params.size() * sizeof(float));
  return out;
}

result<std::string> read_whole(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    return fail(errc::data_loss, "checkpoint file is missing: " + ec.message());
  }
  if (size > kMaxCheckpointBytes) {
    return fail(errc::resource_exhausted, "checkpoint file too large to serve");
  }
  std::ifstream in(path, std::ios::binary);
  std::string bytes(static_cast<std::size_t>(size), '\0');
  if (!in || !in.read(bytes.data(), static_cast<std::streamsize>(size))) {
    return fail(errc::io_error, "cannot read the checkpoint file");
  }
  return bytes;
}

}  // namespace

void add_model_routes(Router& router, ApiContext& ctx) {
  router.add(
      "GET", "/api/v1/runs/{id}/model", [&ctx](const Request& req, const PathParams& params) {
        if (auto ok = only_params(req.query, {"round", "format"}); !ok) {
          return error_response(ok.error());
        }
        auto id = id_param(params, "id");
        if (!id) {
          return error_response(id.error());
        }
        auto round = int_param(req.query, "round", 1, 100000, 0);
        if (!round) {
          return error_response(round.error());
        }
        auto format = query_param(req.query, "format");
        if (!format) {
          return error_response(format.error());
        }
        const std::string fmt = format->value_or("fcp");
        if (fmt != "fcp" && fmt != "npy") {
          return error_response(fail(errc::invalid_argument, "format: must be \"fcp\" or \"npy\""));
        }
        auto run = ctx.store.get_run(*id);
        if (!run) {
          return error_response(
              run.error().code == errc::not_found
                  ? fail(errc::not_found, "run " + std::to_string(*id) + " not found")
                  : run.error());
        }
        auto checkpoints = ctx.store.list_checkpoints(*id);
        if (!checkpoints) {
          return error_response(checkpoints.error());
        }
        const store::CheckpointRecord* chosen = nullptr;
        for (const auto& c : *checkpoints) {
          if (*round == 0 ? (chosen == nullptr || c.round > chosen->round) : c.round == *round) {
            chosen = &c;
          }
        }
        if (chosen == nullptr) {
          return error_response(fail(
              errc::not_found, *round == 0
                                   ? "run " + std::to_string(*id) + " has no committed round yet"
                                   : "round " + std::to_string(*round) + " of run " +
                                         std::to_string(*id) + " has no checkpoint"));
        }
        if (chosen->removed_ms) {
          return error_response(fail(
              errc::not_found, "the checkpoint of round " + std::to_string(chosen->round) +
                                   " of run " + std::to_string(*id) +
                                   " was removed by the server's checkpoint retention "
                                   "(keep_checkpoints); the history keeps the round's record"));
        }
        auto bytes = read_whole(chosen->ref.path);
        if (!bytes) {
          return error_response(fail(errc::internal, "round " + std::to_string(chosen->round) +
                                                         ": " + bytes.error().message));
        }
        // Verified before it is handed out: a damaged file is a server fault, not a model.
        auto bundle = model::decode_params(
            std::span(reinterpret_cast<const std::byte*>(bytes->data()), bytes->size()),
            "checkpoint");
        if (!bundle) {
          return error_response(fail(errc::internal, "the checkpoint of round " +
                                                         std::to_string(chosen->round) +
                                                         " is damaged: " + bundle.error().message));
        }
        Response response;
        const std::string name =
            "run-" + std::to_string(*id) + "-round-" + std::to_string(chosen->round) + "." + fmt;
        if (fmt == "fcp") {
          response.body = std::move(*bytes);
        } else {
          response.body = npy_bytes(bundle->params);
        }
        response.content_type = "application/octet-stream";
        response.headers.emplace_back("Content-Disposition",
                                      "attachment; filename=\"" + name + "\"");
        response.headers.emplace_back("X-Fedcore-Round", std::to_string(chosen->round));
        return response;
      });
}

}  // namespace fedcore::api::detail
