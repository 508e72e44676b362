// CredentialSource: one set of credentials for every client of a process, renewed ahead of
// its expiry.

#include <lodge/aws/credentials.hpp>
#include <lodge/util/log.hpp>

namespace lodge::aws {

CredentialSource::CredentialSource(Credentials initial, Fetch fetch, const util::Clock &clock,
                                   int64_t margin_ms)
    : m_fetch(std::move(fetch)), m_clock(clock), m_margin_ms(margin_ms),
      m_current(std::make_shared<const Credentials>(std::move(initial))) {}

std::shared_ptr<const Credentials> CredentialSource::current() {
  std::shared_ptr<const Credentials> now;
  {
    std::lock_guard lock(m_mutex);
    now = m_current;
    if (now->expires_ms == 0 || m_clock.now_ms() < now->expires_ms - m_margin_ms || m_fetching || !m_fetch)
      return now;
    m_fetching = true; // this caller renews; the lock is not held across the fetch
  }
  auto fresh = m_fetch();
  std::lock_guard lock(m_mutex);
  m_fetching = false;
  if (!fresh) {
    util::log::warn("could not renew the temporary S3 credentials (" + fresh.error().message +
                    "); going on with the current ones");
    return m_current;
  }
  ++m_renewals;
  m_current = std::make_shared<const Credentials>(std::move(fresh.value()));
  return m_current;
}

int CredentialSource::renewals() const {
  std::lock_guard lock(m_mutex);
  return m_renewals;
}

} // namespace lodge::aws
