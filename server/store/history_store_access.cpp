// HistoryStore: admin access — API tokens (api_tokens) and the audit trail (audit_log).
// Tokens are stored as their SHA-256 only; nothing here ever sees a token.
#include "server/store/detail/rows.hpp"
#include "server/store/history_store.hpp"

namespace fedcore::store {
using namespace detail;

namespace {

bool is_lower_hex_digest(std::string_view text) {
  return text.size() == 64 && text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

result<void> validate_token(const ApiTokenRecord& t) {
  if (t.name.empty() || t.name.size() > 64) {
    return fail(errc::invalid_argument, "a token name must be 1 to 64 bytes");
  }
  if (t.role != "read" && t.role != "admin") {
    return fail(errc::invalid_argument, cat("unknown role ", in_quotes(t.role)));
  }
  if (!is_lower_hex_digest(t.sha256_hex)) {
    // The value is not echoed: it is meant to be a hash, but a caller bug could pass the
    // token itself.
    return fail(errc::invalid_argument, "a token hash must be 64 lower-case hex digits");
  }
  if (t.created_by.empty()) {
    return fail(errc::invalid_argument, "created_by is empty");
  }
  return {};
}

ApiTokenRecord read_token(const Statement& s) {
  ApiTokenRecord t;
  t.id = s.column_int64(0);
  t.name = s.column_text(1);
  t.role = s.column_text(2);
  t.sha256_hex = s.column_text(3);
  t.created_ms = s.column_int64(4);
  t.created_by = s.column_text(5);
  t.expires_ms = read_optional_int64(s, 6);
  t.revoked_ms = read_optional_int64(s, 7);
  return t;
}

AuditRecord read_audit(const Statement& s) {
  AuditRecord a;
  a.id = s.column_int64(0);
  a.time_ms = s.column_int64(1);
  a.token_name = s.column_text(2);
  a.token_id = read_optional_int64(s, 3);
  a.role = s.column_text(4);
  a.remote = s.column_text(5);
  a.method = s.column_text(6);
  a.path = s.column_text(7);
  a.status = s.column_int64(8);
  a.detail_json = s.column_text(9);
  return a;
}

result<std::optional<ApiTokenRecord>> one_token(Statement& s) {
  auto rows = read_all<ApiTokenRecord>(s, read_token);
  if (!rows) {
    return rows.error();
  }
  if (rows->empty()) {
    return std::optional<ApiTokenRecord>();
  }
  return std::optional<ApiTokenRecord>(std::move(rows->front()));
}

}  // namespace

result<ApiTokenRecord> HistoryStore::create_api_token(const ApiTokenRecord& token) {
  const std::string what = cat("cannot store API token ", in_quotes(token.name));
  if (auto ok = validate_token(token); !ok) {
    return in(what, ok.error());
  }
  auto s = db_.prepare(
      "INSERT INTO api_tokens (name, role, sha256, created_ms, created_by, expires_ms) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  if (!s) {
    return in(what, s.error());
  }
  s->bind_text(1, token.name)
      .bind_text(2, token.role)
      .bind_text(3, token.sha256_hex)
      .bind_int64(4, token.created_ms)
      .bind_text(5, token.created_by);
  bind_optional(*s, 6, token.expires_ms);
  if (auto ok = s->run(); !ok) {
    if (ok.error().code == errc::already_exists) {
      // SQLite's message names the column; a hash collision of two fresh tokens is not a
      // real case, so the name is what the caller needs to hear about.
      return fail(errc::already_exists, cat(what, ": the name is taken"));
    }
    return in(what, ok.error());
  }
  ApiTokenRecord stored = token;
  stored.id = db_.last_insert_rowid();
  stored.revoked_ms.reset();
  return stored;
}

result<std::vector<ApiTokenRecord>> HistoryStore::list_api_tokens() {
  auto s = db_.prepare(
      "SELECT id, name, role, sha256, created_ms, created_by, expires_ms, revoked_ms "
      "FROM api_tokens ORDER BY id");
  if (!s) {
    return in("cannot list API tokens", s.error());
  }
  auto rows = read_all<ApiTokenRecord>(*s, read_token);
  if (!rows) {
    return in("cannot list API tokens", rows.error());
  }
  return rows;
}

result<std::optional<ApiTokenRecord>> HistoryStore::find_api_token(const std::string& sha256_hex) {
  auto s = db_.prepare(
      "SELECT id, name, role, sha256, created_ms, created_by, expires_ms, revoked_ms "
      "FROM api_tokens WHERE sha256 = ?1");
  if (!s) {
    return in("cannot look up an API token", s.error());
  }
  s->bind_text(1, sha256_hex);
  auto found = one_token(*s);
  if (!found) {
    return in("cannot look up an API token", found.error());
  }
  return found;
}

result<ApiTokenRecord> HistoryStore::revoke_api_token(std::int64_t id, std::int64_t now_ms) {
  const std::string what = cat("cannot revoke API token ", id);
  auto update =
      db_.prepare("UPDATE api_tokens SET revoked_ms = coalesce(revoked_ms, ?2) WHERE id = ?1");
  if (!update) {
    return in(what, update.error());
  }
  update->bind_int64(1, id).bind_int64(2, now_ms);
  if (auto ok = update->run(); !ok) {
    return in(what, ok.error());
  }
  if (db_.changes() == 0) {
    return fail(errc::not_found, cat("API token ", id, " does not exist"));
  }
  auto s = db_.prepare(
      "SELECT id, name, role, sha256, created_ms, created_by, expires_ms, revoked_ms "
      "FROM api_tokens WHERE id = ?1");
  if (!s) {
    return in(what, s.error());
  }
  s->bind_int64(1, id);
  auto found = one_token(*s);
  if (!found) {
    return in(what, found.error());
  }
  if (!found->has_value()) {
    return fail(errc::not_found, cat("API token ", id, " does not exist"));
  }
  return std::move(**found);
}

result<std::int64_t> HistoryStore::append_audit(const AuditRecord& record) {
  const std::string what =
      cat("cannot append an audit row for ", in_quotes(record.method), " ", in_quotes(record.path));
  if (record.method.empty()) {
    return fail(errc::invalid_argument, "cannot append an audit row without a method");
  }
  if (record.status < 100 || record.status > 599) {
    return fail(errc::invalid_argument, cat(what, ": status ", record.status, " is not HTTP"));
  }
  if (auto ok = require_json(record.detail_json, "detail_json"); !ok) {
    return in(what, ok.error());
  }
  auto s = db_.prepare(
      "INSERT INTO audit_log (time_ms, token_name, token_id, role, remote, method, path, "
      "                       status, detail_json) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
  if (!s) {
    return in(what, s.error());
  }
  s->bind_int64(1, record.time_ms).bind_text(2, record.token_name);
  bind_optional(*s, 3, record.token_id);
  s->bind_text(4, record.role)
      .bind_text(5, record.remote)
      .bind_text(6, record.method)
      .bind_text(7, record.path)
      .bind_int64(8, record.status)
      .bind_text(9, record.detail_json);
  if (auto ok = s->run(); !ok) {
    return in(what, ok.error());
  }
  return db_.last_insert_rowid();
}

result<std::vector<AuditRecord>> HistoryStore::list_audit(std::optional<std::int64_t> before_id,
                                                          std::int64_t limit) {
  if (auto ok = require_page(limit, 0); !ok) {
    return in("cannot list the audit trail", ok.error());
  }
  auto s = db_.prepare(
      "SELECT id, time_ms, token_name, token_id, role, remote, method, path, status, "
      "       detail_json "
      "FROM audit_log WHERE ?1 IS NULL OR id < ?1 ORDER BY id DESC LIMIT ?2");
  if (!s) {
    return in("cannot list the audit trail", s.error());
  }
  bind_optional(*s, 1, before_id);
  s->bind_int64(2, limit);
  auto rows = read_all<AuditRecord>(*s, read_audit);
  if (!rows) {
    return in("cannot list the audit trail", rows.error());
  }
  return rows;
}

result<std::int64_t> HistoryStore::prune_audit(std::int64_t keep_newest) {
  if (keep_newest < 1) {
    return fail(errc::invalid_argument,
                cat("cannot prune the audit trail to ", keep_newest, " rows: keep at least 1"));
  }
  // Ids increase, so the newest rows are the highest ids: one range delete on the key.
  auto s = db_.prepare("DELETE FROM audit_log WHERE id <= (SELECT MAX(id) FROM audit_log) - ?1");
  if (!s) {
    return in("cannot prune the audit trail", s.error());
  }
  s->bind_int64(1, keep_newest);
  if (auto ok = s->run(); !ok) {
    return in("cannot prune the audit trail", ok.error());
  }
  return db_.changes();
}

}  // namespace fedcore::store
