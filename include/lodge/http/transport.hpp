#pragma once
// HTTP over libcurl: one CURL handle per transport (per worker), reused for keep-alive.
// Bodies are streamed (CURLOPT_UPLOAD, explicit Content-Type), re-read from the start on
// each attempt; a caller-given deadline aborts the transfer.

#include <atomic>
#include <cstdint>
#include <functional>
#include <lodge/error.hpp>
#include <lodge/util/token_bucket.hpp>
#include <lodge/util/transfer_watch.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lodge::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

// A request body that can be read from its start again (for retries).
class BodySource {
public:
  virtual ~BodySource() = default;
  [[nodiscard]] virtual uint64_t size() const = 0;
  // Back to the first byte. Called before every attempt.
  virtual void rewind() = 0;
  // Fills up to n bytes; returns the count (0 at the end) or -1 on a read error.
  virtual int64_t read(char *buf, size_t n) = 0;
  // The bound this body's transfer ends by while it runs (checked as it goes, instead of
  // Request::deadline_steady_ms), or null.
  [[nodiscard]] virtual const util::TransferWatch *watch() const { return nullptr; }
};

class StringBody final : public BodySource {
public:
  explicit StringBody(std::string s) : m_data(std::move(s)) {}
  [[nodiscard]] uint64_t size() const override { return m_data.size(); }
  void rewind() override { m_pos = 0; }
  int64_t read(char *buf, size_t n) override;

private:
  std::string m_data;
  size_t m_pos = 0;
};

struct Response {
  long status = 0;
  Headers headers; // names lowercased
  std::string body;
  [[nodiscard]] std::string header(std::string_view lower_name) const;
};

struct Request {
  std::string method;
  std::string url; // fully encoded
  Headers headers;
  BodySource *body = nullptr;                     // not owned
  std::function<bool(const char *, size_t)> sink; // streams the response body when set
  // Called once with the status and headers of a 2xx answer, before its first body byte
  // reaches sink; false refuses the body (the attempt fails with STORAGE_ERROR).
  std::function<bool(const Response &)> accept;
  int64_t deadline_steady_ms = 0; // 0: no deadline beyond the timeouts (see BodySource::watch)
};

struct TransportOptions {
  int64_t connect_timeout_ms = 10'000;
  int64_t low_speed_bytes_per_s = 1024; // abort when slower than this ...
  int64_t low_speed_time_s = 30;        // ... for this long
  int64_t total_timeout_ms = 0;         // 0: none (the deadline still applies)
  std::string ca_bundle;
  bool verify_tls = true;
  bool no_proxy = false; // never through HTTP(S)_PROXY (the link-local metadata services)
  // The process's byte budget (--bwlimit), shared by every transport of the process: a
  // request body's bytes are taken from it as they are read to be sent, a streamed response
  // body's (sink) as they arrive. Null: unlimited, and nothing is counted. With one, the
  // low-speed abort only takes a transfer that moved nothing at all for low_speed_time_s:
  // a transfer's share of a small budget may be below low_speed_bytes_per_s.
  std::shared_ptr<util::TokenBucket> limiter;
};

class Transport {
public:
  virtual ~Transport() = default;
  // Performs one attempt. Network failures come back as STORAGE_UNAVAILABLE with the
  // curl code in details; details.ambiguous is set when the whole body left and no
  // response arrived (the server may have acted). HTTP error statuses are responses.
  virtual Result<Response> perform(const Request &req) = 0;
};

[[nodiscard]] std::unique_ptr<Transport> make_curl_transport(const TransportOptions &opts);

// A process-wide flag that, once true, aborts every transfer in flight and refuses new
// ones with INTERRUPTED (a second Ctrl-C). Null, the default: none. Set before threads start.
void set_abort_flag(const std::atomic<bool> *flag);
// Whether that flag is set: a store that moves bytes without HTTP (file://) stops on it too.
[[nodiscard]] bool abort_requested();

// Global libcurl initialisation; call once from main before threads start.
void global_init();

} // namespace lodge::http
