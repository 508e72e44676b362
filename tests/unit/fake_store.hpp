#pragma once
// One ObjectStore fake for the unit tests: keeps objects in memory, records every call
// (operation, key, whether it succeeded) and fails calls on script. Several instances can
// share one state, like several connections to one server (FakeStore::connection()).

#include <algorithm>
#include <deque>
#include <functional>
#include <lodge/store/store.hpp>
#include <lodge/util/clock.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

namespace lodge::test {

struct StoreCall {
  std::string op; // put, head, read, remove_owned, remove_small, list, begin_staged, put_part,
                  // list_parts, complete_staged, abort_staged, list_staged, get_small, put_small,
                  // mark_committed, flush, presign_put
  std::string key;
  bool ok = true;
};

class FakeStore final : public store::ObjectStore {
  struct Failure {
    std::string op;
    Error error;
    int times; // < 0: until cleared
  };
  struct State {
    std::mutex mutex;
    std::vector<StoreCall> calls;
    std::vector<Failure> failures;
    std::map<std::string, std::pair<store::ObjectInfo, std::string>> objects;
    std::map<std::string, std::string> uploads;                    // upload id -> key
    std::map<std::string, std::map<int, store::StoredPart>> parts; // upload id -> its parts as stored
    std::vector<store::Part> completed;                            // the parts of the last complete_staged
    std::map<std::string, std::string> state_tags;       // key -> "pending" | "committed" (tagging fakes)
    std::map<std::string, store::ObjectOptions> options; // key -> what the put asked (tags, class, ...)
    std::map<std::string, std::map<std::string, std::string>>
        committed_tags;                                        // the user tags mark_committed wrote
    std::map<std::string, store::PresignPutRequest> presigned; // key -> what its URL allows
    bool tags = false; // behave as a store with state tags and guarded deletes
    int next_upload = 1;
    int next_tag = 0;
  };

public:
  FakeStore() : m_state(std::make_shared<State>()) {}

  // Another connection to the same fake server: shares objects, calls and failures.
  [[nodiscard]] std::unique_ptr<FakeStore> connection() const {
    auto c = std::unique_ptr<FakeStore>(new FakeStore(m_state, on_put_part));
    c->on_put = on_put;
    c->on_bytes = on_bytes;
    return c;
  }

  // Makes the fake tag objects as Azure does: puts tag pending, mark_committed tags
  // committed, a pending_only delete of a committed object is PRECONDITION_FAILED.
  void enable_state_tags() {
    std::lock_guard lock(m_state->mutex);
    m_state->tags = true;
  }
  // What the put of `key` asked beyond its bytes.
  [[nodiscard]] store::ObjectOptions options_of(const std::string &key) const {
    std::lock_guard lock(m_state->mutex);
    auto it = m_state->options.find(key);
    return it == m_state->options.end() ? store::ObjectOptions{} : it->second;
  }
  // The user tags mark_committed wrote with the committed tag.
  [[nodiscard]] std::map<std::string, std::string> committed_tags(const std::string &key) const {
    std::lock_guard lock(m_state->mutex);
    auto it = m_state->committed_tags.find(key);
    return it == m_state->committed_tags.end() ? std::map<std::string, std::string>{} : it->second;
  }
  // The object's state tag ("" when none).
  [[nodiscard]] std::string state_tag(const std::string &key) const {
    std::lock_guard lock(m_state->mutex);
    auto it = m_state->state_tags.find(key);
    return it == m_state->state_tags.end() ? std::string{} : it->second;
  }
  void set_state_tag(const std::string &key, const std::string &tag) {
    std::lock_guard lock(m_state->mutex);
    m_state->state_tags[key] = tag;
  }

  // Direct uploads: the URL names the key; what it allows is kept (presigned()) so a test
  // can send what a client holding it would.
  Result<store::PresignedPut> presign_put(const store::PresignPutRequest &req) override {
    std::lock_guard lock(m_state->mutex);
    if (auto e = scripted("presign_put", req.key)) return *e;
    m_state->presigned[req.key] = req;
    record("presign_put", req.key, true);
    store::PresignedPut out;
    out.url = "fake://put/" + req.key;
    return out;
  }
  [[nodiscard]] std::optional<store::PresignPutRequest> presigned(const std::string &key) const {
    std::lock_guard lock(m_state->mutex);
    auto it = m_state->presigned.find(key);
    return it == m_state->presigned.end() ? std::nullopt : std::optional(it->second);
  }

