#pragma once
// The SQLite backend of Ledger; internal to the ledger layer.

#include <lodge/ledger/ledger.hpp>
#include <lodge/ledger/sqlite.hpp>

namespace lodge::ledger {

class SqliteLedger final : public Ledger {
public:
  explicit SqliteLedger(const OpenOptions& opts);

  [[nodiscard]] const std::string& path() const override { return m_db.path(); }
  [[nodiscard]] const std::string& uuid() const override { return m_uuid; }
  [[nodiscard]] int schema_version() override;
  [[nodiscard]] StatusReport status(int64_t now) override;
  void record_job_run(const JobRun& run) override;

private:
  void initialise_or_migrate();

  Db m_db;
  const util::Clock* m_clock;
  std::string m_uuid;
};

// Applies each migration step from `from` up to k_schema_version (inside the caller's
// transaction). Throws LodgeError when `from` is outside the supported range.
void migrate(Db& db, int from);

} // namespace lodge::ledger
