#pragma once
// AWS credentials, and the source every client of a process signs with (S3, SQS): one set,
// renewed before it expires.

#include <cstdint>
#include <functional>
#include <lodge/error.hpp>
#include <lodge/util/clock.hpp>
#include <memory>
#include <mutex>
#include <string>

namespace lodge::aws {

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token; // empty when none
  std::string source;        // where they came from: "environment", "file:PROFILE"
  int64_t expires_ms = 0;    // temporary credentials: when they expire (ms since the epoch); 0: never
};

// Temporary credentials shared by every client of a process, renewed before they expire:
// the one caller that finds them within `margin_ms` of expiry fetches new ones with no
// lock held (the others go on signing with the current ones meanwhile), then swaps them in.
class CredentialSource {
public:
  using Fetch = std::function<Result<Credentials>()>;
  CredentialSource(Credentials initial, Fetch fetch, const util::Clock &clock, int64_t margin_ms = 300'000);
  // The credentials to sign with now (never null). A failed renewal keeps the current ones
  // (logged as a warning) and is tried again by the next caller.
  [[nodiscard]] std::shared_ptr<const Credentials> current();
  // How many renewals have been fetched (tests).
  [[nodiscard]] int renewals() const;

private:
  Fetch m_fetch;
  const util::Clock &m_clock;
  int64_t m_margin_ms;
  mutable std::mutex m_mutex;
  std::shared_ptr<const Credentials> m_current;
  bool m_fetching = false;
  int m_renewals = 0;
};

} // namespace lodge::aws
