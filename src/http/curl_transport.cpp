#include <algorithm>
#include <cstring>
#include <curl/curl.h>
#include <lodge/http/transport.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <mutex>
#include <optional>

namespace lodge::http {

int64_t StringBody::read(char *buf, size_t n) {
  size_t k = std::min(n, m_data.size() - m_pos);
  std::memcpy(buf, m_data.data() + m_pos, k);
  m_pos += k;
  return static_cast<int64_t>(k);
}

std::string Response::header(std::string_view lower_name) const {
  for (const auto &[k, v] : headers)
    if (k == lower_name) return v;
  return {};
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

namespace {
struct CurlEasyCleanup {
  void operator()(CURL *c) const noexcept { curl_easy_cleanup(c); }
};
struct SlistFree {
  void operator()(curl_slist *l) const noexcept { curl_slist_free_all(l); }
};
struct CurlMultiCleanup {
  void operator()(CURLM *m) const noexcept { curl_multi_cleanup(m); }
};
using CurlHandle = std::unique_ptr<CURL, CurlEasyCleanup>;
using CurlMultiHandle = std::unique_ptr<CURLM, CurlMultiCleanup>;
using SlistHandle = std::unique_ptr<curl_slist, SlistFree>;

struct Exchange {
  const Request *req = nullptr;
  Response *resp = nullptr;
  util::TokenBucket *limiter = nullptr; // null: unlimited
  uint64_t sent = 0;
  bool read_error = false;
  bool got_headers = false;
  bool sink_failed = false;
  bool accepted = false;
  bool refused = false;
};

size_t on_read(char *buf, size_t size, size_t nitems, void *user) {
  auto *ex = static_cast<Exchange *>(user);
  size_t want = size * nitems;
  if (ex->limiter) want = static_cast<size_t>(std::min<uint64_t>(want, ex->limiter->max_chunk()));
  int64_t n = ex->req->body->read(buf, want);
  if (n < 0) {
    ex->read_error = true;
    return CURL_READFUNC_ABORT;
  }
  // The bytes wait here, read and not yet handed to curl, until the budget has them.
  if (ex->limiter) ex->limiter->acquire(static_cast<uint64_t>(n));
  ex->sent += static_cast<uint64_t>(n);
  return static_cast<size_t>(n);
}

size_t on_write(char *data, size_t size, size_t nmemb, void *user) {
  auto *ex = static_cast<Exchange *>(user);
  size_t n = size * nmemb;
  if (ex->req->sink && ex->resp->status >= 200 && ex->resp->status < 300) {
    if (!ex->accepted) {
      ex->accepted = true;
      if (ex->req->accept && !ex->req->accept(*ex->resp)) {
        ex->refused = true;
        return 0;
      }
    }
    if (!ex->req->sink(data, n)) {
      ex->sink_failed = true;
      return 0;
    }
    // Received: the next read from the socket waits until the budget has paid for these.
    if (ex->limiter) ex->limiter->acquire(n);
    return n;
  }
  // Error bodies are small XML documents; a 2xx body without a sink is a listing page
  // (Azure's 5000 blobs with their tags pass 1 MiB) or one of lodge's small objects (whose
  // callers check their own limit): cap what we keep.
  const size_t cap = ex->resp->status >= 200 && ex->resp->status < 300 ? (64U << 20) : (1U << 20);
  if (ex->resp->body.size() < cap) ex->resp->body.append(data, n);
  return n;
}

std::atomic<const std::atomic<bool> *> g_abort{nullptr};

int on_progress(void *user, curl_off_t /*dltotal*/, curl_off_t /*dlnow*/, curl_off_t /*ultotal*/,
                curl_off_t /*ulnow*/) {
  return static_cast<const std::atomic<bool> *>(user)->load() ? 1 : 0; // non-zero aborts the transfer
}

size_t on_header(char *data, size_t size, size_t nitems, void *user) {
  auto *ex = static_cast<Exchange *>(user);
  size_t n = size * nitems;
  std::string_view line(data, n);
  ex->got_headers = true;
  if (line.rfind("HTTP/", 0) == 0) {
    // A new status line (after 100-continue): start over.
    ex->resp->headers.clear();
    auto sp = line.find(' ');
    if (sp != std::string_view::npos)
      ex->resp->status = std::strtol(std::string(line.substr(sp + 1, 3)).c_str(), nullptr, 10);
    return n;
  }
  auto colon = line.find(':');
  if (colon != std::string_view::npos)
    ex->resp->headers.emplace_back(util::to_lower(util::trim(line.substr(0, colon))),
                                   util::trim(line.substr(colon + 1)));
  return n;
}

class CurlTransport final : public Transport {
public:
  explicit CurlTransport(TransportOptions opts)
      : m_opts(std::move(opts)), m_curl(curl_easy_init()), m_multi(curl_multi_init()) {
    if (!m_curl) throw LodgeError(Errc::internal, "curl_easy_init failed");
    if (!m_multi) throw LodgeError(Errc::internal, "curl_multi_init failed");
  }

  Result<Response> perform(const Request &req) override {
    CURL *c = m_curl.get();
    curl_easy_reset(c);
    Response resp;
    Exchange ex{&req, &resp, m_opts.limiter.get()};
    SlistHandle headers;
    auto add_header = [&](const std::string &h) {
      curl_slist *l = curl_slist_append(headers.get(), h.c_str());
      if (!l) throw LodgeError(Errc::internal, "curl_slist_append failed");
      (void)headers.release();
      headers.reset(l);
    };
    for (const auto &[k, v] : req.headers)
      add_header(v.empty() ? k + ";" : k + ": " + v);
    // libcurl adds these unless told not to; S3 wants neither.
    add_header("Expect:");
    if (!req.body) add_header("Transfer-Encoding:");

    bool ok = true;
    auto set = [&](CURLoption o, auto v) { ok = ok && curl_easy_setopt(c, o, v) == CURLE_OK; };
    set(CURLOPT_URL, req.url.c_str());
    set(CURLOPT_HTTPHEADER, headers.get());
    set(CURLOPT_NOSIGNAL, 1L);
    set(CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(m_opts.connect_timeout_ms));
    set(CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(m_opts.limiter ? 1 : m_opts.low_speed_bytes_per_s));
    set(CURLOPT_LOW_SPEED_TIME, static_cast<long>(m_opts.low_speed_time_s));
    set(CURLOPT_SSL_VERIFYPEER, m_opts.verify_tls ? 1L : 0L);
    set(CURLOPT_SSL_VERIFYHOST, m_opts.verify_tls ? 2L : 0L);
    if (!m_opts.ca_bundle.empty()) set(CURLOPT_CAINFO, m_opts.ca_bundle.c_str());
    set(CURLOPT_PROTOCOLS_STR, "http,https");
    if (m_opts.no_proxy) set(CURLOPT_NOPROXY, "*");
    const auto *abort = g_abort.load();
    if (abort && abort->load())
      return Error(Errc::interrupted, "aborted before it started (" + req.method + ")");
    set(CURLOPT_NOPROGRESS, abort ? 0L : 1L);
    if (abort) {
      set(CURLOPT_XFERINFOFUNCTION, on_progress);
      set(CURLOPT_XFERINFODATA, const_cast<std::atomic<bool> *>(abort));
    }
    set(CURLOPT_FOLLOWLOCATION, 0L);
    set(CURLOPT_HEADERFUNCTION, on_header);
    set(CURLOPT_HEADERDATA, &ex);
    set(CURLOPT_WRITEFUNCTION, on_write);
    set(CURLOPT_WRITEDATA, &ex);
    char curl_says[CURL_ERROR_SIZE] = "";
    set(CURLOPT_ERRORBUFFER, curl_says);
    // A body whose bound moves while it is sent (its upload renewed by these very bytes) is
    // held to that bound by run(); any other request to its deadline by curl's own timeout.
    const util::TransferWatch *watch = req.body ? req.body->watch() : nullptr;
    int64_t timeout = m_opts.total_timeout_ms;
    if (const int64_t deadline = watch ? watch->bound_ms() : req.deadline_steady_ms; deadline > 0) {
      int64_t left = deadline - util::steady_ms();
      if (left <= 0) return Error(Errc::deadline_exceeded, "deadline passed before the request started");
      if (!watch) timeout = timeout > 0 ? std::min(timeout, left) : left;
    }
    if (timeout > 0) set(CURLOPT_TIMEOUT_MS, static_cast<long>(timeout));
    if (req.method == "HEAD") {
      set(CURLOPT_NOBODY, 1L);
    } else if (req.body && req.method == "PUT") {
      req.body->rewind();
      set(CURLOPT_UPLOAD, 1L);
      set(CURLOPT_READFUNCTION, on_read);
      set(CURLOPT_READDATA, &ex);
      set(CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(req.body->size()));
    } else if (req.body && req.method == "POST") {
      req.body->rewind();
      set(CURLOPT_POST, 1L);
      set(CURLOPT_READFUNCTION, on_read);
      set(CURLOPT_READDATA, &ex);
      set(CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body->size()));
    } else if (req.method == "POST") {
      set(CURLOPT_POST, 1L);
      set(CURLOPT_POSTFIELDSIZE, 0L);
      set(CURLOPT_POSTFIELDS, "");
    } else if (req.method != "GET") {
      set(CURLOPT_CUSTOMREQUEST, req.method.c_str());
    }
    if (!ok) return Error(Errc::internal, "curl_easy_setopt failed");

    const std::optional<CURLcode> ran = run(c, watch);
    const CURLcode rc = ran.value_or(CURLE_OPERATION_TIMEDOUT);
    if (rc == CURLE_OK) {
      long status = 0;
      curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
      resp.status = status;
      return resp;
    }
    if (ex.read_error) return Error(Errc::unreadable, "reading the request body failed");
    if (ex.sink_failed) return Error(Errc::internal, "writing the response body failed");
    if (ex.refused)
      return Error(Errc::storage_error, "the answer does not fit the request (" + req.method + " " +
                                            util::log::redact(req.url) + ")");
    ErrorDetails d;
    d.curl_code = static_cast<int>(rc);
    uint64_t size = req.body ? req.body->size() : 0;
    // Whole body sent, no status line back: the server may still have acted on it.
    d.ambiguous = req.method != "GET" && req.method != "HEAD" && ex.sent >= size && !ex.got_headers;
    const std::string what = " (" + req.method + " " + util::log::redact(req.url) + ")";
    if (!ran) return Error(Errc::deadline_exceeded, "deadline passed during the transfer" + what, d);
    Errc code = rc == CURLE_ABORTED_BY_CALLBACK ? Errc::interrupted : Errc::storage_unavailable;
    if (rc == CURLE_OPERATION_TIMEDOUT && !watch && req.deadline_steady_ms > 0 &&
        util::steady_ms() >= req.deadline_steady_ms - 5)
      return Error(Errc::deadline_exceeded, "deadline passed: " + std::string(curl_easy_strerror(rc)) + what,
                   d);
    // curl's own limits (the low-speed abort, the request's total timeout): said as such.
    if (rc == CURLE_OPERATION_TIMEDOUT)
      return Error(code,
                   "the connection's own timeout: " +
                       std::string(curl_says[0] ? curl_says : curl_easy_strerror(rc)) + what,
                   d);
    return Error(code, std::string(curl_easy_strerror(rc)) + what, d);
  }

private:
  // Runs the transfer set up on `c` through m_multi (its connection cache keeps connections
  // alive between requests, as curl_easy_perform's own would), checking watch's bound
  // between every two steps: nullopt when that bound passed first (the transfer is then
  // abandoned and its connection closed), else curl's result.
  std::optional<CURLcode> run(CURL *c, const util::TransferWatch *watch) {
    CURLM *m = m_multi.get();
    if (curl_multi_add_handle(m, c) != CURLM_OK) return CURLE_FAILED_INIT;
    std::optional<CURLcode> out;
    for (;;) {
      int running = 0;
      if (curl_multi_perform(m, &running) != CURLM_OK) {
        out = CURLE_BAD_FUNCTION_ARGUMENT;
        break;
      }
      int queued = 0;
      while (const CURLMsg *msg = curl_multi_info_read(m, &queued))
        if (msg->msg == CURLMSG_DONE && msg->easy_handle == c) out = msg->data.result;
      if (out) break;
      int64_t wait_ms = 1000;
      if (watch) {
        const int64_t left = watch->bound_ms() - util::steady_ms();
        if (left <= 0) break;
        wait_ms = std::min(wait_ms, left);
      }
      if (curl_multi_poll(m, nullptr, 0, static_cast<int>(wait_ms), nullptr) != CURLM_OK) {
        out = CURLE_BAD_FUNCTION_ARGUMENT;
        break;
      }
    }
    curl_multi_remove_handle(m, c);
    return out;
  }

  TransportOptions m_opts;
  CurlHandle m_curl;
  CurlMultiHandle m_multi; // declared after m_curl: cleaned up first, as curl asks
};
} // namespace

void set_abort_flag(const std::atomic<bool> *flag) {
  g_abort = flag;
}

bool abort_requested() {
  const auto *flag = g_abort.load();
  return flag != nullptr && flag->load();
}

std::unique_ptr<Transport> make_curl_transport(const TransportOptions &opts) {
  global_init();
  return std::make_unique<CurlTransport>(opts);
}

} // namespace lodge::http