  // Runs inside put_part, before it records, outside any lock (to hold parts in flight).
  std::function<void(int number)> on_put_part;
  // Runs inside put, first, outside any lock (to look at the ledger as a PUT begins, or to
  // hold it in flight). Connections made later get it too.
  std::function<void(const std::string &key)> on_put;
  // Runs as each KiB of a watched body (store::Body::watch: a PUT's or a part's) leaves, with
  // that body's bytes sent so far, outside any lock (to move a clock, or to hold the bytes).
  std::function<void(uint64_t sent)> on_bytes;

  // The next `times` calls of op fail with e (times < 0: every call until cleared).
  void fail(const std::string &op, Error e, int times = -1) {
    std::lock_guard lock(m_state->mutex);
    m_state->failures.push_back({op, std::move(e), times});
  }
  void clear_failures() {
    std::lock_guard lock(m_state->mutex);
    m_state->failures.clear();
  }

  // Every call so far, in order.
  [[nodiscard]] std::vector<StoreCall> calls() const {
    std::lock_guard lock(m_state->mutex);
    return m_state->calls;
  }
  // The keys of the calls of op that succeeded, in order.
  [[nodiscard]] std::vector<std::string> succeeded(const std::string &op) const {
    std::vector<std::string> out;
    for (const auto &c : calls())
      if (c.op == op && c.ok) out.push_back(c.key);
    return out;
  }
  // The keys whose remove_owned removed an object (or found none), in order.
  [[nodiscard]] std::vector<std::string> removed() const { return succeeded("remove_owned"); }
  [[nodiscard]] size_t count(const std::string &op) const {
    auto all = calls();
    return static_cast<size_t>(
        std::count_if(all.begin(), all.end(), [&](const auto &c) { return c.op == op; }));
  }
  [[nodiscard]] std::vector<store::Part> completed_parts() const {
    std::lock_guard lock(m_state->mutex);
    return m_state->completed;
  }
  // What another tool does behind lodge's back: the object goes (or its metadata changes)
  // without a call being recorded.
  void forget(const std::string &key) {
    std::lock_guard lock(m_state->mutex);
    m_state->objects.erase(key);
  }
  void set_metadata(const std::string &key, const std::string &name, const std::string &value) {
    std::lock_guard lock(m_state->mutex);
    m_state->objects.at(key).first.metadata[name] = value;
  }
  [[nodiscard]] bool has(const std::string &key) const {
    std::lock_guard lock(m_state->mutex);
    return m_state->objects.count(key) > 0;
  }

  [[nodiscard]] std::string describe() const override { return "fake://"; }
  [[nodiscard]] const std::string &key_prefix() const override { return m_prefix; }

  Result<store::PutResult> put(const store::PutRequest &req) override {
    if (on_put) on_put(req.key);
    auto sent = send_watched(req.body, "PUT " + req.key);
    std::lock_guard lock(m_state->mutex);
    if (!sent) return refuse("put", req.key, sent.error().code, sent.error().message);
    if (auto e = scripted("put", req.key)) return *e;
    if (m_state->objects.count(req.key)) return refuse("put", req.key, Errc::precondition_failed, "exists");
    std::string bytes(req.body.size, '\0');
    if (req.body.fd >= 0 && req.body.size > 0 &&
        ::pread(req.body.fd, bytes.data(), bytes.size(), static_cast<off_t>(req.body.offset)) !=
            static_cast<ssize_t>(bytes.size()))
      return refuse("put", req.key, Errc::unreadable, "short read of the body");
    store::ObjectInfo info;
    info.key = req.key;
    info.size = req.body.size;
    info.etag = "etag-" + req.key;
    info.content_type = req.content_type;
    info.metadata = req.metadata;
    info.sha256_hex = req.body.sha256_hex;
    m_state->objects[req.key] = {info, std::move(bytes)};
    m_state->options[req.key] = req.options;
    if (m_state->tags) m_state->state_tags[req.key] = "pending";
    record("put", req.key, true);
    return store::PutResult{info.etag, ""};
  }

  Result<store::ObjectInfo> head(const std::string &key) override {
    std::lock_guard lock(m_state->mutex);
    if (auto e = scripted("head", key)) return *e;
    auto it = m_state->objects.find(key);
    if (it == m_state->objects.end()) return refuse("head", key, Errc::not_found, "no such object");
    record("head", key, true);
    return it->second.first;
  }

