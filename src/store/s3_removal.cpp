#include "s3_removal.hpp"

#include <algorithm>
#include <lodge/store/lifecycle.hpp>
#include <map>
#include <optional>
#include <set>

namespace lodge::store {

namespace {
// DeleteObjects' limit per request.
constexpr size_t k_batch_keys = 1000;

// A key an XML body carries as it is: no control character (S3 warns that a carriage return
// or a line feed in a key does not survive an XML request).
bool xml_safe(const std::string &key) {
  return std::none_of(key.begin(), key.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
}

std::string common_prefix(const std::vector<const std::string *> &keys) {
  if (keys.empty()) return {};
  std::string out = *keys.front();
  for (const auto *k : keys) {
    auto [a, b] = std::mismatch(out.begin(), out.end(), k->begin(), k->end());
    out.erase(a, out.end());
  }
  return out;
}

using Results = std::vector<std::optional<Result<Removal>>>;

// The incomplete multipart uploads at the keys the batch settled with nothing kept (deleted,
// or nothing there), aborted: one listing of the keys' common prefix for the whole batch,
// where remove_owned lists once per key. A listing the server does not offer aborts nothing,
// as remove_owned's does; any other failure is each such key's error (its task is retried).
void abort_staged(s3::Client &client, const std::vector<PlannedRemoval> &plans, Results &out) {
  std::map<std::string, std::vector<size_t>> at; // key -> the plans settled there
  std::vector<const std::string *> keys;
  for (size_t i = 0; i < plans.size(); ++i) {
    if (!out[i] || !*out[i] || !(*out[i])->kept.empty() || (*out[i])->refused) continue;
    auto [it, fresh] = at.try_emplace(plans[i].key);
    it->second.push_back(i);
    if (fresh) keys.push_back(&it->first);
  }
  if (at.empty()) return;
  std::vector<std::pair<std::string, std::string>> uploads; // key, upload id
  auto listed = client.list_multipart_uploads(common_prefix(keys), [&](const s3::ListedUpload &u) {
    if (at.contains(u.key)) uploads.emplace_back(u.key, u.upload_id);
    return true;
  });
  auto fail = [&](const std::string &key, const Error &e) {
    for (size_t i : at[key])
      out[i] = e;
  };
  if (!listed) {
    if (listed.error().code == Errc::unsupported) return;
    for (const auto &[key, _] : at)
      fail(key, listed.error());
    return;
  }
  for (const auto &[key, id] : uploads)
    if (auto a = client.abort_multipart(key, id); !a) fail(key, a.error());
}
} // namespace

Result<PlannedRemoval> s3_plan_removal(s3::Client &client, bool tag_state, const std::string &key,
                                       const Stamp &stamp, DeleteGuard guard) {
  PlannedRemoval p;
  p.key = key;
  p.stamp = stamp;
  p.guard = guard;
  if (!xml_safe(key)) return p;
  auto h = client.head_object(key);
  if (!h && h.error().code == Errc::not_found) {
    p.per_object = false; // nothing there; its staged uploads are still looked for
    return p;
  }
  if (!h) return h.error();
  // A version id: the bucket is versioned now. remove_owned lists the key's versions.
  if (!h->version_id.empty()) return p;
  p.per_object = false;
  auto meta = h->metadata;
  adopt_legacy_metadata(meta);
  if (auto why = stamp_mismatch(meta, stamp.ledger_uuid, stamp.record_id)) {
    p.found.kept.push_back(key + ": " + *why);
    return p;
  }
  if (tag_state && guard == DeleteGuard::pending_only) {
    // As remove_owned: S3 has no delete conditional on tags, so they are read first.
    auto tags = client.get_object_tagging(key);
    if (!tags && tags.error().code != Errc::not_found && tags.error().code != Errc::unsupported)
      return tags.error();
    if (tags) {
      auto it = tags->find(std::string(lifecycle::k_s3_state_tag));
      if (it != tags->end() && it->second == "committed") {
        p.found.refused = key + " is tagged " + it->first + "=committed";
        return p;
      }
    }
  }
  p.present = true;
  p.etag = h->etag;
  return p;
}

std::vector<Result<Removal>>
s3_remove_planned(s3::Client &client, const std::vector<PlannedRemoval> &plans,
                  const std::function<Result<Removal>(const PlannedRemoval &)> &per_object) {
  Results out(plans.size());
  std::vector<size_t> slow;  // through remove_owned, after the batch
  std::vector<size_t> batch; // deleted together, each on its ETag
  std::set<std::string> seen;
  for (size_t i = 0; i < plans.size(); ++i) {
    const auto &p = plans[i];
    // Nothing read (per_object), or a second task at a key: it looks again once the first is done.
    const bool again =
        p.per_object || (p.present && p.found.kept.empty() && !p.found.refused && !seen.insert(p.key).second);
    if (again)
      slow.push_back(i);
    else if (!p.found.kept.empty() || p.found.refused)
      out[i] = p.found;
    else if (!p.present)
      out[i] = Removal{};
    else
      batch.push_back(i);
  }
  for (size_t from = 0; from < batch.size(); from += k_batch_keys) {
    const size_t to = std::min(batch.size(), from + k_batch_keys);
    std::vector<s3::Client::DeleteEntry> entries;
    for (size_t j = from; j < to; ++j)
      entries.push_back({plans[batch[j]].key, plans[batch[j]].etag});
    auto done = client.delete_objects(entries);
    for (size_t j = from; j < to; ++j) {
      const size_t i = batch[j];
      if (!done) {
        // A server without DeleteObjects: one request per object, as before.
        if (done.error().code == Errc::unsupported)
          slow.push_back(i);
        else
          out[i] = done.error();
        continue;
      }
      const auto &st = done->at(j - from);
      if (st) {
        Removal r;
        r.removed = 1;
        out[i] = r;
      } else if (st.error().code == Errc::precondition_failed) {
        slow.push_back(i); // changed since its HEAD: looked at again, as remove_owned does
      } else {
        out[i] = st.error();
      }
    }
  }
  abort_staged(client, plans, out);
  for (size_t i : slow)
    out[i] = per_object(plans[i]);
  std::vector<Result<Removal>> results;
  results.reserve(out.size());
  for (auto &r : out)
    results.push_back(std::move(*r));
  return results;
}

} // namespace lodge::store
