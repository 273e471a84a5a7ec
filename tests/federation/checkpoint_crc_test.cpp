// The checkpoints table's crc32 column (issue 19). It identifies a checkpoint's content: it
// is the CRC-32 of every byte of the parameter file before its 4-byte CRC trailer, which
// is the trailer's own value (docs/formats.md, docs/schema.md). It used to be the CRC of
// the whole file, and a CRC over a message followed by its own CRC is the same residue for
// every message: the column read 558161692 for every checkpoint.
#include <algorithm>
#include <fstream>
#include <iterator>
#include <memory>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "server/federation/run_model.hpp"
#include "shared/util/checksum.hpp"
#include "tests/store/store_fixtures.hpp"
#include "tests/temp_dir.hpp"

namespace fedcore::federation {
namespace {

constexpr std::uint32_t kCrcResidue = 0x2144DF1Cu;  // 558161692

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  std::transform(chars.begin(), chars.end(), bytes.begin(),
                 [](char c) { return static_cast<std::byte>(c); });
  return bytes;
}

std::uint32_t trailer_of(const std::vector<std::byte>& bytes) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    v |= std::to_integer<std::uint32_t>(bytes[bytes.size() - 4 + i]) << (8 * i);
  }
  return v;
}

TEST(CheckpointCrc, TheColumnIsTheCrcOfTheContentAndDiffersBetweenCheckpoints) {
  fedcore::testing::TempDir temp;
  auto store = store::HistoryStore::open(temp.path("history.db"));
  ASSERT_TRUE(store) << store.error().to_string();
  auto config =
      parse_run_config(R"({"name":"t","model":{"type":"logreg","input_shape":[4],"num_classes":2},)"
                       R"("rounds":2,"clients_per_round":1,"min_clients":1,"round_timeout_s":10,)"
                       R"("wait_for_clients_s":5})");
  ASSERT_TRUE(config) << config.error().message;
  auto run = store->create_run("t", to_json_text(*config), 2, 1);
  ASSERT_TRUE(run) << run.error().to_string();
  ASSERT_TRUE(store->set_run_state(run->id, store::RunState::running, "", 2));
  auto model = prepare_run_model(*config, run->id, nullptr, 0, *store, temp.path("ckpt"));
  ASSERT_TRUE(model) << model.error().message;

  // Two rounds with different global models, each committed with the reference the
  // server writes.
  for (std::int64_t round = 1; round <= 2; ++round) {
    auto next = *model->global;
    for (auto& v : next) {
      v += 0.25f * static_cast<float>(round);
    }
    model->global = std::make_shared<const std::vector<float>>(std::move(next));
    auto ref = model->write_checkpoint(run->id, round);
    ASSERT_TRUE(ref) << ref.error().message;
    ASSERT_TRUE(store->commit_round(store::testing::make_round(run->id, round), {}, *ref));
  }

  auto rows = store->list_checkpoints(run->id);
  ASSERT_TRUE(rows) << rows.error().to_string();
  ASSERT_EQ(rows->size(), 2u);
  for (const auto& row : *rows) {
    const auto bytes = read_file(row.ref.path);
    ASSERT_GT(bytes.size(), 4u) << row.ref.path;
    EXPECT_EQ(static_cast<std::int64_t>(bytes.size()), row.ref.size_bytes);
    const auto content = std::span<const std::byte>(bytes).first(bytes.size() - 4);
    EXPECT_EQ(row.ref.crc32, crc32(content)) << row.ref.path;
    EXPECT_EQ(row.ref.crc32, trailer_of(bytes)) << row.ref.path;
    EXPECT_NE(row.ref.crc32, kCrcResidue) << row.ref.path;
    // What the column used to hold: the CRC of the whole file, the same for every file.
    EXPECT_EQ(crc32(bytes), kCrcResidue) << row.ref.path;
  }
  EXPECT_NE((*rows)[0].ref.crc32, (*rows)[1].ref.crc32);
}

}  // namespace
}  // namespace fedcore::federation
