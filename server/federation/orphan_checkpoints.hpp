// Orphan checkpoints: files a crash left between writing a round's checkpoint and
// committing the round (docs/schema.md, "Orphans").
//
// The server calls remove_orphan_checkpoints at start-up, before it resumes any run. It
// looks only at what the server itself writes — `run-<id>/round-<n>.fcp`, the strategy
// state files `round-<n>.state.fcp` beside them, and their `.tmp` siblings under the
// checkpoint directory — and deletes those no row of the store references (a state file
// goes with its round's checkpoint), so an operator's other files in that directory are never
// touched.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "server/store/history_store.hpp"
#include "shared/util/error.hpp"

namespace fedcore::federation {

struct OrphanSweep {
  std::vector<std::string> removed;  // paths deleted
  std::size_t kept = 0;              // checkpoint files a row references
};

// Errors: those of HistoryStore::referenced_checkpoint_paths; io_error when the directory
// cannot be read or a file cannot be deleted (the sweep stops there, nothing else lost).
result<OrphanSweep> remove_orphan_checkpoints(store::HistoryStore& store,
                                              const std::string& checkpoint_dir);

}  // namespace fedcore::federation
