#pragma once
// The ledger schema: schema.sql (embedded at build time) is the current version;
// migrations.cpp holds the steps that bring an older ledger up to it.

namespace lodge::ledger {

extern const char *const k_schema_sql;
// PRAGMA user_version of a ledger this build writes.
inline constexpr int k_schema_version = 12;
// The oldest user_version this build can migrate from.
inline constexpr int k_oldest_schema_version = 1;

} // namespace lodge::ledger
