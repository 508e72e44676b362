#include <algorithm>
#include <cstdio>
#include <lodge/http/resumable_get.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <optional>

namespace lodge::http {
namespace {

// "bytes FIRST-LAST/TOTAL" of a 206 answer: first and total.
std::optional<std::pair<uint64_t, uint64_t>> parse_content_range(const std::string &v) {
  unsigned long long first = 0, last = 0, total = 0;
  if (std::sscanf(v.c_str(), "bytes %llu-%llu/%llu", &first, &last, &total) != 3) return std::nullopt;
  return std::make_pair(static_cast<uint64_t>(first), static_cast<uint64_t>(total));
}

// What one GET has learned so far, across its attempts.
struct Progress {
  uint64_t delivered = 0;        // bytes the sink has
  std::optional<uint64_t> total; // the first answer's Content-Length
  std::string etag;              // the first answer's ETag
};

// Whether the head of an answer continues the object `p` describes: "" when it does (with
// `skip` set to the bytes of it the sink already has), else why not.
std::string vet(const Response &h, Progress &p, bool resuming, const std::string &noun, uint64_t &skip) {
  auto length = util::parse_int(h.header("content-length"));
  if (!resuming) {
    p.etag = h.header("etag");
    if (h.status == 200 && length && *length >= 0) p.total = static_cast<uint64_t>(*length);
    return {};
  }
  if (!p.etag.empty() && h.header("etag") != p.etag)
    return "the " + noun + " changed between attempts (ETag " + p.etag + ", then " + h.header("etag") + ")";
  if (h.status == 206) {
    auto range = parse_content_range(h.header("content-range"));
    if (range && range->first == p.delivered && (!p.total || range->second == *p.total)) return {};
    return "the resumed answer covers '" + h.header("content-range") + "', not bytes " +
           std::to_string(p.delivered) + "- of the " + noun;
  }
  if (h.status == 200 && (!p.total || (length && static_cast<uint64_t>(*length) == *p.total))) {
    skip = p.delivered; // the whole object again (a server ignoring Range): pass over what was delivered
    return {};
  }
  return "unexpected HTTP " + std::to_string(h.status) + " to a resumed GET";
}

} // namespace

Status resumable_get(const RetryPolicy &policy, Sleeper &sleeper, const GetTarget &target, const Sink &sink,
                     const GetAttempt &attempt) {
  Progress p;
  for (int n = 1;; ++n) {
    const bool resuming = p.delivered > 0;
    uint64_t skip = 0; // bytes of this answer the sink already has
    std::string refusal;
    Headers extra;
    if (resuming) {
      extra.emplace_back("range", "bytes=" + std::to_string(p.delivered) + "-");
      if (!p.etag.empty()) extra.emplace_back("if-match", p.etag);
    }
    auto accept = [&](const Response &h) {
      refusal = vet(h, p, resuming, target.noun, skip);
      return refusal.empty();
    };
    auto counted = [&](const char *data, size_t len) {
      if (skip > 0) {
        auto k = static_cast<size_t>(std::min<uint64_t>(skip, len));
        skip -= k;
        data += k;
        len -= k;
        if (len == 0) return true;
      }
      p.delivered += len;
      return sink(data, len);
    };
    auto r = attempt(extra, counted, accept);
    if (r) {
      if (p.total && p.delivered != *p.total)
        return Error(Errc::storage_error, target.what + ": the body ended after " +
                                              std::to_string(p.delivered) + " of " +
                                              std::to_string(*p.total) + " bytes");
      return ok_status();
    }
    if (!refusal.empty()) return Error(Errc::storage_error, target.what + ": " + refusal);
    if (!retry_after(policy, sleeper, target.what, n, r.error(), 0)) return r.error();
    if (p.delivered > 0)
      util::log::info("resuming " + target.what + " at byte " + std::to_string(p.delivered) +
                      (p.total ? " of " + std::to_string(*p.total) : std::string{}));
  }
}

} // namespace lodge::http
