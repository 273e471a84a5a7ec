#include "server/federation/orphan_checkpoints.hpp"

#include <filesystem>
#include <regex>
#include <set>

namespace fedcore::federation {
namespace fs = std::filesystem;

namespace {

// Paths are compared in their canonical form: the store keeps what the server passed at
// commit time, which may be relative to the working directory of that process.
std::string canonical_text(const fs::path& p) {
  std::error_code ec;
  auto c = fs::weakly_canonical(p, ec);
  return ec ? p.lexically_normal().string() : c.string();
}

bool written_by_the_server(const fs::path& file) {
  static const std::regex kRunDir(R"(run-[0-9]+)");
  static const std::regex kCheckpoint(R"(round-[0-9]+(\.state)?\.fcp(\.tmp)?)");
  return std::regex_match(file.parent_path().filename().string(), kRunDir) &&
         std::regex_match(file.filename().string(), kCheckpoint);
}

// A strategy state file (server_state_file.hpp) belongs to its round's checkpoint: kept
// while that checkpoint is, an orphan with it.
fs::path checkpoint_of(const fs::path& file) {
  static const std::regex kState(R"((round-[0-9]+)\.state\.fcp)");
  std::smatch m;
  const auto name = file.filename().string();
  if (std::regex_match(name, m, kState)) {
    return file.parent_path() / (m[1].str() + ".fcp");
  }
  return file;
}

}  // namespace

result<OrphanSweep> remove_orphan_checkpoints(store::HistoryStore& store,
                                              const std::string& checkpoint_dir) {
  auto referenced = store.referenced_checkpoint_paths();
  if (!referenced) {
    return referenced.error();
  }
  std::set<std::string> keep;
  for (const auto& path : *referenced) {
    keep.insert(canonical_text(path));
  }
  OrphanSweep sweep;
  std::error_code ec;
  fs::recursive_directory_iterator it(checkpoint_dir, ec), end;
  if (ec) {
    return fail(errc::io_error,
                "cannot read checkpoint directory '" + checkpoint_dir + "': " + ec.message());
  }
  std::vector<fs::path> orphans;
  for (; it != end; it.increment(ec)) {
    if (ec) {
      return fail(errc::io_error,
                  "cannot read checkpoint directory '" + checkpoint_dir + "': " + ec.message());
    }
    if (it.depth() != 1 || !it->is_regular_file() || !written_by_the_server(it->path())) {
      continue;
    }
    if (keep.count(canonical_text(checkpoint_of(it->path()))) != 0) {
      ++sweep.kept;
    } else {
      orphans.push_back(it->path());  // deleted after the walk, not under the iterator
    }
  }
  for (const auto& path : orphans) {
    if (!fs::remove(path, ec) || ec) {
      return fail(errc::io_error, "cannot delete orphan checkpoint '" + path.string() +
                                      "': " + (ec ? ec.message() : std::string("already gone")));
    }
    sweep.removed.push_back(path.string());
  }
  return sweep;
}

}  // namespace fedcore::federation
