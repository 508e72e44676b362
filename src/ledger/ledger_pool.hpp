#pragma once
// The workers' ledger pool that open_ledger_pool makes (ledger_pool.cpp), internal to the
// ledger layer: what its tests read of it besides LedgerPool.

#include <cstddef>
#include <lodge/ledger/ledger.hpp>

namespace lodge::ledger {

class ConnectionPool : public LedgerPool {
public:
  // The connections opened so far, SQLite's group writer included.
  [[nodiscard]] virtual size_t connections_opened() = 0;
  // The most it opens: PoolOptions::max_connections or its default (PostgreSQL's also bounded
  // by what the server allows), plus SQLite's group writer. Lower once opening one failed.
  [[nodiscard]] virtual size_t max_connections() = 0;
};

} // namespace lodge::ledger
