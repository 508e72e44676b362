#pragma once
// `lodge doctor`'s checks of the ledger: its location (a SQLite file's checks, or a PostgreSQL
// server's answer), then, when it opens and a store is configured, its binding against the
// configured store (the check every store command makes first).

#include <lodge/config/config.hpp>
#include <lodge/ops/read/doctor.hpp>
#include <lodge/ops/session.hpp>
#include <vector>

namespace lodge::ops::doctor {

[[nodiscard]] std::vector<Check> ledger_checks(Session &session, const config::Config &cfg);

} // namespace lodge::ops::doctor