  Status read(const std::string &key, const std::function<bool(const char *, size_t)> &sink) override {
    std::string bytes;
    {
      std::lock_guard lock(m_state->mutex);
      if (auto e = scripted("read", key)) return *e;
      auto it = m_state->objects.find(key);
      if (it == m_state->objects.end()) return refuse("read", key, Errc::not_found, "no such object");
      record("read", key, true);
      bytes = it->second.second;
    }
    if (!bytes.empty() && !sink(bytes.data(), bytes.size())) return Error(Errc::internal, "reading aborted");
    return ok_status();
  }

  [[nodiscard]] store::Capabilities capabilities() const override {
    std::lock_guard lock(m_state->mutex);
    store::Capabilities c;
    c.staged_listing = true;
    c.state_tags = m_state->tags;
    c.guarded_delete = m_state->tags;
    return c;
  }

  Status mark_committed(const std::string &key,
                        const std::map<std::string, std::string> &user_tags) override {
    std::lock_guard lock(m_state->mutex);
    if (!m_state->tags) return ok_status();
    if (auto e = scripted("mark_committed", key)) return *e;
    if (!m_state->objects.count(key)) return refuse("mark_committed", key, Errc::not_found, "no such object");
    m_state->state_tags[key] = "committed";
    m_state->committed_tags[key] = user_tags;
    record("mark_committed", key, true);
    return ok_status();
  }

  Status mark_pending(const std::string &key,
                      const std::map<std::string, std::string> & /*user_tags*/) override {
    std::lock_guard lock(m_state->mutex);
    if (!m_state->tags) return ok_status();
    if (auto e = scripted("mark_pending", key)) return *e;
    if (!m_state->objects.count(key)) return refuse("mark_pending", key, Errc::not_found, "no such object");
    m_state->state_tags[key] = "pending";
    record("mark_pending", key, true);
    return ok_status();
  }

  Result<std::optional<std::string>> guard_refusal(const std::string &key) override {
    std::lock_guard lock(m_state->mutex);
    if (!m_state->tags) return Error(Errc::unsupported, "no tags");
    if (!m_state->objects.count(key)) return refuse("guard_refusal", key, Errc::not_found, "no such object");
    if (m_state->state_tags[key] == "pending") return std::optional<std::string>();
    return std::optional<std::string>("is not tagged pending");
  }

  Status flush() override {
    std::lock_guard lock(m_state->mutex);
    if (auto e = scripted("flush", "")) return *e;
    record("flush", "", true);
    return ok_status();
  }
  // Every connection of one fake shares one state, as file:// connections of one root do.
  [[nodiscard]] const void *flush_domain() const override { return m_state.get(); }
  [[nodiscard]] std::function<Status()> flusher() const override {
    return [conn = std::shared_ptr<FakeStore>(connection())] { return conn->flush(); };
  }

  // As the real stores: the object goes only if its stamp names `stamp` (else it is kept,
  // and the call recorded as not ok); with state tags a pending_only delete keeps an
  // object not tagged pending (refused).
  Result<store::Removal> remove_owned(const std::string &key, const store::Stamp &stamp,
                                      store::DeleteGuard guard) override {
    std::lock_guard lock(m_state->mutex);
    if (auto e = scripted("remove_owned", key)) return *e;
    store::Removal out;
    auto it = m_state->objects.find(key);
    if (it != m_state->objects.end()) {
      if (auto why = store::stamp_mismatch(it->second.first.metadata, stamp.ledger_uuid, stamp.record_id)) {
        out.kept.push_back(key + ": " + *why);
        record("remove_owned", key, false);
        return out;
      }
      if (m_state->tags && guard == store::DeleteGuard::pending_only &&
          m_state->state_tags[key] != "pending") {
        out.refused = key + " is not tagged pending";
        record("remove_owned", key, false);
        return out;
      }
      m_state->objects.erase(it);
      m_state->state_tags.erase(key);
      ++out.removed;
    }
    for (auto u = m_state->uploads.begin(); u != m_state->uploads.end();)
      u = u->second == key ? m_state->uploads.erase(u) : std::next(u);
    record("remove_owned", key, true);
    return out;
  }

