#pragma once
// What one command's run opens, each on first use and from the configuration: the ledger (for
// writing, for `lodge init`, or read-only), the worker ledgers' pool, the store's backend (its
// credentials and the process's rate limit) and its connections, the first of which checks the
// ledger's binding (binding.hpp). This decides how each is opened; what the user should hear
// goes through note() and warn(), which the caller renders (or leaves out under -q).

#include <cstdint>
#include <lodge/config/config.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/backpressure.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace lodge::ops {

class Session {
public:
  Session() = default;
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;
  virtual ~Session() = default;

  // The ledger (opened and migrated once, on first use). LEDGER_NOT_FOUND when there is
  // none: only init_ledger() creates one.
  ledger::Ledger &ledger();
  // The ledger for `lodge init`: created when missing, migrated when older.
  ledger::Ledger &init_ledger();
  // The ledger for a command that only reads it (status, list, tasks): opened read-only
  // (never migrated) unless this run already opened it for writing.
  ledger::Ledger &reader();
  // Whether ledger() has opened the ledger (for writing) in this run.
  [[nodiscard]] bool ledger_opened() const { return m_ledger != nullptr; }
  // A new ledger connection (for worker threads; each needs its own).
  std::unique_ptr<ledger::Ledger> open_ledger(bool read_only = false, bool create = false);
  // The ledgers of a run's worker threads (opened once per run): on SQLite their upload
  // writes are group-committed through one shared writer (ledger::LedgerPool).
  std::shared_ptr<ledger::LedgerPool> ledger_pool();
  // A new store connection (credentials resolved once, by the backend). The first one of
  // a run checks the ledger's binding: STORE_MISMATCH for another store; a ledger with no
  // binding yet (made by an older lodge) is bound to this store, said once through note().
  std::unique_ptr<store::ObjectStore> open_store();
  // A store connection without the binding check (for `lodge init`, which makes it).
  std::unique_ptr<store::ObjectStore> open_store_unbound();
  // The binding of the configured store.
  [[nodiscard]] store::Binding store_binding();
  // The ledger's location as messages name it (the opened ledger's, else the configured one's).
  [[nodiscard]] std::string ledger_shown();
  // Records that this run's store matches the ledger's binding (init made it so).
  void binding_checked() { m_binding_checked = true; }
  // The configured store's backend, opened once (its URL parsed, its credentials
  // resolved, the process's rate limiter made); thread-safe.
  store::Backend &backend();
  // What every store connection of the process heard that says "fewer at once" (counted by
  // the backend's retry loop; the upload run adapts its concurrency to it).
  [[nodiscard]] std::shared_ptr<const util::Backpressure> backpressure() const { return m_backpressure; }

protected:
  // The effective configuration, the environment a backend finds its credentials in, and the
  // command's --bwlimit (none: not given), as the caller has them.
  virtual const config::Config &configuration() = 0;
  [[nodiscard]] virtual const std::map<std::string, std::string> &environment() const = 0;
  [[nodiscard]] virtual std::optional<uint64_t> rate_flag() = 0;
  // A line for the user ("ledger X is now bound to ..."), and a warning.
  virtual void note(const std::string &line) = 0;
  virtual void warn(const std::string &line) = 0;

private:
  [[nodiscard]] ledger::OpenOptions ledger_options(bool read_only, bool create);
  // The process's byte budget per second (0: none): --bwlimit, else the configuration's
  // bwlimit (LODGE_BWLIMIT over the file's key), else the store's own default.
  [[nodiscard]] uint64_t bwlimit();

  std::unique_ptr<ledger::Ledger> m_ledger;
  std::unique_ptr<ledger::Ledger> m_reader;
  std::shared_ptr<ledger::LedgerPool> m_pool;
  std::mutex m_binding_mutex;
  bool m_binding_checked = false;
  std::mutex m_backend_mutex;
  std::shared_ptr<store::Backend> m_backend;
  std::shared_ptr<util::Backpressure> m_backpressure = std::make_shared<util::Backpressure>();
};

} // namespace lodge::ops
