// What one command's run opens (session.hpp).
#include <lodge/ops/binding.hpp>
#include <lodge/ops/session.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/token_bucket.hpp>

namespace lodge::ops {

ledger::Ledger &Session::ledger() {
  if (!m_ledger) m_ledger = open_ledger();
  return *m_ledger;
}

ledger::Ledger &Session::init_ledger() {
  if (!m_ledger) m_ledger = open_ledger(false, true);
  return *m_ledger;
}

ledger::Ledger &Session::reader() {
  if (m_ledger) return *m_ledger;
  if (!m_reader) m_reader = open_ledger(true);
  return *m_reader;
}

ledger::OpenOptions Session::ledger_options(bool read_only, bool create) {
  const auto &c = configuration();
  ledger::OpenOptions o;
  o.read_only = read_only;
  o.create = create;
  o.location = c.ledger;
  o.lock_timeout_ms = c.busy_timeout_ms;
  o.timeout_ms = c.ledger_timeout_ms;
  o.force_network_fs = c.force_network_fs;
  return o;
}

std::unique_ptr<ledger::Ledger> Session::open_ledger(bool read_only, bool create) {
  return ledger::open_ledger(ledger_options(read_only, create));
}

std::shared_ptr<ledger::LedgerPool> Session::ledger_pool() {
  if (!m_pool) m_pool = ledger::open_ledger_pool(ledger_options(false, false));
  return m_pool;
}

store::Binding Session::store_binding() {
  const auto &c = configuration();
  return store::canonical_binding(c.store, c.store_config->endpoint(), c.store_config->tag_state());
}

std::string Session::ledger_shown() {
  return m_ledger ? m_ledger->location() : ledger::shown_location(configuration().ledger);
}

std::unique_ptr<store::ObjectStore> Session::open_store() {
  auto st = open_store_unbound();
  std::lock_guard lock(m_binding_mutex);
  if (m_binding_checked) return st;
  auto want = store_binding();
  auto &l = ledger();
  const auto check = check_binding(l, l.location(), want);
  if (check.recorded)
    note("ledger " + util::escape_for_terminal(l.location()) + " is now bound to store " +
         util::escape_for_terminal(store::describe(want)) +
         (!check.mode_added ? ""
          : want.state_tags ? ", with state tags"
                            : ", without state tags") +
         " (recorded on first use after upgrade)");
  m_binding_checked = true;
  return st;
}

std::unique_ptr<store::ObjectStore> Session::open_store_unbound() {
  return backend().connect();
}

store::Backend &Session::backend() {
  // Workers and their part connections all open stores: resolve the credentials once.
  std::lock_guard lock(m_backend_mutex);
  if (!m_backend) {
    const auto &c = configuration();
    store::StoreOptions o;
    o.url = c.store;
    o.config = c.store_config;
    o.env = environment();
    if (auto notice = c.store_config->notice(); !notice.empty()) warn(notice);
    o.verify_tls = c.verify_tls;
    o.backpressure = m_backpressure;
    // One budget for the whole process: every worker, every part, every connection. A burst
    // of 1/8 s (not the bucket's default second): what leaves at once when a run starts or
    // resumes stays small, so the rate holds over any few seconds, as a shared link sees it.
    if (const uint64_t rate = bwlimit(); rate > 0)
      o.limiter = std::make_shared<util::TokenBucket>(rate, rate / 8);
    m_backend = store::open_backend(o);
  }
  return *m_backend;
}

uint64_t Session::bwlimit() {
  if (auto rate = rate_flag()) return *rate;
  if (configuration().bwlimit) return *configuration().bwlimit;
  // Neither set: the store's own default (an S3 store's AWS profile, `s3 = max_bandwidth`).
  return configuration().store_bandwidth;
}

} // namespace lodge::ops