  Status remove_small(const std::string &key) override {
    std::lock_guard lock(m_state->mutex);
    if (auto e = scripted("remove_small", key)) return *e;
    m_state->objects.erase(key);
    record("remove_small", key, true);
    return ok_status();
  }

  Status list(const std::string &prefix,
              const std::function<bool(const store::ObjectInfo &)> &visit) override {
    std::vector<store::ObjectInfo> found;
    {
      std::lock_guard lock(m_state->mutex);
      if (auto e = scripted("list", prefix)) return *e;
      record("list", prefix, true);
      for (const auto &[k, v] : m_state->objects)
        if (k.compare(0, prefix.size(), prefix) == 0) {
          found.push_back(v.first);
          if (m_state->tags) found.back().state_tag = m_state->state_tags[k]; // as Azure lists them
        }
    }
    for (const auto &o : found)
      if (!visit(o)) break;
    return ok_status();
  }

  Result<std::string> begin_staged(const store::StagedRequest &req) override {
    const auto &key = req.key;
    std::lock_guard lock(m_state->mutex);
    if (auto e = scripted("begin_staged", key)) return *e;
    std::string id = "upload-" + std::to_string(m_state->next_upload++);
    m_state->uploads[id] = key;
    record("begin_staged", key, true);
    return id;
  }

  Result<store::Part> put_part(const std::string &key, const std::string &upload_id, int number,
                               const store::Body &b, int64_t deadline_steady_ms) override {
    if (on_put_part) on_put_part(number);
    // As a real store's request: one that ends past its deadline fails (a part held by the hook).
    if (deadline_steady_ms > 0 && util::steady_ms() >= deadline_steady_ms)
      return Error(Errc::deadline_exceeded, "Timeout was reached (PUT part " + std::to_string(number) + ")");
    auto sent = send_watched(b, "PUT part " + std::to_string(number));
    std::lock_guard lock(m_state->mutex);
    if (!sent) return refuse("put_part", key, sent.error().code, sent.error().message);
    if (auto e = scripted("put_part", key)) return *e;
    record("put_part", key, true);
    if (m_state->uploads.count(upload_id)) {
      store::StoredPart sp;
      sp.number = number;
      sp.size = b.size;
      sp.etag = "etag-" + std::to_string(number);
      sp.sha256_hex = b.sha256_hex;
      m_state->parts[upload_id][number] = sp;
    }
    return store::Part{number, "etag-" + std::to_string(number), b.sha256_hex};
  }

  Result<std::vector<store::StoredPart>> list_parts(const std::string &key,
                                                    const std::string &upload_id) override {
    std::lock_guard lock(m_state->mutex);
    if (auto e = scripted("list_parts", key)) return *e;
    if (!m_state->uploads.count(upload_id))
      return refuse("list_parts", key, Errc::not_found, "no such upload");
    record("list_parts", key, true);
    std::vector<store::StoredPart> out;
    for (const auto &[n, p] : m_state->parts[upload_id])
      out.push_back(p);
    return out;
  }

  // A part as the server would list it, written by someone else (other bytes, another size).
  void plant_part(const std::string &upload_id, const store::StoredPart &p) {
    std::lock_guard lock(m_state->mutex);
    m_state->parts[upload_id][p.number] = p;
  }
  // The staged uploads begun and neither completed nor aborted, by id.
  [[nodiscard]] std::vector<std::string> open_uploads() const {
    std::lock_guard lock(m_state->mutex);
    std::vector<std::string> out;
    for (const auto &[id, key] : m_state->uploads)
      out.push_back(id);
    return out;
  }

  Result<store::PutResult> complete_staged(const store::StagedRequest &req, const std::string &upload_id,
                                           const std::vector<store::Part> &parts, int64_t) override {
    const auto &key = req.key;
    std::lock_guard lock(m_state->mutex);
    if (auto e = scripted("complete_staged", key)) return *e;
    if (m_state->uploads.erase(upload_id) == 0)
      return refuse("complete_staged", key, Errc::not_found, "no such upload");
    m_state->parts.erase(upload_id);
    if (m_state->objects.count(key))
      return refuse("complete_staged", key, Errc::precondition_failed, "exists");
    if (m_state->tags) m_state->state_tags[key] = "pending";
    m_state->completed = parts;
    store::ObjectInfo info;
    info.key = key;
    info.etag = "final";
    m_state->objects[key] = {info, ""};
    record("complete_staged", key, true);
    return store::PutResult{"final", ""};
  }

  Status abort_staged(const std::string &key, const std::string &upload_id) override {
    std::lock_guard lock(m_state->mutex);
    if (auto e = scripted("abort_staged", key)) return *e;
    m_state->uploads.erase(upload_id);
    m_state->parts.erase(upload_id);
    record("abort_staged", key, true);
    return ok_status();
  }

  Status list_staged(const std::string &prefix,
                     const std::function<bool(const store::StagedUpload &)> &visit) override {
    std::vector<store::StagedUpload> found;
    {
      std::lock_guard lock(m_state->mutex);
      if (auto e = scripted("list_staged", prefix)) return *e;
      record("list_staged", prefix, true);
      for (const auto &[id, key] : m_state->uploads)
        if (key.compare(0, prefix.size(), prefix) == 0) found.push_back({key, id, 0});
    }
    std::sort(found.begin(), found.end(), [](const auto &a, const auto &b) { return a.key < b.key; });
    for (const auto &u : found)
      if (!visit(u)) break;
    return ok_status();
  }

  Result<store::SmallObject> get_small(const std::string &key) override {
    std::lock_guard lock(m_state->mutex);
    if (auto e = scripted("get_small", key)) return *e;
    auto it = m_state->objects.find(key);
    if (it == m_state->objects.end()) return refuse("get_small", key, Errc::not_found, "no such object");
    record("get_small", key, true);
    return store::SmallObject{it->second.second, it->second.first.etag};
  }

  // Tags are "v1", "v2", ...: a conditional write is refused unless it names the current one.
  Result<std::string> put_small(const std::string &key, const std::string &bytes,
                                const std::string &if_tag) override {
    std::lock_guard lock(m_state->mutex);
    if (auto e = scripted("put_small", key)) return *e;
    auto it = m_state->objects.find(key);
    if (if_tag.empty() ? it != m_state->objects.end()
                       : (it == m_state->objects.end() || it->second.first.etag != if_tag))
      return refuse("put_small", key, Errc::precondition_failed, "condition not met");
    store::ObjectInfo info;
    info.key = key;
    info.size = bytes.size();
    info.etag = "v" + std::to_string(++m_state->next_tag);
    m_state->objects[key] = {info, bytes};
    record("put_small", key, true);
    return info.etag;
  }

  // Sets an object's bytes as another process (or a restored ledger's twin) would.
  void set_small(const std::string &key, const std::string &bytes) {
    std::lock_guard lock(m_state->mutex);
    store::ObjectInfo info;
    info.key = key;
    info.size = bytes.size();
    info.etag = "v" + std::to_string(++m_state->next_tag);
    m_state->objects[key] = {info, bytes};
  }

private:
  FakeStore(std::shared_ptr<State> s, std::function<void(int)> hook)
      : on_put_part(std::move(hook)), m_state(std::move(s)) {}

  // A watched body sent as a real store sends it: a KiB at a time, each told to its watch
  // (then on_bytes), failing once the watch's bound passed. Nothing to do for another body.
  Status send_watched(const store::Body &b, const std::string &what) const {
    if (b.watch == nullptr) return ok_status();
    auto passed = [&] { return util::steady_ms() >= b.watch->bound_ms(); };
    for (uint64_t sent = 0; sent < b.size;) {
      if (passed()) return Error(Errc::deadline_exceeded, "Timeout was reached (" + what + ")");
      const uint64_t n = std::min<uint64_t>(1024, b.size - sent);
      sent += n;
      b.watch->on_bytes(n);
      if (on_bytes) on_bytes(sent);
    }
    if (passed()) return Error(Errc::deadline_exceeded, "Timeout was reached (" + what + ")");
    return ok_status();
  }

  // With the lock held.
  void record(const std::string &op, const std::string &key, bool ok) {
    m_state->calls.push_back({op, key, ok});
  }
  std::optional<Error> scripted(const std::string &op, const std::string &key) {
    for (auto &f : m_state->failures) {
      if (f.op != op || f.times == 0) continue;
      if (f.times > 0) --f.times;
      record(op, key, false);
      return f.error;
    }
    return std::nullopt;
  }
  Error refuse(const std::string &op, const std::string &key, Errc code, const std::string &why) {
    record(op, key, false);
    return Error(code, op + " " + key + ": " + why);
  }

  std::shared_ptr<State> m_state;
  std::string m_prefix;
};

} // namespace lodge::test
